"""onnxruntime's com.microsoft contrib ops (the fusions of its transformer optimizer, its
quantizers' ops) and ONNX's DynamicQuantizeLinear, compiled through
the real compile -> link -> run path and compared with onnxruntime (which executes the contrib
ops itself), plus the refusal listing and models written by onnxruntime's quantize_dynamic.

Tolerances: float ops 1e-4 relative + 1e-5 absolute (FastGelu/QuickGelu/Sigmoid: the
approximations of tanh/exp differ from MLAS's by a few ulp); integer outputs within 1 LSB (the
integer kernels requantize in fixed point where onnxruntime rounds a float product: both round
half to even, from differently rounded multipliers); DynamicQuantizeLinear exactly."""
from __future__ import annotations

import zlib

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from tests.util import compile_and_run, reference_of, run_onnxruntime

MS = "com.microsoft"
RNG = np.random.default_rng(18)


@pytest.fixture(autouse=True)
def _data_of_its_own(request):
    """Each test draws its data from a seed of its own name, not from the order pytest-xdist
    happens to run the tests in: a test sees the same numbers in every run."""
    global RNG
    RNG = np.random.default_rng(zlib.crc32(request.node.name.encode()))


def model(nodes, inputs: dict, outputs: list, inits: dict | None = None, opset: int = 17):
    vi = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
          for k, v in inputs.items()]
    g = helper.make_graph(nodes, "contrib", vi, [helper.make_empty_tensor_value_info(o)
                                                  for o in outputs],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset),
                                            helper.make_opsetid(MS, 1)])
    m.ir_version = 10
    return m


def ms(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, domain=MS, **attrs)


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def check(m, feeds, tmp_path, rtol=1e-4, atol=1e-5, lsb=0, **options):
    """Bundle vs onnxruntime, and glowpy's op references vs onnxruntime: floats within
    atol + rtol*|ref|, integers within `lsb`. Returns the largest differences (float, int)."""
    expected = run_onnxruntime(m, feeds)
    got = compile_and_run(m, feeds, tmp_path, **options)
    refs = reference_of(m, feeds)
    worst = [0.0, 0]
    for i, (g, r, e) in enumerate(zip(got, refs, expected)):
        for what, a in (("bundle", g), ("reference", np.asarray(r))):
            assert a.shape == e.shape and a.dtype == e.dtype, (i, what, a.shape, a.dtype, e.shape)
            if e.dtype.kind == "f":
                np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=f"{what} output {i}")
                worst[0] = max(worst[0], float(np.abs(a.astype(np.float64) - e).max(initial=0)))
            else:
                d = int(np.abs(a.astype(np.int64) - e.astype(np.int64)).max(initial=0))
                assert d <= lsb, f"{what} output {i}: off by {d} LSB (allowed {lsb})"
                worst[1] = max(worst[1], d)
    return worst


# -- float contrib ops ---------------------------------------------------------------------------

@pytest.mark.parametrize("act,params", [("", None), ("Relu", None), ("Tanh", None),
                                        ("Sigmoid", None), ("LeakyRelu", [0.2]),
                                        ("Clip", [-0.5, 0.7]), ("HardSigmoid", [0.3, 0.4])])
def test_fused_conv(tmp_path, act, params):
    x, w, b, z = f32(1, 3, 7, 6), f32(4, 3, 3, 3), f32(4), f32(1, 4, 4, 3)
    attrs = {"pads": [1, 1, 1, 1], "strides": [2, 2], "kernel_shape": [3, 3]}
    if act:
        attrs["activation"] = act
    if params:
        attrs["activation_params"] = params
    nodes = [ms("FusedConv", ["x", "w", "b"], ["y"], **attrs),
             ms("FusedConv", ["x", "w", "b", "z"], ["y_z"], **attrs)]
    check(model(nodes, {"x": x, "z": z}, ["y", "y_z"], {"w": w, "b": b}), {"x": x, "z": z},
          tmp_path)


@pytest.mark.parametrize("act,extra", [("Relu", {}), ("LeakyRelu", {"activation_alpha": 0.3}),
                                       ("HardSigmoid", {"activation_alpha": 0.25, "activation_beta": 0.45}),
                                       ("Tanh", {}), ("Sigmoid", {})])
def test_fused_gemm(tmp_path, act, extra):
    a, b, c = f32(5, 4), f32(6, 4), f32(6)
    attrs = dict(alpha=0.7, beta=1.3, transB=1, activation=act, **extra)
    nodes = [ms("FusedGemm", ["a", "b", "c"], ["y"], **attrs),
             ms("FusedGemm", ["at", "b"], ["y2"], transA=1, transB=1, activation=act, **extra)]
    check(model(nodes, {"a": a, "at": f32(4, 5)}, ["y", "y2"], {"b": b, "c": c}),
          {"a": a, "at": f32(4, 5)}, tmp_path)


def test_fused_matmul(tmp_path):
    a, b = f32(2, 3, 4, 5), f32(2, 3, 5, 6)
    feeds = {"a": a, "b": b, "at": f32(2, 3, 5, 4), "bt": f32(2, 3, 6, 5),
             "ab": f32(4, 2, 3, 5), "abt": f32(5, 2, 3, 4), "bb": f32(5, 2, 3, 6),
             "a2": f32(4, 5)}
    nodes = [ms("FusedMatMul", ["a", "b"], ["y0"], alpha=0.5),
             ms("FusedMatMul", ["at", "bt"], ["y1"], transA=1, transB=1, alpha=2.0),
             ms("FusedMatMul", ["ab", "b"], ["y2"], transBatchA=1),
             ms("FusedMatMul", ["abt", "bb"], ["y3"], transBatchA=1, transA=1, transBatchB=1),
             ms("FusedMatMul", ["a2", "b"], ["y4"], alpha=-1.5)]
    check(model(nodes, feeds, [f"y{i}" for i in range(5)]), feeds, tmp_path)


def test_gelu_family(tmp_path):
    x, bias = f32(2, 5, 16, scale=2.0), f32(16)
    nodes = [ms("Gelu", ["x"], ["gelu"]), ms("BiasGelu", ["x", "bias"], ["bias_gelu"]),
             ms("FastGelu", ["x"], ["fast"]), ms("FastGelu", ["x", "bias"], ["fast_bias"]),
             ms("QuickGelu", ["x"], ["quick"]), ms("QuickGelu", ["x"], ["quick_a"], alpha=1.1)]
    outs = ["gelu", "bias_gelu", "fast", "fast_bias", "quick", "quick_a"]
    check(model(nodes, {"x": x}, outs, {"bias": bias}), {"x": x}, tmp_path, atol=2e-5)


def test_skip_layer_normalization(tmp_path):
    x, skip = f32(2, 3, 16), f32(2, 3, 16)
    gamma, beta, bias = f32(16), f32(16), f32(16)
    nodes = [ms("SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"],
                ["y", "mean", "inv_std", "sum"], epsilon=1e-5),
             ms("SkipLayerNormalization", ["x", "skip", "gamma"], ["y_plain"]),
             ms("SkipLayerNormalization", ["x", "skip1", "gamma", "", "bias"], ["y_b", "", "", "s_b"],
                epsilon=1e-3)]
    feeds = {"x": x, "skip": skip, "skip1": f32(3, 16)}
    check(model(nodes, feeds, ["y", "mean", "inv_std", "sum", "y_plain", "y_b", "s_b"],
                {"gamma": gamma, "beta": beta, "bias": bias}), feeds, tmp_path)


def test_layer_normalization_contrib(tmp_path):
    """onnxruntime registers its contrib LayerNormalization in the default domain (opsets before
    17, where ONNX adopted it); tools also write it as com.microsoft.LayerNormalization, which
    onnxruntime itself does not load: that form is compared with the default-domain node."""
    x = f32(2, 4, 10)
    inits = {"scale": f32(10), "b": f32(10), "scale2": f32(4, 10)}

    def nodes(domain):
        return [helper.make_node("LayerNormalization", ["x", "scale", "b"], ["y", "mean", "inv"],
                                 axis=-1, epsilon=1e-5, domain=domain),
                helper.make_node("LayerNormalization", ["x", "scale2"], ["y2"], axis=1,
                                 epsilon=1e-3, domain=domain)]
    outs = ["y", "mean", "inv", "y2"]
    check(model(nodes(""), {"x": x}, outs, inits, opset=13), {"x": x}, tmp_path / "opset13")
    expected = run_onnxruntime(model(nodes(""), {"x": x}, outs, inits), {"x": x})
    m = model(nodes(MS), {"x": x}, outs, inits)
    for got in (compile_and_run(m, {"x": x}, tmp_path / "ms"), reference_of(m, {"x": x})):
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


ATT_MASKS = {
    "none": ({}, None), "raw 2-D": ({}, [[1] * 7, [1] * 4 + [0] * 3]),
    "end positions": ({}, [7, 3]), "end and start": ({}, [6, 5, 1, 2]),
    "raw 3-D": ({}, "random"), "causal": ({"unidirectional": 1}, None),
    "causal + raw 2-D": ({"unidirectional": 1}, [[1] * 7, [1] * 4 + [0] * 3]),
    "causal + empty row": ({"unidirectional": 1}, [0, 2]), "empty row": ({}, [0, 7]),
    "qkv_hidden_sizes": ({"qkv_hidden_sizes": [8, 8, 12]}, None),
    "scale, filter value": ({"scale": 0.3, "mask_filter_value": -1000.0}, [5, 7]),
    "attention_bias": ({}, "bias")}


@pytest.mark.parametrize("case", list(ATT_MASKS))
def test_attention(tmp_path, case):
    """com.microsoft Attention (the transformer optimizer's fused BERT/GPT-2 attention), every
    mask_index form onnxruntime's CPU kernel takes, unidirectional, unequal V width, scale,
    attention_bias; a row masked everywhere is uniform there (-10000, not -inf) and here.
    Within 1e-4 of onnxruntime (measured 1.4e-6)."""
    b, s, d, heads = 2, 7, 16, 4
    attrs, mask = ATT_MASKS[case]
    sizes = attrs.get("qkv_hidden_sizes", [d, d, d])
    inits = {"w": f32(d, sum(sizes), scale=0.3), "b": f32(sum(sizes), scale=0.1)}
    feeds, ins = {"x": f32(b, s, d)}, ["x", "w", "b"]
    if mask == "bias":
        feeds["ab"] = f32(1, heads, s, s)
        ins += ["", "", "ab"]
    elif mask is not None:
        feeds["m"] = RNG.integers(0, 2, (b, s, s)).astype(np.int32) if mask == "random" \
            else np.array(mask, np.int32)
        ins.append("m")
    m = model([ms("Attention", ins, ["y"], num_heads=heads, **attrs)], feeds, ["y"], inits)
    check(m, feeds, tmp_path)


@pytest.mark.parametrize("form", ["segments and mask", "position_ids, no segments", "no mask"])
def test_embed_layer_normalization(tmp_path, form):
    """EmbedLayerNormalization with its three outputs (normalized sum, mask_index: each row's
    count of 1s, zeros without a mask, which masks every key: uniform rows; the embedding sum),
    then an Attention reading that mask_index and a SkipLayerNormalization, as the transformer optimizer writes a BERT's
    first layer (mask_filter_value -FLT_MAX, as it writes it). Within 1e-4 of onnxruntime."""
    b, s, d, vocab = 2, 6, 16, 30
    ids = RNG.integers(0, vocab, (b, s)).astype(np.int32)
    feeds = {"ids": ids}
    inits = {"word": f32(vocab, d), "pos": f32(10, d), "seg": f32(2, d), "g": f32(d),
             "beta": f32(d), "w": f32(d, 3 * d, scale=0.3), "bqkv": f32(3 * d, scale=0.1),
             "g2": f32(d), "b2": f32(d)}
    ins = ["ids", "segs", "word", "pos", "seg", "g", "beta", "mask"]
    if form != "position_ids, no segments":
        feeds["segs"] = RNG.integers(0, 2, (b, s)).astype(np.int32)
    else:
        ins[1] = ins[4] = ""
        ins.append("pids")
        feeds["pids"] = np.array([[3, 1, 4, 1, 5, 9]] * b, np.int32)
    if form == "no mask":
        ins[7] = ""
    else:
        feeds["mask"] = np.array([[1] * s, [1] * 4 + [0] * (s - 4)], np.int32)
    nodes = [ms("EmbedLayerNormalization", ins, ["e", "mi", "esum"], epsilon=1e-12),
             ms("Attention", ["e", "w", "bqkv", "mi"], ["a"], num_heads=2,
                mask_filter_value=float(np.finfo(np.float32).min)),
             ms("SkipLayerNormalization", ["a", "e", "g2", "b2"], ["y"])]
    m = model(nodes, feeds, ["y", "mi", "esum"], inits)
    check(m, feeds, tmp_path)


@pytest.mark.parametrize("per_column,mask", [(False, None), (True, [5, 7])])
def test_qattention(tmp_path, per_column, mask):
    """QAttention (quantize_dynamic of an optimized BERT): uint8 input with its scale and zero
    point (a DynamicQuantizeLinear's), int8 packed weights per tensor or per column: the integer
    product, then Attention. Within 1e-4 of onnxruntime."""
    b, s, d, heads = 2, 7, 16, 4
    feeds = {"x": RNG.integers(0, 256, (b, s, d)).astype(np.uint8)}
    inits = {"w": RNG.integers(-60, 60, (d, 3 * d)).astype(np.int8), "bias": f32(3 * d),
             "xs": np.float32(0.02), "xz": np.uint8(131),
             "ws": (RNG.random(3 * d) * 0.01 + 0.002).astype(np.float32) if per_column
             else np.float32(0.006),
             "wz": np.zeros(3 * d, np.int8) if per_column else np.int8(0)}
    ins = ["x", "w", "bias", "xs", "ws", "m" if mask else "", "xz", "wz"]
    if mask:
        feeds["m"] = np.array(mask, np.int32)
    m = model([ms("QAttention", ins, ["y"], num_heads=heads)], feeds, ["y"], inits)
    check(m, feeds, tmp_path)


def test_qembed_layer_normalization(tmp_path):
    """QEmbedLayerNormalization: uint8 tables, gamma and beta with their own scales and zero
    points, dequantized, then EmbedLayerNormalization (both outputs). Within 1e-4."""
    b, s, d, vocab = 2, 6, 16, 30
    feeds = {"ids": RNG.integers(0, vocab, (b, s)).astype(np.int32),
             "segs": RNG.integers(0, 2, (b, s)).astype(np.int32),
             "mask": np.array([[1] * s, [1] * 3 + [0] * (s - 3)], np.int32)}
    names = ["word", "pos", "seg", "g", "beta"]
    shapes = [(vocab, d), (10, d), (2, d), (d,), (d,)]
    inits = {n: RNG.integers(0, 256, sh).astype(np.uint8) for n, sh in zip(names, shapes)}
    inits |= {n + "_s": np.float32(0.01 + 0.002 * i) for i, n in enumerate(names)}
    inits |= {n + "_z": np.uint8(120 + i) for i, n in enumerate(names)}
    ins = ["ids", "segs"] + names + ["mask"] + [n + "_s" for n in names] + [n + "_z" for n in names]
    m = model([ms("QEmbedLayerNormalization", ins, ["e", "mi"], epsilon=1e-12)], feeds,
              ["e", "mi"], inits)
    check(m, feeds, tmp_path)


def test_attention_past_refused(tmp_path):
    import glowpy
    from glowpy.errors import ModelError
    m = model([ms("Attention", ["x", "w", "b", "", "past"], ["y", "present"], num_heads=2,
                  name="att")], {"x": f32(1, 3, 4), "past": f32(2, 1, 2, 1, 2)}, ["y", "present"],
              {"w": f32(4, 12), "b": f32(12)})
    onnx.save(m, tmp_path / "m.onnx")
    with pytest.raises(ModelError, match=r"^node 'att' \(com.microsoft.Attention\): a past state"):
        glowpy.compile(str(tmp_path / "m.onnx"), str(tmp_path / "out"))


# -- quantized contrib ops -------------------------------------------------------------------------

def qdata(dtype, *shape):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def qp(scale, zp, dtype):
    return np.float32(scale), np.asarray(zp, dtype)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_qlinear_binary(tmp_path, dtype, op):
    z = (128, 120, 131) if dtype == np.uint8 else (3, -5, 0)
    a, b, b1 = qdata(dtype, 2, 3, 8), qdata(dtype, 2, 3, 8), qdata(dtype, 8)
    inits = {}
    for name, s, zz in (("a", 0.05, z[0]), ("b", 0.03, z[1]), ("c", 0.08 if op == "QLinearAdd" else 0.4, z[2])):
        inits[f"{name}_s"], inits[f"{name}_z"] = qp(s, zz, dtype)
    nodes = [ms(op, ["a", "a_s", "a_z", "b", "b_s", "b_z", "c_s", "c_z"], ["y"]),
             ms(op, ["a", "a_s", "a_z", "b1", "b_s", "b_z", "c_s", "c_z"], ["y_bcast"])]
    feeds = {"a": a, "b": b, "b1": b1}
    err = check(model(nodes, feeds, ["y", "y_bcast"], inits), feeds, tmp_path, lsb=1)
    assert err[1] <= 1


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_unary(tmp_path, dtype):
    zx, zy = (100, 0) if dtype == np.uint8 else (-10, -128)
    inits = {"xs": np.float32(0.06), "xz": np.asarray(zx, dtype), "ys": np.float32(1 / 256),
             "yz": np.asarray(zy, dtype), "ls": np.float32(0.05), "lz": np.asarray(zx, dtype)}
    x = np.arange(np.iinfo(dtype).min, np.iinfo(dtype).max + 1).astype(dtype).reshape(4, 64)
    nodes = [ms("QLinearSigmoid", ["x", "xs", "xz", "ys", "yz"], ["sig"]),
             ms("QLinearLeakyRelu", ["x", "xs", "xz", "ls", "lz"], ["leaky"], alpha=0.15)]
    check(model(nodes, {"x": x}, ["sig", "leaky"], inits), {"x": x}, tmp_path, lsb=1)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_global_average_pool(tmp_path, dtype):
    zx, zy = (128, 110) if dtype == np.uint8 else (-3, 7)
    inits = {"xs": np.float32(0.04), "xz": np.asarray(zx, dtype), "ys": np.float32(0.03),
             "yz": np.asarray(zy, dtype)}
    x, xl = qdata(dtype, 2, 5, 6, 7), qdata(dtype, 2, 6, 7, 5)
    nodes = [ms("QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"]),
             ms("QLinearGlobalAveragePool", ["xl", "xs", "xz", "ys", "yz"], ["yl"], channels_last=1)]
    feeds = {"x": x, "xl": xl}
    check(model(nodes, feeds, ["y", "yl"], inits), feeds, tmp_path, lsb=1)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("attrs", [{"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
                                   {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                                    "count_include_pad": 1},
                                   {"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1}])
def test_qlinear_average_pool(tmp_path, dtype, attrs):
    """quantize_static's QOperator AveragePool (DenseNet's transitions), channels first and
    last, padding counted or not, ceil_mode: within 1 LSB of onnxruntime (fixed-point
    requantization against its float rounding)."""
    zx, zy = (128, 110) if dtype == np.uint8 else (-3, 7)
    inits = {"xs": np.float32(0.04), "xz": np.asarray(zx, dtype), "ys": np.float32(0.03),
             "yz": np.asarray(zy, dtype)}
    x, xl = qdata(dtype, 2, 5, 9, 8), qdata(dtype, 2, 9, 8, 5)
    nodes = [ms("QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"], **attrs),
             ms("QLinearAveragePool", ["xl", "xs", "xz", "ys", "yz"], ["yl"], channels_last=1,
                **attrs)]
    feeds = {"x": x, "xl": xl}
    check(model(nodes, feeds, ["y", "yl"], inits), feeds, tmp_path, lsb=1)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_concat(tmp_path, dtype):
    z = (128, 100, 140) if dtype == np.uint8 else (0, -20, 12)
    inits = {"ys": np.float32(0.05), "yz": np.asarray(z[0], dtype),
             "s1": np.float32(0.05), "z1": np.asarray(z[0], dtype),  # same grid: a copy
             "s2": np.float32(0.02), "z2": np.asarray(z[1], dtype),
             "s3": np.float32(0.11), "z3": np.asarray(z[2], dtype), "c": qdata(dtype, 2, 2, 4)}
    feeds = {"x1": qdata(dtype, 2, 3, 4), "x2": qdata(dtype, 2, 1, 4)}
    nodes = [ms("QLinearConcat", ["ys", "yz", "x1", "s1", "z1", "x2", "s2", "z2", "c", "s3", "z3"],
                ["y"], axis=1)]
    check(model(nodes, feeds, ["y"], inits), feeds, tmp_path, lsb=1)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("opset,axis,shape", [(13, None, (3, 4, 10)), (13, 1, (3, 4, 10)),
                                              (12, None, (3, 4, 10)), (12, 1, (2, 3, 5, 6)),
                                              (13, -1, (2, 1000))])
def test_qlinear_softmax(tmp_path, dtype, opset, axis, shape):
    """quantize_static's y_scale 1/256: the integer QSoftmax equals onnxruntime's table kernel
    (0 LSB), under both opsets' axis semantics (the default axis -1 in both)."""
    x = qdata(dtype, *shape)
    inits = {"s": np.float32(0.05), "z": np.array(128 if dtype == np.uint8 else 0, dtype),
             "ys": np.float32(1 / 256), "yz": np.array(0 if dtype == np.uint8 else -128, dtype)}
    attrs = {"opset": opset} | ({} if axis is None else {"axis": axis})
    m = model([ms("QLinearSoftmax", ["x", "s", "z", "ys", "yz"], ["y"], **attrs)], {"x": x}, ["y"],
              inits)
    check(m, {"x": x}, tmp_path, lsb=0)


@pytest.mark.parametrize("dtype,per_column,trans_b,c_shape,alpha,out", [
    (np.uint8, False, 0, (7,), 1.0, "quantized"), (np.int8, True, 1, (7,), 1.0, "quantized"),
    (np.uint8, True, 1, None, 1.0, "quantized"), (np.int8, False, 0, (5, 7), 1.0, "quantized"),
    (np.uint8, True, 0, (5, 7), 0.5, "float"), (np.int8, False, 1, None, 1.0, "float/y_scale"),
    (np.uint8, True, 1, (1,), 0.5, "float")])
def test_qgemm(tmp_path, dtype, per_column, trans_b, c_shape, alpha, out):
    """QGemm (quantize_static's QOperator Gemm): int32 C on the accumulator's grid, alpha,
    per-column b scales, quantized or float outputs; integers equal to onnxruntime's, floats
    within 1e-4. The classifier form (quantized output, C [N]) folds into the integer QMatMul:
    its bias is C itself."""
    m_, k, n = 5, 24, 7
    a = qdata(dtype, m_, k)
    b = RNG.integers(-63, 64, (n, k) if trans_b else (k, n)).astype(np.int8)
    inits = {"as": np.float32(0.02), "az": np.array(3 if dtype == np.uint8 else -2, dtype), "b": b,
             "bs": (RNG.random(n) * 0.01 + 0.001).astype(np.float32) if per_column
             else np.array([0.004], np.float32), "bz": np.zeros(n if per_column else 1, np.int8)}
    ins = ["a", "as", "az", "b", "bs", "bz", ""]
    if c_shape is not None:
        inits["c"] = RNG.integers(-3000, 3000, c_shape).astype(np.int32)
        ins[-1] = "c"
    if out != "float":
        inits["ys"] = np.float32(0.05)
        ins.append("ys")
    if out == "quantized":
        inits["yz"] = np.array(10 if dtype == np.uint8 else -5, dtype)
        ins.append("yz")
    m = model([ms("QGemm", ins, ["y"], alpha=alpha, transB=trans_b)], {"a": a}, ["y"], inits)
    check(m, {"a": a}, tmp_path, lsb=0)
    if out == "quantized" and c_shape == (n,):
        import json
        info = json.load(open(tmp_path / "bundle" / "model.json"))
        assert any(c["name"] == "qmm_b" for c in info["constants"]), "QGemm did not fold"


# -- DynamicQuantizeLinear -------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["mixed", "positive", "negative", "zeros", "ties"])
def test_dynamic_quantize_linear(tmp_path, case):
    x = {"mixed": f32(3, 17, scale=3.0), "positive": np.abs(f32(3, 17)) + 0.5,
         "negative": -np.abs(f32(3, 17)) - 0.1, "zeros": np.zeros((3, 17), np.float32),
         # range [-2.5, 252.5]: scale 1, zero point 2.5 -> 2 and every x/scale a tie (half
         # to even; half away from zero would give 3 and odd neighbours)
         "ties": (np.arange(256, dtype=np.float32).reshape(16, 16) - np.float32(2.5))}[case]
    m = model([helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])], {"x": x},
              ["y", "s", "z"])
    check(m, {"x": x}, tmp_path, rtol=0, atol=0)


# -- refusals --------------------------------------------------------------------------------------

def test_unsupported_ops_listed_with_domains(tmp_path):
    """One line naming exactly the unsupported default-domain op and the unsupported contrib op
    (the supported FusedGemm and DynamicQuantizeLinear are not listed)."""
    import glowpy
    from glowpy.errors import ModelError
    nodes = [ms("FusedGemm", ["x", "w"], ["a"], activation="Relu"),
             helper.make_node("NoSuchOp", ["a"], ["b"], name="mystery"),
             ms("GroupQueryAttention", ["b"], ["c"], name="gqa"),
             helper.make_node("DynamicQuantizeLinear", ["c"], ["y", "s", "z"])]
    m = model(nodes, {"x": f32(2, 4)}, ["y"], {"w": f32(4, 4)})
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    with pytest.raises(ModelError) as e:
        glowpy.compile(str(path), str(tmp_path / "out"))
    assert str(e.value) == (
        "unsupported ops (2 nodes): NoSuchOp x1 (mystery); "
        "com.microsoft.GroupQueryAttention x1 (gqa); of other domains only the com.microsoft ops "
        "-list-ops shows are supported")


def test_fused_conv_unknown_activation_refused(tmp_path):
    import glowpy
    from glowpy.errors import ModelError
    m = model([ms("FusedConv", ["x", "w"], ["y"], activation="Swish")], {"x": f32(1, 2, 4, 4)},
              ["y"], {"w": f32(2, 2, 1, 1)})
    onnx.save(m, tmp_path / "m.onnx")
    with pytest.raises(ModelError, match=r"activation 'Swish' is not supported"):
        glowpy.compile(str(tmp_path / "m.onnx"), str(tmp_path / "out"))


# -- a model written by onnxruntime's quantize_dynamic ------------------------------------------

@pytest.mark.parametrize("weight_type,reduce_range", [("QUInt8", False), ("QInt8", True),
                                                      ("QInt8", False)])
def test_quantize_dynamic_model(tmp_path, weight_type, reduce_range):
    """Conv (padded) -> Relu -> MatMul + bias -> Tanh -> MatMul, quantized by onnxruntime's
    quantize_dynamic: DynamicQuantizeLinear -> ConvInteger / MatMulInteger with run-time zero
    points -> Cast -> Mul by run-time scales. Every integer step is exact, so the bundle
    matches to float rounding, except where Tanh's last-ulp difference moves a value across a
    quantization step of the next DynamicQuantizeLinear (one step of its scale, times the
    weights): within 1e-3 * max|ref| + 1e-4. Full-range int8 weights (QInt8 without
    reduce_range) are compared with glowpy's exact int64 op references instead where
    onnxruntime's VNNI-free x86 u8s8 kernels saturate 16-bit sums (off by thousands of LSB:
    the reason quantize_dynamic offers reduce_range)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from tests.test_int8 import _vnni_free_x86
    rng = np.random.default_rng(7)

    def w(*shape):
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)
    inits = {"w1": w(8, 3, 3, 3), "b1": w(8), "w2": w(8 * 4 * 4, 16), "b2": w(16),
             "w3": w(16, 10)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Flatten", ["r"], ["fl"]),
             helper.make_node("MatMul", ["fl", "w2"], ["m"]), helper.make_node("Add", ["m", "b2"], ["a"]),
             helper.make_node("Tanh", ["a"], ["t"]), helper.make_node("MatMul", ["t", "w3"], ["y"])]
    x = f32(1, 3, 8, 8)
    m = model(nodes, {"x": x}, ["y"], inits, opset=13)
    onnx.save(m, tmp_path / "float.onnx")
    quantize_dynamic(str(tmp_path / "float.onnx"), str(tmp_path / "quant.onnx"),
                     weight_type=QuantType[weight_type], reduce_range=reduce_range)
    q = onnx.load(tmp_path / "quant.onnx")
    ops = {n.op_type for n in q.graph.node}
    assert {"DynamicQuantizeLinear", "ConvInteger", "MatMulInteger"} <= ops, ops
    exact_oracle = weight_type == "QInt8" and not reduce_range and _vnni_free_x86()
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((1, 3, 8, 8)).astype(np.float32)
        expected = (reference_of if exact_oracle else run_onnxruntime)(q, {"x": x})[0]
        got = compile_and_run(str(tmp_path / "quant.onnx"), {"x": x}, tmp_path / f"out{seed}")[0]
        err = np.abs(got - expected).max()
        assert err <= 1e-3 * np.abs(expected).max() + 1e-4, (seed, err)


@pytest.mark.parametrize("direction,per_channel", [("forward", False), ("forward", True),
                                                   ("bidirectional", False),
                                                   ("bidirectional", True)])
def test_quantize_dynamic_lstm(tmp_path, direction, per_channel):
    """An LSTM (bias, initial states, peepholes; the bidirectional one with sequence lengths)
    quantized by quantize_dynamic into com.microsoft.DynamicQuantizeLSTM: int8 weights stored
    [D, K, 4H] with per-direction or per-column scales. The bundle equals onnxruntime's float
    LSTM given the weights dequantized here in numpy (the LSTM tests' 1e-4), and onnxruntime's
    quantized kernel within its rounding of the activations to uint8 (measured up to 1.8% of
    max|y|; a gate or direction mixed up is off by tens of percent). reduce_range keeps the
    weights to 7 bits, which onnxruntime's VNNI-free u8s8 kernels multiply without saturating."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    rng = np.random.default_rng(31)
    steps, batch, k, h = 6, 3, 10, 12
    nd = 2 if direction == "bidirectional" else 1
    inits = {"W": f32(nd, 4 * h, k, scale=0.3), "R": f32(nd, 4 * h, h, scale=0.3),
             "B": f32(nd, 8 * h, scale=0.1), "lens": np.array([6, 4, 1][:batch], np.int32),
             "h0": f32(nd, batch, h, scale=0.5), "c0": f32(nd, batch, h, scale=0.5),
             "P": f32(nd, 3 * h, scale=0.2)}
    lens = "lens" if nd == 2 else ""
    m = model([helper.make_node("LSTM", ["x", "W", "R", "B", lens, "h0", "c0", "P"],
                                ["y", "yh", "yc"], hidden_size=h, direction=direction)],
              {"x": f32(steps, batch, k)}, ["y", "yh", "yc"], inits)
    onnx.save(m, tmp_path / "float.onnx")
    quantize_dynamic(str(tmp_path / "float.onnx"), str(tmp_path / "quant.onnx"),
                     weight_type=QuantType.QInt8, per_channel=per_channel, reduce_range=True)
    q = onnx.load(tmp_path / "quant.onnx")
    assert [n.op_type for n in q.graph.node] == ["DynamicQuantizeLSTM"]
    qi = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    node = q.graph.node[0]
    deq = {}
    for what, (i, s, z) in {"W": (1, 8, 9), "R": (2, 10, 11)}.items():
        wq, scale, zp = (qi[node.input[j]] for j in (i, s, z))
        assert scale.shape == ((nd, 4 * h) if per_channel else (nd,)), scale.shape
        b = (nd, 1, -1) if per_channel else (nd, 1, 1)
        deq[what] = ((wq.astype(np.float32) - zp.reshape(b)) * scale.reshape(b)).transpose(0, 2, 1)
    oracle = model(m.graph.node, {"x": f32(1)}, ["y", "yh", "yc"], {**inits, **deq})
    oracle.graph.ClearField("input")
    oracle.graph.input.extend(m.graph.input)
    rng = np.random.default_rng(3)
    for seed in range(2):
        x = rng.standard_normal((steps, batch, k)).astype(np.float32)
        got = compile_and_run(str(tmp_path / "quant.onnx"), {"x": x}, tmp_path / f"out{seed}")
        for g, e in zip(got, run_onnxruntime(oracle, {"x": x})):
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)
        for g, e in zip(got, run_onnxruntime(q, {"x": x})):
            assert np.abs(g - e).max() <= 0.03 * np.abs(e).max(), (seed, np.abs(g - e).max())


def test_dynamic_quantize_lstm_weights_checked(tmp_path):
    """Float weights or a scale of the wrong shape: one error naming the input and the shape."""
    import glowpy
    from glowpy.errors import ModelError
    h, k = 4, 3
    ins = ["x", "W", "R", "", "", "", "", "", "ws", "wz", "rs", "rz"]
    inits = {"W": np.ones((1, k, 4 * h), np.int8), "R": np.ones((1, h, 4 * h), np.int8),
             "ws": np.ones((1,), np.float32), "wz": np.zeros((1,), np.int8),
             "rs": np.ones((2,), np.float32), "rz": np.zeros((1,), np.int8)}
    m = model([ms("DynamicQuantizeLSTM", ins, ["y"], hidden_size=h)], {"x": f32(2, 1, k)}, ["y"],
              inits)
    onnx.save(m, tmp_path / "m.onnx")
    with pytest.raises(ModelError, match=r"R_scale 'rs' must be float32 of shape \[1\] \(per "
                       r"direction\) or \[1, 16\] \(per column\), got float32 \[2\]"):
        glowpy.compile(str(tmp_path / "m.onnx"), str(tmp_path / "out"))
    inits["W"] = np.ones((1, k, 4 * h), np.float32)
    inits["rs"] = np.ones((1,), np.float32)
    onnx.save(model([ms("DynamicQuantizeLSTM", ins, ["y"], hidden_size=h)], {"x": f32(2, 1, k)},
                    ["y"], inits), tmp_path / "m.onnx")
    with pytest.raises(ModelError, match=r"W 'W' must be a 3-D int8 or uint8 tensor"):
        glowpy.compile(str(tmp_path / "m.onnx"), str(tmp_path / "out"))


def test_contrib_attribute_kinds_and_dotted_default_ops(tmp_path):
    """onnx has no schemas of contrib ops, so their attributes are checked against the kinds
    the op declares; a default-domain op type spelling a contrib op is no op at all (a fuzz
    finding: 'com.microsoft.FusedMatMul' in the default domain with alpha='NOTSET' crashed)."""
    import glowpy
    from glowpy.errors import ModelError
    x = {"a": f32(2, 2)}
    bad = model([ms("FusedMatMul", ["a", "a"], ["y"], alpha="NOTSET")], x, ["y"])
    dotted = model([helper.make_node("com.microsoft.FusedMatMul", ["a", "a"], ["y"])], x, ["y"])
    ints = model([ms("FusedMatMul", ["a", "a"], ["y"], alpha=2)], x, ["y"])
    for m, msg in ((bad, "node 'y' (com.microsoft.FusedMatMul): attribute 'alpha' must be a float, "
                         "got str"),
                   (dotted, "unsupported ops (1 nodes): com.microsoft.FusedMatMul x1 (y); of other "
                            "domains only the com.microsoft ops -list-ops shows are supported")):
        onnx.save(m, tmp_path / "m.onnx")
        with pytest.raises(ModelError) as e:
            glowpy.compile(str(tmp_path / "m.onnx"), str(tmp_path / "out"))
        assert str(e.value) == msg
    a = x["a"]  # an int where a float is declared is taken (helper.make_node(alpha=2) writes one)
    got = compile_and_run(ints, x, tmp_path / "ints")[0]
    np.testing.assert_allclose(got, 2 * a @ a, rtol=1e-6)


def test_contrib_ops_at_O0(tmp_path):
    """Composites have no kernels: their expansion runs at -O0 too, where the QLinear ops stay
    in their float QDQ form (no integer kernels) and still match within 1 LSB."""
    x, w = f32(1, 2, 5, 5), f32(3, 2, 3, 3)
    a, b = qdata(np.uint8, 2, 8), qdata(np.uint8, 2, 8)
    inits = {"w": w, "s1": np.float32(0.05), "z1": np.uint8(128), "s2": np.float32(0.07),
             "z2": np.uint8(120)}
    nodes = [ms("FusedConv", ["x", "w"], ["y"], activation="Relu", pads=[1, 1, 1, 1]),
             ms("QLinearAdd", ["a", "s1", "z1", "b", "s1", "z1", "s2", "z2"], ["q"])]
    feeds = {"x": x, "a": a, "b": b}
    check(model(nodes, feeds, ["y", "q"], inits), feeds, tmp_path, lsb=1, opt_level=0)
