"""The Cortex-M DSP convolution kernel (QConv variant "im2col": 4x2 / 3x2 / 2x4 register
blocks, weights re-laid out as channel-pair words, the input zero point folded into the bias,
ic-major or tap-major columns), the short requantization (kernels/int8/requant_fast.py) and
QAdd's tables (kernels/int8/qadd_table.py), on the emulated Cortex-M7 (and M4, M33).

Each case is one QDQ convolution compiled through the real path for -mcpu=cortex-m7, run as
firmware under QEMU and compared bit for bit with the integer ops' numpy references, and
within 1 LSB with onnxruntime. The shapes cover what the blocking has edges for: position
counts not a multiple of the block's positions, output channel counts not a multiple of the
block's, K (input channels x taps) not a multiple of 4, padding, stride 2, 1x1 and KxK, int8
and uint8 inputs with nonzero zero points, and multipliers for which rounding ties are
possible (the general requantization must then be kept)."""
from __future__ import annotations

import json
import re
import subprocess

import numpy as np
import onnx
import pytest

import glowpy
from glowpy.codegen.kernels.int8 import conv_im2col
from glowpy.codegen.kernels.int8 import im2col_stream as stream
from glowpy.frontend.onnx import load_onnx
from glowpy.ir.evaluate import evaluate
from glowpy.ir.ops.quant import int_conv
from glowpy.ir.passes.pipeline import optimize
from test_cross import BOARDS
from test_int8 import QDQ, lsb, run_on_board
from toolchains import require_tool
from util import make_graph_model, run_onnxruntime

# (name, in channels, out channels, input H x W, kernel, stride, pads, dtype)
CASES = [
    ("pw-c8-m6", 8, 6, (5, 5), 1, 1, 0, np.int8),          # 25 positions: 8 blocks + 1
    ("pw-c6-m5-uint8", 6, 5, (4, 5), 1, 1, 0, np.uint8),   # K = 6, odd M, 20 positions
    ("pw-stride2", 12, 4, (7, 7), 1, 2, 0, np.int8),
    ("3x3-pad-c3-m7", 3, 7, (6, 6), 3, 1, 1, np.int8),     # K = 27 (a first layer), odd M
    ("3x3-stride2-pad-uint8", 5, 4, (9, 8), 3, 2, 1, np.uint8),
    ("10x4-first-layer", 1, 8, (13, 7), (5, 4), (2, 2), (2, 1, 2, 1), np.int8),
    ("3x3-c16-m8", 16, 8, (5, 6), 3, 1, 1, np.int8),        # K = 144: 3 x 2 blocks
    ("3x3-c32-m6", 32, 6, (5, 5), 3, 1, 1, np.int8),        # K = 288: 2 x 4 blocks, M % 4
    ("1x1-c300-m3", 300, 3, (3, 3), 1, 1, 0, np.uint8),     # K = 300: 2 x 2 (M < 4)
    # channels in fours: tap-major columns; stride 1: neighbours slide
    ("5x5-c4-pad2-slide", 4, 5, (7, 9), 5, 1, 2, np.int8),
    ("3x3-c8-stride2-uint8", 8, 6, (9, 9), 3, 2, 1, np.uint8),
    # 1x1 stride 1: four-position columns from a word of each plane (build_words); K <= 32:
    # the per-block stream of 16-bit weights (im2col_stream)
    ("pw-c8-m16-stream", 8, 16, (6, 6), 1, 1, 0, np.int8),      # VWW's layer 3, 9 blocks
    ("pw-c16-m7-tail-uint8", 16, 7, (5, 3), 1, 1, 0, np.uint8),  # 15 positions: 3 blocks + 3
    ("pw-c32-m4", 32, 4, (3, 6), 1, 1, 0, np.int8),             # K = 32: the stream's largest
    ("pw-c42-m6-rolled", 42, 6, (4, 5), 1, 1, 0, np.int8),      # 10 groups in a loop + 2 chans
    ("pw-c64-m5-rolled4", 64, 5, (3, 4), 1, 1, 0, np.uint8),    # 16 groups, 4 per trip
]
WORDS = [c for c in CASES if c[0].startswith("pw-") and c[5] == 1]


def conv_model(cin, cout, hw, kernel, stride, pads, dtype, rng, pow2_scales=False, ws=None):
    m = QDQ(dtype)
    lo = -128 if np.dtype(dtype) == np.int8 else 0
    ks = (kernel, kernel) if isinstance(kernel, int) else kernel
    st = (stride, stride) if isinstance(stride, int) else stride
    pd = [pads] * 4 if isinstance(pads, int) else list(pads)
    xs, xz = (0.25, lo + 100) if pow2_scales else (0.05, lo + 117)
    w = rng.integers(-127, 128, (cout, cin) + ks).astype(np.int8)
    if ws is None:
        ws = (np.full(cout, 0.125, np.float32) if pow2_scales
              else rng.uniform(0.002, 0.02, cout).astype(np.float32))
    wq = m.dq(m.c(w), ws, np.zeros(cout, np.int8), 0)
    b = rng.integers(-3000, 3000, cout).astype(np.int32)
    bq = m.dq(m.c(b), xs * ws, np.zeros(cout, np.int32), 0)
    y = m.op("Conv", [m.dq("x", xs, m.zp(xz)), wq, bq], kernel_shape=list(ks), strides=list(st),
             pads=pd)
    out = m.q(m.op("Relu", [y]), 4.0 if pow2_scales else 0.5, lo + 3)
    feeds = {"x": rng.integers(lo, lo + 256, (1, cin) + tuple(hw)).astype(dtype)}
    return make_graph_model(m.nodes, feeds, [out], m.inits, opset=13), feeds


def run_case(tmp_path, model, feeds, board="mps2-an500", op="QConv"):
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    want = evaluate(optimize(load_onnx(path)), feeds)[0]
    report = tmp_path / "m.json"
    info = glowpy.compile(path, str(tmp_path / "b"), target="arm", mcpu=BOARDS[board][0],
                          float_abi="hard", dump_memory_report=str(report))
    variants = [i["variant"] for i in json.loads(report.read_text())["instructions"]
                if i["kernel"] == op]
    run = run_on_board(str(tmp_path / "b"), info.manifest, feeds, board)
    got = run["outputs"][0].reshape(want.shape)
    objdump = require_tool("arm-none-eabi-objdump", "binutils-arm-none-eabi")
    asm = subprocess.run([objdump, "-d", str(tmp_path / "b" / f"{info.name}.o")],
                         capture_output=True, text=True, check=True).stdout
    return got, want, variants, asm


@pytest.mark.parametrize("name, cin, cout, hw, kernel, stride, pads, dtype", CASES,
                         ids=[c[0] for c in CASES])
def test_dsp_conv_on_cortex_m7_is_exact(name, cin, cout, hw, kernel, stride, pads, dtype,
                                        tmp_path):
    rng = np.random.default_rng(sum(map(ord, name)))
    model, feeds = conv_model(cin, cout, hw, kernel, stride, pads, dtype, rng)
    got, want, variants, asm = run_case(tmp_path, model, feeds)
    assert [v["name"] for v in variants] == ["im2col"], variants
    # SMLAD in the blocks; the short requantization's SMMUL (+ADD: LLVM makes it SMMLA)
    assert "\tsmlad\t" in asm and re.search(r"\tsmml?[au]l?\t", asm)
    npos, nch = variants[0]["params"]["block"]
    ks = (kernel, kernel) if isinstance(kernel, int) else kernel
    col = -(-cin * ks[0] * ks[1] // 4) * 4 * 2  # bytes of one position's column
    p = min(4, max(conv_im2col.STACK_BYTES, 2 * col) // col)
    want_block = (2, 4) if p == 2 and cout >= 4 else (p, 2)
    words = kernel == 1 and stride == 1 and pads == 0
    short = conv_im2col.WORDS_BLOCK if words else conv_im2col.SHORT_BLOCK
    assert (npos, nch) == (short if col <= 16 else want_block)
    if words and npos == 4:  # the columns from words: SXTB16 then PKHBT / PKHTB
        assert "\tpkhbt\t" in asm and "\tpkhtb\t" in asm
    manifest = (tmp_path / "b" / "m.json").read_text()
    assert ('"dsp_stream"' in manifest) == (words and col <= 8 * stream.MAX_GROUPS)
    np.testing.assert_array_equal(got, want)
    assert lsb(got, run_onnxruntime(model, feeds)[0]) <= 1
    assert len(np.unique(got)) > 4, "the case exercises too few output values"


def test_dsp_conv_with_rounding_ties_keeps_the_general_requantization(tmp_path):
    """Power-of-two scales: the multiplier is 2**30, so the sums that are odd multiples of a
    small power of two round at an exact tie: requant_fast must decline (its plan answers
    None) and the outputs stay exact, ties included."""
    rng = np.random.default_rng(3)
    model, feeds = conv_model(8, 4, (6, 6), 3, 1, 1, np.int8, rng, pow2_scales=True)
    got, want, _, asm = run_case(tmp_path, model, feeds)
    np.testing.assert_array_equal(got, want)
    assert not re.search(r"\tsmml?[au]l?\t", asm)  # the general requantization
    # the sums do hit ties: acc * q is an odd multiple of 2**(n-1), n = 31 - shift
    g = optimize(load_onnx(str(tmp_path / "m.onnx")))
    node = next(n for n in g.nodes if n.op == "QConv")
    w, b, q, s = (np.asarray(node.inputs[i].const, np.int64) for i in range(1, 5))
    acc = int_conv(node, feeds["x"].astype(np.int64) - node.attrs["x_zp"], w) + \
        b.reshape(1, -1, 1, 1)
    n = 31 - int(s.reshape(-1)[0])
    p = acc * int(q.reshape(-1)[0])
    assert n >= 33 and int(((p & ((1 << n) - 1)) == 1 << (n - 1)).sum()) > 0


def test_pointwise_words_with_rounding_ties_keep_the_general_requantization(tmp_path):
    """A 1x1 layer over 8 channels whose requantization can tie: no stream (it carries
    requant_fast's parameters), the word columns with int8 weights, exact."""
    rng = np.random.default_rng(4)
    model, feeds = conv_model(8, 6, (5, 4), 1, 1, 0, np.int8, rng, pow2_scales=True)
    got, want, variants, asm = run_case(tmp_path, model, feeds)
    assert [v["name"] for v in variants] == ["im2col"], variants
    assert tuple(variants[0]["params"]["block"]) == conv_im2col.WORDS_BLOCK
    assert not re.search(r"\tsmml?[au]l?\t", asm) and "\tpkhtb\t" in asm
    assert '"dsp_stream"' not in (tmp_path / "b" / "m.json").read_text()
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(got)) > 4


def test_wide_weights_are_the_lanes_sxtb16_makes():
    """im2col_stream.wide_weights: each packed word (w_a[k], w_b[k], w_a[k+2], w_b[k+2])
    becomes (w_a[k], w_a[k+2]) and (w_b[k], w_b[k+2]) as 16-bit lanes, which is what SXTB16
    and SXTB16 ROR #8 give of it; the stream puts them after each block's biases."""
    rng = np.random.default_rng(0)
    w = rng.integers(-128, 128, (6, 12)).astype(np.int8)
    wp = conv_im2col.pack_weights(w, 2)
    words = wp.reshape(-1, 4).astype(np.int16)
    lanes = stream.wide_weights(wp).reshape(-1, 2, 2)
    np.testing.assert_array_equal(lanes[:, 0], words[:, [0, 2]])  # SXTB16
    np.testing.assert_array_equal(lanes[:, 1], words[:, [1, 3]])  # SXTB16 ROR #8
    assert stream.wide_weights(wp).nbytes == 2 * wp.nbytes


def test_short_requantization_with_extreme_multipliers_is_exact(tmp_path):
    """requant_fast's edges: a channel whose multiplier rounds to q = 0 (shift < -31: its
    outputs are y_zp) and one with m = -1 - shift = 25, where y_zp * 2**m no longer fits the
    SMMLA addend beside the rounding half (y_zp is then added after the shift); the other
    channels' outputs vary. Exact on the M7 with the short form in use."""
    rng = np.random.default_rng(11)
    ws = rng.uniform(0.002, 0.02, 6).astype(np.float32)
    ws[0], ws[1] = 1e-14, 1e-7
    model, feeds = conv_model(8, 6, (5, 5), 3, 1, 1, np.int8, rng, ws=ws)
    got, want, variants, asm = run_case(tmp_path, model, feeds)
    assert [v["name"] for v in variants] == ["im2col"], variants
    assert re.search(r"\tsmmla\t", asm)
    g = optimize(load_onnx(str(tmp_path / "m.onnx")))
    node = next(n for n in g.nodes if n.op == "QConv")
    q, s = (np.asarray(node.inputs[i].const, np.int64).reshape(-1) for i in (3, 4))
    assert q[0] == 0 and -1 - s[1] >= 24, (q, s)
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(got[:, 2:])) > 4


@pytest.mark.parametrize("board", ["mps2-an386", "mps2-an505"], ids=["cortex-m4", "cortex-m33"])
@pytest.mark.parametrize("case", [CASES[1], CASES[4]] + WORDS[2:5],
                         ids=[CASES[1][0], CASES[4][0]] + [c[0] for c in WORDS[2:5]])
def test_dsp_conv_on_cortex_m4_and_m33_is_exact(case, board, tmp_path):
    """The same blocks on the Armv7E-M M4 and the Armv8-M Mainline M33 (DSP extension)."""
    name, cin, cout, hw, kernel, stride, pads, dtype = case
    rng = np.random.default_rng(sum(map(ord, name)))
    model, feeds = conv_model(cin, cout, hw, kernel, stride, pads, dtype, rng)
    got, want, variants, asm = run_case(tmp_path, model, feeds, board)
    assert [v["name"] for v in variants] == ["im2col"] and "\tsmlad\t" in asm
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("pow2", [False, True], ids=["scales", "pow2-scales"])
def test_qadd_tables_on_cortex_m7_are_exact(dtype, pow2, tmp_path):
    """QAdd's table variant (qadd_table.py): every pair of bytes, on the M7, equal to the
    reference. Power-of-two scales make the output's requantization hit ties, so the general
    form must be kept there (params "short" False)."""
    m = QDQ(dtype)
    lo = -128 if np.dtype(dtype) == np.int8 else 0
    sa, sb, sy = (0.5, 0.25, 1.0) if pow2 else (0.031, 0.047, 0.06)
    y = m.op("Add", [m.dq("a", sa, m.zp(lo + 120)), m.dq("b", sb, m.zp(lo + 9))])
    out = m.q(m.op("Relu", [y]), sy, lo + 5)
    # all 65,536 pairs of bytes
    a, b = np.meshgrid(np.arange(256), np.arange(256), indexing="ij")
    feeds = {"a": (a.reshape(1, 16, 64, 64) + lo).astype(dtype),
             "b": (b.reshape(1, 16, 64, 64) + lo).astype(dtype)}
    model = make_graph_model(m.nodes, feeds, [out], m.inits, opset=13)
    got, want, variants, asm = run_case(tmp_path, model, feeds, op="QAdd")
    assert [v["name"] for v in variants] == ["table"], variants
    assert variants[0]["params"]["short"] is not pow2
    np.testing.assert_array_equal(got, want)
    assert lsb(got, run_onnxruntime(model, feeds)[0]) <= 1


def test_dsp_conv_columns_in_activation_gaps_are_exact(tmp_path):
    """column_scratch.py: a convolution whose four-position columns exceed the stack budget
    takes them from a gap of the activation region (here the bytes of a dead 4.5 KiB tensor),
    without growing the region; the outputs stay exact and the stack small."""
    rng = np.random.default_rng(5)
    m = QDQ(np.int8)

    def conv(x, xs, cin, cout, k, pads, ys):
        w = rng.integers(-127, 128, (cout, cin, k, k)).astype(np.int8)
        ws = rng.uniform(0.002, 0.02, cout).astype(np.float32)
        b = rng.integers(-3000, 3000, cout).astype(np.int32)
        y = m.op("Conv", [m.dq(x, xs, m.zp(-128 + 17)),
                          m.dq(m.c(w), ws, np.zeros(cout, np.int8), 0),
                          m.dq(m.c(b), xs * ws, np.zeros(cout, np.int32), 0)],
                 kernel_shape=[k, k], pads=[pads] * 4)
        return m.q(m.op("Relu", [y]), ys, -128 + 17)
    t1 = conv("x", 0.05, 4, 32, 3, 1, 0.5)     # 32 x 12 x 12: 4,608 bytes, dead after t2
    t2 = conv(t1, 0.5, 32, 8, 1, 0, 0.4)       # K = 32: columns on the stack
    out = conv(t2, 0.4, 8, 6, 3, 1, 0.3)       # K = 72: 576 bytes of columns, in t1's bytes
    feeds = {"x": rng.integers(-128, 128, (1, 4, 12, 12)).astype(np.int8)}
    model = make_graph_model(m.nodes, feeds, [out], m.inits, opset=13)
    got, want, variants, _ = run_case(tmp_path, model, feeds)
    assert [v["params"].get("columns") for v in variants] == [None, None, "activations"]
    assert tuple(variants[2]["params"]["block"]) == conv_im2col.BLOCK
    np.testing.assert_array_equal(got, want)
    assert lsb(got, run_onnxruntime(model, feeds)[0]) <= 1
    man = json.loads((tmp_path / "b" / "m.json").read_text())
    # t1 + t2, live together at the second convolution: the columns added nothing
    assert man["memory"]["activations"] == 4608 + 1152, man["memory"]
