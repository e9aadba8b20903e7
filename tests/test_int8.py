"""int8: quantized ONNX models compiled into integer kernels.

- The three MLPerf Tiny QDQ models reproduce onnxruntime's outputs on all their reference
  inputs (within 1 LSB; in fact exactly) and their TFLite references wherever onnxruntime does.
- Keyword spotting's activation region is at most 17,232 bytes (microTVM AOT + CMSIS-NN).
- QDQ patterns (Conv, depthwise, pointwise, Add, Mul, pools, Concat, tables, Softmax, MatMul,
  Gemm, views) in int8 and uint8, and ONNX's QuantizeLinear, DequantizeLinear, QLinearConv,
  QLinearMatMul, ConvInteger, MatMulInteger, compiled and run: the bundle equals glowpy's
  numpy references of the integer ops bit for bit, and onnxruntime within 1 LSB.
- qmath's fixed-point arithmetic against exact rational arithmetic.
"""
from __future__ import annotations

import json
import os
from fractions import Fraction

import numpy as np
import pytest
from onnx import helper

import glowpy
from glowpy.frontend.onnx import load_onnx
from glowpy.ir import qmath
from glowpy.ir.evaluate import evaluate
from glowpy.ir.passes.pipeline import optimize
from glowpy.runtime import Bundle
from util import make_graph_model, model_path, reference_data, run_onnxruntime
from vector_levels import params

QDQ_MODELS = ["mlperf_tiny_kws_dscnn_int8_qdq", "mlperf_tiny_resnet8_int8_qdq",
              "mlperf_tiny_vww_int8_qdq"]
KWS_ACTIVATION_BOUND = 17232  # bytes: microTVM AOT executor + CMSIS-NN, published for KWS


def lsb(a, b) -> int:
    return int(np.abs(np.asarray(a, np.int64) - np.asarray(b, np.int64)).max())


@pytest.fixture(scope="module")
def qdq_bundles(tmp_path_factory):
    cache = {}

    def get(name):
        if name not in cache:
            d = str(tmp_path_factory.mktemp(name))
            info = glowpy.compile(model_path(name), d)
            cache[name] = (info, Bundle(d, info.name), d)
        return cache[name]
    return get


@pytest.mark.parametrize("name", QDQ_MODELS)
def test_qdq_model_matches_onnxruntime_and_tflite(name, qdq_bundles):
    info, bundle, _ = qdq_bundles(name)
    assert info.inputs[0]["dtype"] == "int8" and info.outputs[0]["dtype"] == "int8"
    ops = bundle_ops(name)
    assert not ops & {"QuantizeLinear", "DequantizeLinear", "Conv", "MatMul"}, ops
    for i in range(3):
        ins, refs = reference_data(name, i)
        got = bundle.run({info.inputs[0]["name"]: ins[0]})[info.outputs[0]["name"]]
        ort = run_onnxruntime(model_path(name), {info.inputs[0]["name"]: ins[0]})[0]
        assert got.dtype == np.int8 and got.shape == refs[0].shape
        assert lsb(got, ort) <= 1, f"{name} set {i}: {got} vs onnxruntime {ort}"
        if lsb(ort, refs[0]) == 0:  # resnet8 set 0: onnxruntime itself is 19 LSB off TFLite
            assert lsb(got, refs[0]) <= 1, f"{name} set {i}: {got} vs TFLite {refs[0]}"


def bundle_ops(name):
    g = optimize(load_onnx(model_path(name), warn=lambda m: None))
    return set(g.op_counts())


def test_kws_int8_activation_region_bound(tmp_path):
    """The least-memory plan (-activation-memory=min, the default on microcontrollers, which
    also keeps the integer kernels): the int8 tensors alone. By default a vector host computes
    the convolutions on the float kernels (passes/quant/float_exact.py), whose float copies of
    inputs and sums take more (72,000 bytes here) for 5x the speed."""
    info = glowpy.compile(model_path("mlperf_tiny_kws_dscnn_int8_qdq"), str(tmp_path),
                          activation_memory="min")
    assert info.memory["activations"] <= KWS_ACTIVATION_BOUND, info.memory


def test_quantized_placeholders_in_header_and_manifest(qdq_bundles):
    info, _, d = qdq_bundles("mlperf_tiny_kws_dscnn_int8_qdq")
    man = json.load(open(os.path.join(d, info.name + ".json")))
    q_in, q_out = man["inputs"][0]["quantization"], man["outputs"][0]["quantization"]
    assert q_in["offset"] == 83 and abs(q_in["scale"] - 0.5847029) < 1e-6
    assert q_out == {"scale": 0.00390625, "offset": -128}
    header = open(os.path.join(d, info.name + ".h")).read()
    assert "Type: i8<1 x 49 x 10 x 1>" in header
    assert "Offset (zero point): 83" in header and "Scale: 0.00390625" in header


# ---------------------------------------------------------------------------------------------
# QDQ patterns


class QDQ:
    """Builds a QDQ graph: `dq` and `q` add DequantizeLinear / QuantizeLinear nodes."""

    def __init__(self, dtype):
        self.dt = np.dtype(dtype)
        self.nodes, self.inits, self.n = [], {}, 0

    def c(self, a):
        name = f"c{len(self.inits)}"
        self.inits[name] = np.asarray(a)
        return name

    def op(self, op, ins, **attrs):
        self.n += 1
        out = f"{op.lower()}{self.n}"
        self.nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out

    def zp(self, z):
        return np.array(z, self.dt)

    def dq(self, x, s, z, axis=None):
        kw = {} if axis is None else {"axis": axis}
        return self.op("DequantizeLinear", [x, self.c(np.array(s, np.float32)),
                                            self.c(np.asarray(z))], **kw)

    def q(self, x, s, z):
        return self.op("QuantizeLinear", [x, self.c(np.float32(s)), self.c(self.zp(z))])

    def weight(self, shape, axis, rng, per_channel=True):
        w = rng.integers(-127, 128, shape).astype(np.int8)
        n = shape[axis] if per_channel else 1
        s = (rng.uniform(0.002, 0.02, n).astype(np.float32) if per_channel
             else np.float32(0.01))
        return self.dq(self.c(w), s, np.zeros(n, np.int8) if per_channel else np.int8(0),
                       axis if per_channel else None), s

    def bias(self, n, scale, rng):
        b = rng.integers(-2000, 2000, n).astype(np.int32)
        return self.dq(self.c(b), np.asarray(scale, np.float32) * np.ones(n, np.float32),
                       np.zeros(n, np.int32), 0)


def pattern_model(dtype, rng):
    """Every pattern reads the graph inputs directly (x, y: [1, 8, 6, 6]; v: [2, 8]), so a
    1-LSB difference in one result cannot grow through later ones."""
    m = QDQ(dtype)
    lo = -128 if np.dtype(dtype) == np.int8 else 0
    xs, xz, ys_, yz, vs, vz = 0.05, lo + 120, 0.03, lo + 7, 0.07, lo + 110

    def x():
        return m.dq("x", xs, m.zp(xz))

    def y():
        return m.dq("y", ys_, m.zp(yz))

    def v():
        return m.dq("v", vs, m.zp(vz))
    outs = []
    w, sw = m.weight((8, 8, 3, 3), 0, rng)
    outs.append(m.q(m.op("Relu", [m.op("Conv", [x(), w, m.bias(8, xs * sw, rng)],
                                       pads=[1, 1, 1, 1], strides=[2, 2])]), 0.04, lo))
    w, sw = m.weight((8, 1, 3, 3), 0, rng)
    outs.append(m.q(m.op("Clip", [m.op("Conv", [x(), w, m.bias(8, xs * sw, rng)], group=8,
                                       pads=[0, 0, 1, 1], dilations=[2, 2]),
                                  m.c(np.float32(0)), m.c(np.float32(3))]), 0.03, lo))
    w, sw = m.weight((4, 8, 1, 1), 0, rng)
    outs.append(m.q(m.op("Conv", [x(), w]), 0.05, lo + 125))  # no bias, zero point folded
    outs.append(m.q(m.op("Relu", [m.op("Add", [x(), y()])]), 0.06, lo + 3))
    outs.append(m.q(m.op("Mul", [x(), y()]), 0.1, lo + 100))
    outs.append(m.q(m.op("AveragePool", [x()], kernel_shape=[3, 3], pads=[1, 1, 1, 1]), xs, xz))
    outs.append(m.q(m.op("AveragePool", [x()], kernel_shape=[2, 2], strides=[2, 2]), 0.08, lo + 90))
    outs.append(m.q(m.op("MaxPool", [x()], kernel_shape=[2, 2], strides=[2, 2]), xs, xz))
    outs.append(m.q(m.op("GlobalAveragePool", [x()]), 0.07, lo + 110))
    outs.append(m.q(m.op("Concat", [x(), y()], axis=1), xs, xz))
    outs.append(m.q(m.op("Sigmoid", [x()]), 1 / 256, lo))
    outs.append(m.q(m.op("Tanh", [y()]), 1 / 128, lo + 128))
    # float chains between a DequantizeLinear and a QuantizeLinear: GELU's erf(x / sqrt(2)), a
    # constant first
    outs.append(m.q(m.op("Erf", [m.op("Div", [x(), m.c(np.float32(1.4142135))])]), 1 / 128,
                    lo + 128))
    outs.append(m.q(m.op("Tanh", [m.op("Exp", [m.op("Mul", [m.c(np.array([0.7], np.float32)),
                                                            y()])])]), 1 / 256, lo))
    outs.append(m.q(m.op("Transpose", [x()], perm=[0, 2, 3, 1]), xs, xz))
    outs.append(m.q(m.op("Reshape", [x(), m.c(np.array([1, 288], np.int64))]), xs, xz))
    outs.append(m.q(m.op("Relu", [x()]), xs, xz))
    outs.append(m.q(x(), 0.11, lo + 60))  # DequantizeLinear -> QuantizeLinear: a rescale
    w, sw = m.weight((8, 5), 1, rng)
    outs.append(m.q(m.op("Add", [m.op("MatMul", [v(), w]), m.bias(5, vs * sw, rng)]), 0.05,
                    lo + 130))
    w, sw = m.weight((6, 8), 0, rng, per_channel=False)
    outs.append(m.q(m.op("Gemm", [v(), w, m.bias(6, vs * sw, rng)], transB=1), 0.05, lo + 127))
    outs.append(m.q(m.op("Softmax", [v()]), 1 / 256, lo))
    feeds = {"x": rng.integers(lo, lo + 256, (1, 8, 6, 6)).astype(dtype),
             "y": rng.integers(lo, lo + 256, (1, 8, 6, 6)).astype(dtype),
             "v": rng.integers(lo, lo + 256, (2, 8)).astype(dtype)}
    return make_graph_model(m.nodes, feeds, outs, m.inits, opset=13), feeds


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_qdq_patterns_become_integer_kernels(dtype, tmp_path):
    rng = np.random.default_rng(7)
    model, feeds = pattern_model(dtype, rng)
    path = str(tmp_path / "m.onnx")
    import onnx
    onnx.save(model, path)
    g = optimize(load_onnx(path))
    ops = set(g.op_counts())
    assert not ops & {"QuantizeLinear", "DequantizeLinear", "Conv", "Add", "Mul", "MatMul",
                      "Gemm", "Sigmoid", "Softmax", "AveragePool", "Div", "Erf", "Exp",
                      "Tanh"}, ops
    assert {"QConv", "QAdd", "QMul", "QAvgPool", "QTable", "QSoftmax", "QMatMul",
            "Requantize"} <= ops
    ours = evaluate(g, feeds)  # the integer ops' numpy references
    info = glowpy.compile(path, str(tmp_path / "b"))
    got = Bundle(str(tmp_path / "b"), info.name).run(feeds)
    ort = run_onnxruntime(model, feeds)
    for p, r, e in zip(info.outputs, ours, ort):
        y = got[p["name"]]
        assert y.dtype == e.dtype and y.shape == e.shape, p["name"]
        np.testing.assert_array_equal(y, r, err_msg=f"{p['name']}: kernel vs reference")
        assert lsb(y, e) <= 1, f"{p['name']}: {lsb(y, e)} LSB from onnxruntime"


def test_onnx_integer_ops(tmp_path):
    """QuantizeLinear / DequantizeLinear (per tensor, per axis) in float form, QLinearConv,
    QLinearMatMul, ConvInteger and MatMulInteger as integer kernels."""
    import onnx
    rng = np.random.default_rng(3)
    feeds = {"xf": rng.normal(0, 1, (1, 4, 7, 7)).astype(np.float32),
             "xu": rng.integers(0, 256, (1, 4, 7, 7)).astype(np.uint8),
             "a8": rng.integers(-128, 128, (3, 4)).astype(np.int8)}
    inits = {
        "s": np.float32(0.02), "z": np.int8(-5),
        "sa": np.linspace(0.01, 0.04, 4).astype(np.float32), "za": np.array([0, 3, 17, 100], np.uint8),
        "xs": np.float32(0.03), "xz": np.uint8(128),
        "w": rng.integers(-127, 128, (5, 4, 3, 3)).astype(np.int8),
        "ws": np.linspace(0.001, 0.005, 5).astype(np.float32), "wz": np.zeros(5, np.int8),
        "ys": np.float32(0.2), "yz": np.uint8(100), "b": rng.integers(-500, 500, 5).astype(np.int32),
        "wu": rng.integers(0, 256, (5, 4, 3, 3)).astype(np.uint8), "wuz": np.uint8(120),
        "as": np.float32(0.05), "az": np.int8(2),
        "bm": rng.integers(-127, 128, (4, 6)).astype(np.int8), "bs": np.float32(0.01),
        "bz": np.int8(0), "mys": np.float32(0.3), "myz": np.int8(-1), "az8": np.int8(-3),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["xf", "s", "z"], ["q1"]),
        helper.make_node("QuantizeLinear", ["xf", "sa", "za"], ["q2"], axis=1),
        helper.make_node("DequantizeLinear", ["xu", "sa", "za"], ["dq1"], axis=1),
        helper.make_node("QLinearConv", ["xu", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                         ["qc"], pads=[1, 0, 1, 2], strides=[2, 1]),
        helper.make_node("ConvInteger", ["xu", "wu", "xz", "wuz"], ["ci"], pads=[1, 1, 1, 1]),
        helper.make_node("QLinearMatMul", ["a8", "as", "az", "bm", "bs", "bz", "mys", "myz"],
                         ["qm"]),
        helper.make_node("MatMulInteger", ["a8", "bm", "az8"], ["mi"]),
    ]
    model = make_graph_model(nodes, feeds, ["q1", "q2", "dq1", "qc", "ci", "qm", "mi"], inits,
                             opset=13)
    ort = run_onnxruntime(model, feeds)
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    g = optimize(load_onnx(path))
    assert {"QConv", "QMatMul"} <= set(g.op_counts()), g.op_counts()
    assert not {"QLinearConv", "ConvInteger", "QLinearMatMul", "MatMulInteger"} & set(g.op_counts())
    info = glowpy.compile(path, str(tmp_path / "b"))
    got = Bundle(str(tmp_path / "b"), info.name).run(feeds)
    # QLinearConv with full-range uint8 activations: onnxruntime's AVX2 u8s8 kernels (no VNNI)
    # add pairs of u8 x s8 products in saturating 16-bit lanes (255 x 127 x 2 > 32767), which
    # puts it 18 LSB off on a Zen 3; the spec's exact integer arithmetic is the reference there
    exact_qc = exact_qlinearconv(feeds["xu"], 128, inits["w"], inits["b"],
                                 0.03, inits["ws"], 0.2, 100, pads=(1, 0, 1, 2), strides=(2, 1))
    assert lsb(exact_qc, ort[3]) <= 1 or _vnni_free_x86(), \
        "onnxruntime is off the exact QLinearConv on a host whose int8 kernels do not saturate"
    for p, e in zip(info.outputs, ort):
        y = got[p["name"]]
        assert y.dtype == e.dtype and y.shape == e.shape, p["name"]
        if p["name"] == "qc":
            assert lsb(y, exact_qc) <= 1, f"qc: {lsb(y, exact_qc)} LSB from the exact reference"
        elif e.dtype == np.float32:
            np.testing.assert_allclose(y, e, rtol=1e-6, err_msg=p["name"])
        elif e.dtype == np.int32:
            np.testing.assert_array_equal(y, e, err_msg=p["name"])
        else:
            assert lsb(y, e) <= 1, f"{p['name']}: {lsb(y, e)} LSB from onnxruntime"


def exact_qlinearconv(x, xz, w, b, xs, ws, ys, yz, pads, strides):
    """QLinearConv (2-D, uint8 output, zero weight zero point) as the spec defines it: an
    int64 direct convolution of (x - xz) with w plus b, scaled by xs * ws / ys in float64,
    rounded half to even, plus yz, saturated. Independent of glowpy's own op reference."""
    xp = np.pad(np.asarray(x, np.int64) - xz,
                ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    kk, _, kh, kw = w.shape
    ho = (xp.shape[2] - kh) // strides[0] + 1
    wo = (xp.shape[3] - kw) // strides[1] + 1
    acc = np.zeros((x.shape[0], kk, ho, wo), np.int64)
    for i in range(ho):
        for j in range(wo):
            patch = xp[:, :, i * strides[0]:i * strides[0] + kh, j * strides[1]:j * strides[1] + kw]
            acc[:, :, i, j] = np.einsum("nchw,kchw->nk", patch, np.asarray(w, np.int64))
    acc += np.asarray(b, np.int64).reshape(1, -1, 1, 1)
    m = (np.float64(np.float32(xs)) * np.asarray(ws, np.float32).astype(np.float64)
         / np.float64(np.float32(ys))).reshape(1, -1, 1, 1)
    return np.clip(np.rint(acc * m) + yz, 0, 255).astype(np.int64)


def _vnni_free_x86() -> bool:
    """True on an x86 host without AVX-512 VNNI / AVX-VNNI, where onnxruntime's u8s8 kernels
    sum products in saturating 16-bit lanes."""
    import platform
    from llvmlite import binding as llvm
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    llvm.initialize_native_target()
    feats = llvm.get_host_cpu_features().flatten().split(",")
    return "+avx512vnni" not in feats and "+avxvnni" not in feats


# ---------------------------------------------------------------------------------------------
# fixed-point arithmetic


def _exact(acc, q, shift):
    return Fraction(int(acc)) * q * Fraction(2) ** (shift - 31)


def _tflite(x: int, q: int, shift: int) -> int:
    """TFLite's MultiplyByQuantizedMultiplier, transcribed with Python integers."""
    x *= 1 << max(shift, 0)
    ab = x * q
    nudge = (1 << 30) if ab >= 0 else 1 - (1 << 30)
    t = ab + nudge
    hi = t // (1 << 31) if t >= 0 else -((-t) // (1 << 31))  # C division truncates
    e = max(-shift, 0)
    mask = (1 << e) - 1
    rem, thr = hi & mask, (mask >> 1) + (1 if hi < 0 else 0)
    return (hi >> e) + (1 if rem > thr else 0)


def test_requantize_rounds_exactly():
    rng = np.random.default_rng(0)
    reals = np.concatenate([rng.uniform(1e-5, 1.0, 40), [0.5, 0.25, 1.0 / 3, 0.999999, 1.5, 7.0]])
    acc = np.concatenate([rng.integers(-2 ** 20, 2 ** 20, 200), [0, 1, -1, 2, -2, 3, -3]])
    for real in reals:
        q, s = qmath.quantize_multiplier(float(real))
        assert 2 ** 30 <= q < 2 ** 31 and abs(q * 2.0 ** (s - 31) / real - 1) < 2 ** -30
        even = qmath.requantize(acc, q, s, "even")
        away = qmath.requantize(acc, q, s, "away")
        for a, e, w in zip(acc, even, away):
            x = _exact(a, q, s)
            fl = x.numerator // x.denominator
            frac = x - fl
            want_even = fl + (1 if frac > Fraction(1, 2) or (frac == Fraction(1, 2) and fl % 2)
                              else 0)
            assert e == want_even, (a, q, s)
            assert w == _tflite(int(a), q, s), (a, q, s)
    # ties: 1.5 -> 2 both ways; 2.5 -> 2 (even), 3 (TFLite); -2.5 -> -2 both (gemmlowp's
    # doubling high multiply rounds a negative tie up)
    q, s = qmath.quantize_multiplier(0.5)
    assert list(qmath.requantize([3, 5, -5], q, s, "even")) == [2, 2, -2]
    assert list(qmath.requantize([3, 5, -5], q, s, "away")) == [2, 3, -2]


# ---------------------------------------------------------------------------------------------
# Cortex-M cores under QEMU (the runner of examples/bundles/cortex_m7 on the boards of
# test_cross.BOARDS)


def run_on_board(bundle_dir, man, feeds: dict, board="mps2-an500", float_abi="hard") -> dict:
    """Builds the Cortex-M runner for `board` around the bundle with `feeds` and runs it under
    QEMU."""
    import subprocess

    from test_cross import EXAMPLES, M7_STACK_SIZE
    from toolchains import require_tool
    from gen_io_header import parse_run_output, write_io_header_from_manifest
    for tool in ("arm-none-eabi-gcc", "qemu-system-arm", "make"):
        require_tool(tool)
    write_io_header_from_manifest(os.path.join(bundle_dir, "model_io.h"), man, feeds)
    res = subprocess.run(["make", "-s", "-C", os.path.join(EXAMPLES, "cortex_m7"),
                          f"BUNDLE_DIR={bundle_dir}", f"NETWORK={man['network_name']}",
                          f"BOARD={board}", f"FLOAT_ABI={float_abi}",
                          f"STACK_SIZE={M7_STACK_SIZE}",
                          f"BUILD_DIR={os.path.join(bundle_dir, 'build-' + board)}", "run"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return parse_run_output(res.stdout)


KWS = "mlperf_tiny_kws_dscnn_int8_qdq"


@pytest.fixture(scope="module")
def kws_exact():
    """Keyword spotting's outputs for its three reference inputs from the integer ops' numpy
    references (what every core must compute bit for bit)."""
    g = optimize(load_onnx(model_path(KWS), warn=lambda m: None))
    return [evaluate(g, {g.inputs[0].name: reference_data(KWS, i)[0][0]})[0] for i in range(3)]


def kws_on_board(board, abi, tmp_path, *extra) -> tuple[dict, str]:
    """Keyword spotting compiled for the board's core by model-compiler: (the manifest, the
    object's disassembly)."""
    import subprocess

    from test_cross import BOARDS, compile_bundle
    from toolchains import require_tool
    objdump = require_tool("arm-none-eabi-objdump", "binutils-arm-none-eabi")
    man = compile_bundle(KWS, tmp_path, "-target=arm", f"-mcpu={BOARDS[board][0]}",
                         f"-float-abi={abi}", *extra)
    asm = subprocess.run([objdump, "-d", os.path.join(tmp_path, f"{KWS}.o")],
                         capture_output=True, text=True, check=True).stdout
    return man, asm


# (board, -float-abi, DSP paths): the int8 kernels use the DSP extension on the Cortex-M7, M4
# and M33 (an Armv8-M Mainline core: its triple is thumbv8m.main, not thumbv7em), the portable
# code on the FPU-less Cortex-M3, which has no DSP instructions
KWS_BOARDS = [("mps2-an500", "hard", True), ("mps2-an386", "hard", True),
              ("mps2-an505", "hard", True), ("mps2-an385", "soft", False)]


@pytest.mark.parametrize("board, abi, dsp", KWS_BOARDS, ids=[b for b, _, _ in KWS_BOARDS])
def test_kws_int8_on_cortex_m_matches_reference(board, abi, dsp, tmp_path, kws_exact):
    """Keyword spotting as firmware for each core: SMLAD/SXTB16 exactly where the core has
    them, the outputs of all three reference inputs equal to the numpy references of the
    integer ops (and within 1 LSB of TFLite's and onnxruntime's), bounded stack; the
    instructions per inference are reported."""
    from test_cross import BOARDS, M7_STACK_BOUND, check_bare_metal_object
    man, asm = kws_on_board(board, abi, tmp_path)
    assert man["memory"]["activations"] <= KWS_ACTIVATION_BOUND
    check_bare_metal_object(os.path.join(tmp_path, f"{KWS}.o"), soft_float=abi == "soft")
    if dsp:
        assert asm.count("\tsmlad\t") >= 8 and "\tsxtb16\t" in asm, "no DSP multiply-accumulates"
    else:
        assert "\tsmlad\t" not in asm and "\tsxtb16\t" not in asm
    for i in range(3):
        ins, refs = reference_data(KWS, i)
        run = run_on_board(str(tmp_path), man, {man["inputs"][0]["name"]: ins[0]}, board, abi)
        got = run["outputs"][0].reshape(refs[0].shape)
        np.testing.assert_array_equal(got, kws_exact[i], err_msg=f"input {i}")
        ort = run_onnxruntime(model_path(KWS), {man["inputs"][0]["name"]: ins[0]})[0]
        assert lsb(got, refs[0]) <= 1 and lsb(got, ort) <= 1, (i, got, refs[0])
        assert 0 < run["stack"] <= M7_STACK_BOUND and run["cycles"] > 0
        if i == 0:
            print(f"\n{KWS} on {BOARDS[board][0]} ({board}): "
                  f"{run['cycles'] * BOARDS[board][1]:,.0f} instructions per inference")


def test_kws_int8_dsp_paths_on_cortex_m33_save_instructions(tmp_path):
    """What the DSP paths are worth on a core that has them: the Cortex-M33 runs keyword
    spotting in under 0.65x the instructions of its own build without them (-mattr=-dsp, as
    for an M33 made without the optional extension; measured: 4.45 vs 9.27 million)."""
    counts = {}
    for attr in ("+dsp", "-dsp"):
        d = tmp_path / ("with" if attr == "+dsp" else "without")
        d.mkdir()
        man, asm = kws_on_board("mps2-an505", "hard", d, f"-mattr={attr}")
        assert ("\tsmlad\t" in asm) == (attr == "+dsp")
        ins, _ = reference_data(KWS, 0)
        run = run_on_board(str(d), man, {man["inputs"][0]["name"]: ins[0]}, "mps2-an505")
        counts[attr] = run["cycles"]
    assert counts["+dsp"] < 0.65 * counts["-dsp"], counts


# ---------------------------------------------------------------------------------------------
# Glow's profile flow: model-profiler, then model-compiler -load-profile


def model_profiler(*args):
    import subprocess
    import sys
    from util import REPO
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    code = "import sys; from glowpy.profiler import main; sys.argv[0] = 'model-profiler'; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=env, timeout=600)


@pytest.fixture(scope="module")
def resnet8_profile(tmp_path_factory):
    """mlperf_tiny_resnet8 (float) profiled on its three reference inputs (a directory of
    .npy files, one per sample)."""
    d = tmp_path_factory.mktemp("profile")
    (d / "samples").mkdir()
    for i in range(3):
        np.save(d / "samples" / f"sample{i}.npy", reference_data("mlperf_tiny_resnet8", i)[0][0])
    res = model_profiler(f"-model={model_path('mlperf_tiny_resnet8')}",
                         f"-input-dataset=input_1,npy,{d / 'samples'}",
                         f"-dump-profile={d / 'profile.yaml'}")
    assert res.returncode == 0, res.stderr
    return d


def _top1(bundle_dir, name, feed):
    man = json.load(open(os.path.join(bundle_dir, f"{name}.json")))
    b = Bundle(str(bundle_dir), name)
    return [int(np.argmax(b.run({man["inputs"][0]["name"]: feed(i)})[man["outputs"][0]["name"]]))
            for i in range(3)], man


@pytest.mark.parametrize("options", [[], ["-enable-channelwise", "-quantization-schema=symmetric",
                                          "-quantization-precision-bias=Int8",
                                          "-keep-original-precision-for-nodes=Softmax"]],
                         ids=["default", "channelwise-symmetric-int8bias-float-softmax"])
def test_load_profile_keeps_resnet8_top1_and_shrinks_constants(options, resnet8_profile, tmp_path):
    from test_cross import model_compiler
    name = "mlperf_tiny_resnet8"
    float_dir, q_dir = tmp_path / "float", tmp_path / "int8"
    # int8 weights: the integer kernels (by default a vector host runs the convolutions on the
    # float kernels with float weights, passes/quant/float_exact.py)
    for d, extra in ((float_dir, []), (q_dir, [f"-load-profile={resnet8_profile / 'profile.yaml'}",
                                               "-quantized-convolutions=integer", *options])):
        res = model_compiler(f"-model={model_path(name)}", f"-emit-bundle={d}", *extra)
        assert res.returncode == 0, res.stderr
    feed = lambda i: reference_data(name, i)[0][0]  # noqa: E731
    f_top, f_man = _top1(float_dir, name, feed)
    q_top, q_man = _top1(q_dir, name, feed)
    assert q_top == f_top, (q_top, f_top)
    ratio = q_man["memory"]["constant"] / f_man["memory"]["constant"]
    assert ratio <= 0.35, f"constant region {q_man['memory']['constant']} is {ratio:.3f} of float"
    assert q_man["options"]["quantization"]["profile"] == "profile.yaml"
    g_ops = set(optimize_with_profile(name, resnet8_profile / "profile.yaml", options).op_counts())
    assert {"QConv", "QAdd", "QMatMul"} <= g_ops and "Conv" not in g_ops, g_ops
    assert ("Softmax" in g_ops) == ("-keep-original-precision-for-nodes=Softmax" in options)


def optimize_with_profile(name, profile, cli_options):
    from glowpy.compiler import Options, _setup_quantization
    kw = {"load_profile": str(profile)}
    for o in cli_options:
        k, _, v = o.lstrip("-").partition("=")
        k = k.replace("-", "_")
        kw[k] = True if not v else tuple(v.split(",")) if k.startswith("keep") else v
    g = load_onnx(model_path(name), warn=lambda m: None)
    _setup_quantization(g, Options(**kw))
    return optimize(g)


def test_load_profile_with_int8q_input(resnet8_profile, tmp_path):
    """-model-input=name,int8q,scale,offset,[shape]: the bundle takes int8 pixels."""
    from test_cross import model_compiler
    name = "mlperf_tiny_resnet8"
    res = model_compiler(f"-model={model_path(name)}", f"-emit-bundle={tmp_path}",
                         f"-load-profile={resnet8_profile / 'profile.yaml'}",
                         f"-model-input=input_1,int8q,{1 / 255},-128,[1,3,32,32]")
    assert res.returncode == 0, res.stderr
    feed = lambda i: np.clip(np.rint(reference_data(name, i)[0][0] * 255) - 128, -128,  # noqa
                             127).astype(np.int8)
    top, man = _top1(tmp_path, name, feed)
    assert man["inputs"][0]["dtype"] == "int8"
    assert man["inputs"][0]["quantization"] == {"scale": 1 / 255, "offset": -128}
    assert top == [int(np.argmax(reference_data(name, i)[1][0])) for i in range(3)]


def test_profile_of_another_model_is_a_clear_error(resnet8_profile, tmp_path):
    from test_cross import model_compiler
    res = model_compiler(f"-model={model_path('mnist8')}", f"-emit-bundle={tmp_path}",
                         f"-load-profile={resnet8_profile / 'profile.yaml'}")
    assert res.returncode == 1
    line = res.stderr.strip().splitlines()[-1]
    assert "does not match the model" in line and "re-run model-profiler" in line, line
    assert not list(tmp_path.glob("mnist8.*"))


@pytest.mark.parametrize("args, expect", [
    (["-quantization-schema=bogus"], "-quantization-schema=bogus"),
    (["-quantization-calibration=entropy"], "-quantization-calibration=entropy"),
    (["-quantization-precision-bias=Int16"], "-quantization-precision-bias=Int16"),
])
def test_quantization_option_errors(args, expect, resnet8_profile, tmp_path):
    from test_cross import model_compiler
    res = model_compiler(f"-model={model_path('mlperf_tiny_resnet8')}", f"-emit-bundle={tmp_path}",
                         f"-load-profile={resnet8_profile / 'profile.yaml'}", *args)
    assert res.returncode == 2 and expect in res.stderr, res.stderr


def test_profiler_dataset_formats(tmp_path):
    """npy, rawbin and rawtxt samples give the same profile; a wrong sample size is an error."""
    from glowpy.ir.qschema import read_profile
    x = reference_data("mnist8", 0)[0][0]
    (tmp_path / "a.npy").write_bytes(b"")
    np.save(tmp_path / "a.npy", x)
    x.astype("<f4").tofile(tmp_path / "a.bin")
    (tmp_path / "a.txt").write_text(", ".join(repr(float(v)) for v in x.reshape(-1)))
    profiles = []
    for fmt, f in (("npy", "a.npy"), ("rawbin", "a.bin"), ("rawtxt", "a.txt")):
        out = tmp_path / f"{fmt}.yaml"
        res = model_profiler(f"-model={model_path('mnist8')}",
                             f"-input-dataset=Input3,{fmt},{tmp_path / f}", f"-dump-profile={out}")
        assert res.returncode == 0, res.stderr
        profiles.append(read_profile(str(out)))
    a = profiles[0].tensors
    assert len(a) > 5 and a["Input3"].max == float(x.max())
    for p in profiles[1:]:
        assert {k: (t.min, t.max) for k, t in p.tensors.items()} == \
            {k: (t.min, t.max) for k, t in a.items()}
    (tmp_path / "short.bin").write_bytes(b"\0" * 12)
    res = model_profiler(f"-model={model_path('mnist8')}",
                         f"-input-dataset=Input3,rawbin,{tmp_path / 'short.bin'}",
                         f"-dump-profile={tmp_path / 'x.yaml'}")
    assert res.returncode == 2 and "holds 3 values" in res.stderr, res.stderr


@pytest.mark.parametrize("dtype, im2col", [(np.int8, True), (np.uint8, True), (np.int8, False)],
                         ids=["int8", "uint8", "int8-direct"])
def test_qdq_patterns_on_cortex_m7_equal_the_references(dtype, im2col, tmp_path):
    """The Cortex-M7 kernels (SMLAD/SXTB16 paths included) compute the integer ops' numpy
    references bit for bit; "direct" passes over the im2col variant (through the kernel
    registry, as for K > MAX_K), so the pointwise and kernel-row DSP paths run instead."""
    import onnx
    from toolchains import require_tool
    require_tool("arm-none-eabi-gcc")
    model, feeds = pattern_model(dtype, np.random.default_rng(11))
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    ours = evaluate(optimize(load_onnx(path)), feeds)
    report = tmp_path / "m.json"
    info = glowpy.compile(path, str(tmp_path / "b"), target="arm", mcpu="cortex-m7",
                          float_abi="hard", dump_memory_report=str(report),
                          kernel_variants={} if im2col else {"QConv": "!im2col"})
    used = {i["variant"]["name"] for i in json.loads(report.read_text())["instructions"]
            if i["kernel"] == "QConv"}
    # the pattern model's ungrouped convolutions take im2col, its depthwise one the direct
    # kernel (kernel rows on SMLAD); without im2col the 1x1 takes the pointwise DSP kernel
    assert used == ({"im2col", "direct"} if im2col else {"pointwise_dsp", "direct"}), used
    run = run_on_board(str(tmp_path / "b"), info.manifest, feeds)
    for p, got, want in zip(info.outputs, run["outputs"], ours):
        np.testing.assert_array_equal(got.reshape(want.shape), want, err_msg=p["name"])


@pytest.mark.parametrize("target, tool, pattern", [
    (["-target=aarch64", "-mattr=+dotprod"], "aarch64-linux-gnu-objdump", r"\tsdot\t"),
    (["-target=x86_64", "-mcpu=icelake-server"], "objdump", r"\tvp(dpwssd|maddwd|dpbusd)\s"),
], ids=["aarch64-dotprod", "x86_64-vnni"])
def test_integer_kernels_use_vector_dot_products(target, tool, pattern, tmp_path):
    """Where the CPU has them, the int8 dot products become its vector dot-product
    instructions (LLVM vectorizes the kernels' contiguous int8 x int8 -> int32 sums), asked
    for with -quantized-convolutions=integer on these vector targets (by default their
    convolutions take the float kernels, passes/quant/float_exact.py)."""
    import re
    import subprocess

    from test_cross import compile_bundle
    from toolchains import require_tool
    objdump = require_tool(tool, "binutils-aarch64-linux-gnu" if "aarch64" in tool else "binutils")
    name = "mlperf_tiny_kws_dscnn_int8_qdq"
    compile_bundle(name, tmp_path, *target, "-quantized-convolutions=integer")
    asm = subprocess.run([objdump, "-d", str(tmp_path / f"{name}.o")], capture_output=True,
                         text=True, check=True).stdout
    assert len(re.findall(pattern, asm)) >= 4, f"no {pattern} in the {target[0]} object"


@pytest.mark.parametrize("board", ["mps2-an500", "mps2-an386", "mps2-an505"],
                         ids=["cortex-m7", "cortex-m4", "cortex-m33"])
def test_quantize_linear_on_cortex_m_rounds_and_saturates_exactly(board, tmp_path):
    """QuantizeLinear on ARM FPUs (quant.emit_quantize: VRINTN on the M7's and M33's FPv5,
    the add-2**23 sequence on the M4's FPv4, then a saturating VCVT and SSAT/USAT): ties round
    to even, values far outside the range, infinities and 2**31 and beyond saturate, NaN gives
    0; int8 and uint8 with zero points. Equal to numpy and to onnxruntime (NaN aside)."""
    import onnx
    from test_cross import BOARDS
    from toolchains import require_tool
    require_tool("arm-none-eabi-gcc")
    s = np.float32(0.25)
    ties = (np.arange(-300, 300, dtype=np.float32) + np.float32(0.5)) * s
    rng = np.random.default_rng(4)
    odd = np.array([0, -0.0, 1e30, -1e30, np.inf, -np.inf, np.nan, 2.0 ** 31, -2.0 ** 31,
                    2.0 ** 23 + 1, -(2.0 ** 22) - 0.5, 8388607.5, 1e-40], np.float32)
    x = np.concatenate([ties, rng.uniform(-80, 80, 395).astype(np.float32), odd])
    feeds = {"x": x.reshape(1, -1)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z8"], ["q8"]),
             helper.make_node("QuantizeLinear", ["x", "s", "zu"], ["qu"])]
    inits = {"s": np.array(s), "z8": np.array(-3, np.int8), "zu": np.array(131, np.uint8)}
    model = make_graph_model(nodes, feeds, ["q8", "qu"], inits, opset=13)
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    info = glowpy.compile(path, str(tmp_path / "b"), target="arm", mcpu=BOARDS[board][0],
                          float_abi="hard")
    run = run_on_board(str(tmp_path / "b"), info.manifest, feeds, board)
    nan = np.isnan(x)
    ort = run_onnxruntime(model, feeds)
    with np.errstate(invalid="ignore"):
        for got, zp, dt, o in zip(run["outputs"], (-3, 131), (np.int8, np.uint8), ort):
            info_ = np.iinfo(dt)
            want = np.clip(np.rint(x / s) + zp, info_.min, info_.max)
            want = np.where(nan, 0, want).astype(dt)
            got = got.reshape(-1)
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(got[~nan], o.reshape(-1)[~nan])


@pytest.mark.parametrize("level", params())
def test_quantize_linear_on_vectors_rounds_and_saturates_exactly(level, tmp_path):
    """QuantizeLinear on x86 vectors (quant._quantize_clamped: clamped to the output's range
    less the zero point, then rounded by adding and subtracting 1.5 x 2**23) at every vector
    level: ties round to even, values far outside the range, infinities and 2**31 and beyond
    saturate, NaN gives 0; int8 and uint8 with constant zero points, per channel (axis 1)
    and with a zero point computed at run time (a graph input). Equal to numpy and to
    onnxruntime (NaN aside)."""
    import onnx
    s = np.float32(0.25)
    ties = (np.arange(-300, 300, dtype=np.float32) + np.float32(0.5)) * s
    rng = np.random.default_rng(5)
    odd = np.array([0, -0.0, 1e30, -1e30, np.inf, -np.inf, np.nan, 2.0 ** 31, -2.0 ** 31,
                    2.0 ** 23 + 1, -(2.0 ** 22) - 0.5, 8388607.5, 1e-40, 127.5 * s,
                    -128.5 * s, 255.5 * s], np.float32)
    x = np.concatenate([ties, rng.uniform(-80, 80, 384).astype(np.float32), odd]).reshape(
        1, 2, -1)
    feeds = {"x": x, "zr": np.array(77, np.uint8)}
    sc = np.array([s, 0.125], np.float32)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z8"], ["q8"]),
             helper.make_node("QuantizeLinear", ["x", "s", "zu"], ["qu"]),
             helper.make_node("QuantizeLinear", ["x", "sc", "zc"], ["qc"], axis=1),
             helper.make_node("QuantizeLinear", ["x", "s", "zr"], ["qr"])]
    inits = {"s": np.array(s), "z8": np.array(-3, np.int8), "zu": np.array(131, np.uint8),
             "sc": sc, "zc": np.array([-100, 90], np.int8)}
    model = make_graph_model(nodes, feeds, ["q8", "qu", "qc", "qr"], inits, opset=13)
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    info = glowpy.compile(path, str(tmp_path / "b"), **level.options)
    got = Bundle(str(tmp_path / "b"), info.name).run(feeds)
    nan = np.isnan(x)
    ort = run_onnxruntime(model, feeds)
    cases = [(s, -3, np.int8), (s, 131, np.uint8),
             (sc.reshape(1, 2, 1), np.array([-100, 90]).reshape(1, 2, 1), np.int8),
             (s, 77, np.uint8)]
    with np.errstate(invalid="ignore", over="ignore"):
        for p, (scale, zp, dt), o in zip(info.outputs, cases, ort):
            lim = np.iinfo(dt)
            want = np.clip(np.rint(x / scale) + zp, lim.min, lim.max)
            want = np.where(nan, 0, want).astype(dt)
            y = got[p["name"]].reshape(want.shape)
            np.testing.assert_array_equal(y, want, err_msg=p["name"])
            np.testing.assert_array_equal(y[~nan], o.reshape(want.shape)[~nan], err_msg=p["name"])
