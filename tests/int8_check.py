"""One check the int8 kernel tests share: a model compiled with several option sets (the
kernel under test first, then the ones it must equal), each bundle run, every output equal bit
for bit across them and to the integer ops' numpy references (with the rounding the options
ask for), and within `ort_lsb` of onnxruntime where given (it rounds its requantization in
float, so one LSB apart; int32 sums must equal its exactly). The first option set's compile
also writes its -dump-memory-report (`plan`), so a test that checks which kernels the layers
took does not compile that bundle a second time for it."""
from __future__ import annotations

import json

import numpy as np
import onnx

import glowpy
from glowpy.frontend.onnx import load_onnx
from glowpy.ir.evaluate import evaluate
from glowpy.ir.passes.pipeline import optimize
from glowpy.runtime import Bundle
from test_int8 import lsb
from util import run_onnxruntime


def byte_feeds(shapes: dict, dtype, rng) -> dict:
    """Inputs of every value of `dtype` (int8 or uint8), one array per name and shape."""
    lo = int(np.iinfo(dtype).min)
    return {n: rng.integers(lo, lo + 256, s).astype(dtype) for n, s in shapes.items()}


def same_as_references(model, feeds, tmp_path, options: list[dict], ort_lsb: int | None = 1):
    """(BundleInfo, outputs) of the first option set, after the checks above."""
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    runs = []
    for i, opts in enumerate(options):
        if not i:
            opts = dict(opts, dump_memory_report=str(tmp_path / "b0.memory.json"))
        info = glowpy.compile(path, str(tmp_path / f"b{i}"), **opts)
        runs.append((info, Bundle(str(tmp_path / f"b{i}"), info.name).run(feeds)))
    g = load_onnx(path)
    g.quant_rounding = options[0].get("quantization_rounding", "even")  # what the option sets
    refs = evaluate(optimize(g), feeds)
    expected = run_onnxruntime(model, feeds) if ort_lsb is not None else [None] * len(refs)
    info, got = runs[0]
    assert len(refs) == len(info.outputs) == len(expected)
    for p, r, e in zip(info.outputs, refs, expected):
        y = got[p["name"]]
        assert y.shape == r.shape, p["name"]
        for i, (_, other) in enumerate(runs[1:], 1):
            np.testing.assert_array_equal(y, other[p["name"]],
                                          err_msg=f"{p['name']}: vs {options[i]}")
        np.testing.assert_array_equal(y, r, err_msg=f"{p['name']}: vs reference")
        if e is not None:
            assert y.dtype == e.dtype and y.shape == e.shape, p["name"]
            limit = 0 if y.dtype == np.int32 else ort_lsb
            assert lsb(y, e) <= limit, f"{p['name']}: {lsb(y, e)} LSB from onnxruntime"
    return info, got


def aarch64_equals_references(model, feeds, tmp_path):
    """Compiles `model` for AArch64, runs it under qemu-aarch64 (test_cross.run_on_aarch64) and
    checks every output against the integer ops' numpy references bit for bit."""
    from test_cross import run_on_aarch64
    info, outs = run_on_aarch64(model, feeds, str(tmp_path / "run"))
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    refs = evaluate(optimize(load_onnx(path)), feeds)
    assert len(outs) == len(info.outputs) == len(refs)
    for p, y, r in zip(info.outputs, outs, refs):
        np.testing.assert_array_equal(y.reshape(r.shape), r, err_msg=p["name"])


def plan(tmp_path) -> list:
    """The instructions of the memory report of same_as_references' first option set (its
    kernels, variants and parameters) compiled into tmp_path."""
    with open(tmp_path / "b0.memory.json") as f:
        return json.load(f)["instructions"]


def exact_against_direct(model, feeds, tmp_path, opts: dict, dtype, saturated: int):
    """same_as_references for `opts` against the scalar integer QConv kernel (QConv:direct),
    within 1 LSB of onnxruntime where the rounding is its own ("even"); output `saturated`
    has a 2**30 bias in its first channel, which must saturate it, and every output must
    spread over more than 20 values (not a clamp)."""
    info, got = same_as_references(model, feeds, tmp_path,
                                   [opts, dict(opts, kernel_variants={"QConv": "direct"})],
                                   ort_lsb=1 if opts.get("quantization_rounding", "even") ==
                                   "even" else None)
    sat = got[info.outputs[saturated]["name"]][0, 0]
    assert np.all(sat == np.iinfo(dtype).max)  # the 2**30 bias saturates its channel
    for p in info.outputs:
        assert len(np.unique(got[p["name"]])) > 20, p["name"]  # a spread, not a clamp
