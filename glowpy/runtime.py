"""Runs host bundles on numpy arrays: the bundle's object is linked with the system C compiler
into a small harness (built with -Wall -Werror against the bundle's own header) that moves the
mutable region in and out through files."""
from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import tempfile

import jinja2
import numpy as np

from glowpy.codegen.names import legalize
from glowpy.errors import GlowpyError

_ENV = jinja2.Environment(loader=jinja2.PackageLoader("glowpy", "templates"), trim_blocks=True,
                          lstrip_blocks=True, undefined=jinja2.StrictUndefined)


class RuntimeError_(GlowpyError):
    pass


def find_cc() -> str:
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    raise RuntimeError_("no C compiler found (set CC or install gcc); glowpy.runtime links the "
                        "bundle's object with it")


class Bundle:
    """A compiled host bundle in `directory` named `name` (default: the only NAME.json there)."""

    def __init__(self, directory: str, name: str | None = None, cflags=(), runner=()):
        self.directory = directory
        if name is None:
            names = [f[:-5] for f in os.listdir(directory) if f.endswith(".json")]
            if len(names) != 1:
                raise RuntimeError_(f"{directory}: expected exactly one bundle, found {names}")
            name = names[0]
        self.name = name
        with open(os.path.join(directory, name + ".json")) as f:
            self.manifest = json.load(f)
        self.runner = list(runner)  # e.g. ["valgrind", "--error-exitcode=9"]
        self._work = tempfile.mkdtemp(prefix="glowpy-run-")
        atexit.register(shutil.rmtree, self._work, True)
        self.exe = self._build(list(cflags))

    def _build(self, cflags) -> str:
        m = self.manifest
        api = m["bundle_api"]
        src = _ENV.get_template("harness.c.j2").render(
            name=self.name, api=api, header=os.path.abspath(os.path.join(self.directory, self.name + ".h")),
            upper=legalize(self.name).upper(), config=f"{legalize(self.name)}_config", entry=m["entry"])
        c = os.path.join(self._work, "harness.c")
        with open(c, "w") as f:
            f.write(src)
        exe = os.path.join(self._work, "harness")
        cmd = [find_cc(), "-O1", "-std=c11", "-Wall", "-Werror", *cflags, c,
               os.path.join(self.directory, self.name + ".o"), "-o", exe, "-lm"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError_(f"linking bundle '{self.name}' failed:\n{' '.join(cmd)}\n{r.stderr}")
        return exe

    def mutable_image(self, inputs: dict) -> bytearray:
        img = bytearray(self.manifest["memory"]["mutable"])
        for p in self.manifest["inputs"]:
            key = p["name"] if p["name"] in inputs else p["symbol"]
            if key not in inputs:
                raise RuntimeError_(f"missing input '{p['name']}'")
            a = np.ascontiguousarray(inputs[key], dtype=p["dtype"]).reshape(p["shape"])
            img[p["offset"]:p["offset"] + p["bytes"]] = a.tobytes()
        return img

    def run(self, inputs: dict, repeat: int = 1, timeout: float = 600) -> dict:
        """Runs the bundle; returns {output name: array}. After it, `self.best_ns` holds the
        fastest of `repeat` calls."""
        i, o = os.path.join(self._work, "in.bin"), os.path.join(self._work, "out.bin")
        with open(i, "wb") as f:
            f.write(self.mutable_image(inputs))
        w = os.path.join(self.directory, self.name + ".weights.bin")
        r = subprocess.run(self.runner + [self.exe, w, i, o, str(repeat)], capture_output=True,
                           text=True, timeout=timeout)
        if r.returncode:
            raise RuntimeError_(f"bundle '{self.name}' failed (exit {r.returncode}): {r.stderr[-4000:]}")
        self.best_ns = float(r.stdout.split()[-1])
        self.last_stderr = r.stderr
        with open(o, "rb") as f:
            img = f.read()
        out = {}
        for p in self.manifest["outputs"]:
            out[p["name"]] = np.frombuffer(img[p["offset"]:p["offset"] + p["bytes"]],
                                           dtype=p["dtype"]).reshape(p["shape"]).copy()
        return out
