"""Compiles each (model, options) once per test session, so the planner tests and the
optimization-equivalence tests share bundles. Also reads reference data in numeric file order
(output_10 after output_9) and the sizes of an object's writable sections."""
from __future__ import annotations

import atexit
import functools
import glob
import os
import re
import shutil
import tempfile

import onnx
from onnx import numpy_helper

import glowpy
from glowpy import elf
from util import MODELS, model_path

_ROOT = tempfile.mkdtemp(prefix="glowpy-test-bundles-")
atexit.register(shutil.rmtree, _ROOT, True)


@functools.lru_cache(maxsize=None)
def _compile(name: str, options: tuple):
    d = os.path.join(_ROOT, f"{name}-{len(os.listdir(_ROOT))}")
    opts = dict(options)
    report = os.path.join(d, "memory.json")
    os.makedirs(d)
    info = glowpy.compile(model_path(name), d, dump_memory_report=report, **opts)
    return info, d, report


def compiled(name: str, **options):
    """(BundleInfo, directory, memory report path) of `name` compiled with `options`."""
    return _compile(name, tuple(sorted(options.items())))


def reference(name: str, index: int = 0):
    """(inputs, outputs) of test_data_set_<index>, in numeric file order."""
    d = os.path.join(MODELS, f"{name}_data", f"test_data_set_{index}")

    def files(kind):
        fs = glob.glob(os.path.join(d, f"{kind}_*.pb"))
        return sorted(fs, key=lambda f: int(re.search(r"_(\d+)\.pb$", f).group(1)))

    load = lambda f: numpy_helper.to_array(onnx.load_tensor(f))  # noqa: E731
    return [load(f) for f in files("input")], [load(f) for f in files("output")]


def writable_section_bytes(path: str) -> dict:
    """{section name: size} of the allocated, writable sections of an ELF object (.data,
    .bss, .sdata, ...): the memory the object itself would take in RAM."""
    return elf.read(path).section_bytes(elf.SHF_WRITE)
