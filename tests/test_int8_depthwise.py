"""The 3x3 depthwise int8 kernel of DSP cores (QConv "depthwise_dsp",
glowpy/codegen/kernels/int8/depthwise.py), run on emulated Cortex-M cores: every shape class it
distinguishes (odd/even channel counts and widths, stride 1 and 2 along the row, strides that
differ per dim, padding on each side including rows entirely in the padding, rows narrower
than a word, batch 2, per-channel and per-tensor multipliers, int8 and uint8 inputs with a
nonzero zero point, Relu/Clip folded into the clamp) equals the integer ops' numpy references
bit for bit and onnxruntime within 1 LSB, as do the fully connected layers of QMatMul "dsp";
and qmath.ties_possible, which lets both kernels drop the half-even tie correction, never
misses a tie."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

import glowpy
from glowpy.frontend.onnx import load_onnx
from glowpy.ir import qmath
from glowpy.ir.evaluate import evaluate
from glowpy.ir.passes.pipeline import optimize
from test_int8 import QDQ, lsb, run_on_board
from util import make_graph_model, run_onnxruntime

# (input shape, strides, pads [top, left, bottom, right], activation, per-channel weights)
CASES = [
    ((1, 5, 7, 13), [1, 1], [1, 1, 1, 1], "Relu", True),    # odd C, odd width: a single at the end
    ((1, 5, 7, 13), [2, 2], [0, 0, 1, 1], None, True),      # TF "same" with stride 2
    ((1, 5, 7, 13), [2, 2], [1, 1, 1, 1], "Clip", False),   # per-tensor multiplier
    ((1, 6, 10, 5), [1, 1], [1, 1, 1, 1], "Relu", True),    # keyword spotting's shape class
    ((1, 6, 10, 5), [1, 1], [0, 0, 0, 0], None, True),      # no padding
    ((1, 3, 4, 3), [1, 1], [1, 1, 1, 1], None, True),       # rows narrower than a word
    ((1, 3, 4, 3), [2, 2], [2, 1, 0, 2], None, True),       # a row in the padding, uneven pads
    ((2, 4, 9, 10), [2, 1], [1, 2, 1, 0], "Relu", True),    # batch 2, strides (2, 1)
    ((1, 2, 12, 20), [1, 2], [1, 1, 1, 1], None, True),     # long rows: loops of interior pairs
    ((1, 3, 12, 6), [2, 2], [0, 0, 1, 1], "Relu", True),    # VWW's 12x12 -> 6x6: narrow rows,
                                                            # two output rows at a time
    # power-of-two scales: the multiplier is exactly 2**-6 (q = 2**30), so exact ties occur and
    # the kernel keeps the half-even correction and the general requantization
    ((1, 4, 6, 9), [1, 1], [1, 1, 1, 1], "pow2", False),
]


def depthwise_model(dtype, rng):
    m = QDQ(dtype)
    lo = -128 if np.dtype(dtype) == np.int8 else 0
    feeds, outs = {}, []
    for i, (shape, strides, pads, act, per_channel) in enumerate(CASES):
        name, c = f"x{i}", shape[1]
        xs, xz, ys = 0.04 + 0.01 * i, lo + 100 + 3 * i, 0.05 + 0.01 * i
        feeds[name] = rng.integers(lo, lo + 256, shape).astype(dtype)
        if act == "pow2":
            xs, sw, ys = 1 / 16, np.float32(1 / 128), 1 / 32
            w = m.dq(m.c(rng.integers(-127, 128, (c, 1, 3, 3)).astype(np.int8)), sw, np.int8(0))
        else:
            w, sw = m.weight((c, 1, 3, 3), 0, rng, per_channel)
        y = m.op("Conv", [m.dq(name, xs, m.zp(xz)), w, m.bias(c, xs * sw, rng)], group=c,
                 strides=strides, pads=pads, kernel_shape=[3, 3])
        if act == "Relu":
            y = m.op("Relu", [y])
        elif act == "Clip":
            y = m.op("Clip", [y, m.c(np.float32(-1)), m.c(np.float32(2))])
        outs.append(m.q(y, ys, lo + 120 - 5 * i))
    return make_graph_model(m.nodes, feeds, outs, m.inits, opset=13), feeds


@pytest.mark.parametrize("dtype, board", [(np.int8, "mps2-an500"), (np.uint8, "mps2-an500"),
                                          (np.int8, "mps2-an505")],
                         ids=["int8-m7", "uint8-m7", "int8-m33"])
def test_depthwise_dsp_is_exact_on_cortex_m(dtype, board, tmp_path):
    model, feeds = depthwise_model(dtype, np.random.default_rng(5))
    run = run_exact(model, feeds, tmp_path, board, "QConv", ["depthwise_dsp"] * len(CASES))
    assert 0 < run["stack"] < 1024, run["stack"]
    folds = [v["params"]["short"] for v in run["variants"]]
    assert folds == [True] * (len(CASES) - 1) + [False], folds


def run_exact(model, feeds, tmp_path, board, op, variants) -> dict:
    """Compiles the model for the board's core, checks that `op`'s instructions took
    `variants`, runs it and compares every output with the integer ops' numpy references
    (exactly) and onnxruntime (1 LSB); returns the run."""
    from test_cross import BOARDS
    from toolchains import require_tool
    require_tool("arm-none-eabi-gcc")
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    ours = evaluate(optimize(load_onnx(path)), feeds)
    report = tmp_path / "m.json"
    info = glowpy.compile(path, str(tmp_path / "b"), target="arm", mcpu=BOARDS[board][0],
                          float_abi="hard", dump_memory_report=str(report))
    chosen = [i["variant"] for i in json.loads(report.read_text())["instructions"]
              if i["kernel"] == op]
    assert [v["name"] for v in chosen] == variants, chosen
    run = run_on_board(str(tmp_path / "b"), info.manifest, feeds, board)
    run["variants"] = chosen
    ort = run_onnxruntime(model, feeds)
    for p, got, want, e in zip(info.outputs, run["outputs"], ours, ort):
        got = got.reshape(want.shape)
        np.testing.assert_array_equal(got, want, err_msg=p["name"])
        assert lsb(got, e) <= 1, p["name"]
    return run


def test_ties_possible_never_misses_a_tie():
    """Against brute force over every |acc| <= bound: where it answers False, no acc ties."""
    rng = np.random.default_rng(3)
    checked = 0
    for _ in range(400):
        shift = int(rng.integers(10, 30))  # n = 31 - shift small enough for ties to occur
        tz = int(rng.integers(0, 12))
        q = (int(rng.integers(1 << 18, 1 << 19)) | 1) << tz
        bound = int(rng.integers(1, 1 << 12))
        acc = np.arange(-bound, bound + 1, dtype=np.int64)
        n = 31 - shift
        tie = ((acc * q) & ((1 << n) - 1)) == (1 << (n - 1))
        if not qmath.ties_possible(bound, q, shift):
            assert not tie.any(), (q, shift, bound)
            checked += 1
        else:  # and its condition is exact: acc = 2**(n-1-v2(q)) ties
            assert tie.any(), (q, shift, bound)
    assert 50 < checked < 350, checked


# (rows of A, K, N, per-column multipliers)
MATMULS = [(1, 40, 8, True), (2, 13, 6, True), (1, 36, 3, False), (1, 4, 5, True),
           (1, 96, 12, True), (1, 128, 8, True), (2, 256, 6, True), (1, 42, 9, True)]


def matmul_model(dtype, rng):
    """Fully connected layers through the QMatMul "dsp" variant's edge cases: K a multiple of
    128 (one unrolled pass, and two), of 32 (the long inner loop), of 8 only, even but not a
    multiple of 4 (paired loads, then the K % 4 bytes of the packed blocks), odd (word loads),
    N not a multiple of the block of 4, two rows of A, per-column and per-tensor multipliers,
    a nonzero A zero point."""
    m = QDQ(dtype)
    lo = -128 if np.dtype(dtype) == np.int8 else 0
    feeds, outs = {}, []
    for i, (rows, k_, n_, per_channel) in enumerate(MATMULS):
        name, vs, vz = f"v{i}", 0.05 + 0.01 * i, lo + 110 + 5 * i
        feeds[name] = rng.integers(lo, lo + 256, (rows, k_)).astype(dtype)
        w, sw = m.weight((n_, k_), 0, rng, per_channel)
        y = m.op("Gemm", [m.dq(name, vs, m.zp(vz)), w, m.bias(n_, vs * sw, rng)], transB=1)
        outs.append(m.q(y, 0.3 + 0.1 * i, lo + 127 - 9 * i))
    return make_graph_model(m.nodes, feeds, outs, m.inits, opset=13), feeds


@pytest.mark.parametrize("dtype, board", [(np.int8, "mps2-an500"), (np.uint8, "mps2-an500"),
                                          (np.int8, "mps2-an386"), (np.uint8, "mps2-an505")],
                         ids=["int8-m7", "uint8-m7", "int8-m4", "uint8-m33"])
def test_qmatmul_dsp_is_exact_on_cortex_m(dtype, board, tmp_path):
    """The packed blocks of 4 rows (matmul_dsp.pack_blocks) on the M7, M4 and M33."""
    model, feeds = matmul_model(dtype, np.random.default_rng(9))
    run = run_exact(model, feeds, tmp_path, board, "QMatMul", ["dsp"] * len(MATMULS))
    assert 0 < run["stack"] < 1024, run["stack"]
