"""Caffe2's Int8 operators as Glow loads them: uint8 tensors with a zero point become int8
(values and zero points minus 128). The Int8 nets of ../shared/caffe2Models and nets built here
through glowpy's schema are compiled, linked into a C harness and run; their int8 outputs are
compared with a numpy reference of the quantized arithmetic (dequantize, the float op in
float64, round half to even onto the output's grid, saturate) within one quantization step,
and the graph is checked to be integer kernels (no float Conv/Gemm left)."""
import os

import numpy as np
import pytest
from google.protobuf import text_format

import glowpy
from caffe2_models import arg, net, op, save
from glowpy.cli import app
from glowpy.cli import run as cli_run
from glowpy.errors import ModelError, UsageError
from glowpy.frontend import caffe2_proto as c2
from glowpy.frontend.caffe2 import load_caffe2
from glowpy.frontend.onnx import InputSpec, LoadOptions
from glowpy.ir.passes.pipeline import optimize
from glowpy.runtime import Bundle
from test_caffe2_nets import C2DIR, conv, fc, nhwc, pool

RNG = np.random.default_rng(88)


def q8(*shape, lo=-128, hi=127):
    return RNG.integers(lo, hi + 1, shape).astype(np.int8)


def quant(y, s, z):
    """Glow's int8 quantization: round half to even, saturate."""
    return np.clip(np.rint(np.asarray(y, np.float64) / np.float32(s)) + z, -128, 127).astype(np.int8)


def deq(v, s, z):
    return (np.asarray(v, np.float64) - z) * np.float64(np.float32(s))


def within_a_step(got, expected, what=""):
    assert got.dtype == np.int8 and got.shape == expected.shape, (what, got.dtype, got.shape)
    diff = np.abs(got.astype(np.int64) - expected.astype(np.int64))
    assert diff.max(initial=0) <= 1, f"{what}: {diff.max()} steps off\n{got}\n{expected}"


def real_weights(init):
    """The real values of an init net's fills (uint8 bytes: scale * (byte - zero point)), read
    independently of the loader."""
    n = c2.NetDef()
    text_format.Parse(open(os.path.join(C2DIR, init)).read(), n)
    out = {}
    for o in n.op:
        a = {x.name: x for x in o.arg}
        if o.type == "Int8GivenTensorFill":
            v = (np.frombuffer(a["values"].s, np.uint8) - np.float64(a["Y_zero_point"].i)) * np.float32(a["Y_scale"].f)
        elif o.type == "Int8GivenIntTensorFill":
            v = (np.asarray(a["values"].ints, np.float64) - a["Y_zero_point"].i) * np.float32(a["Y_scale"].f)
        elif o.type == "GivenTensorFill":
            v = np.asarray(a["values"].floats, np.float64)
        else:
            v = np.asarray(a["values"].ints, np.int64)
        out[o.output[0]] = v.reshape(list(a["shape"].ints))
    return out


def on_grid(b, step):
    """A float bias as Glow's backends quantize it: onto the accumulator's grid."""
    return np.rint(b / step) * step


# -- the shared nets --------------------------------------------------------------------------
# name: (predict, init, {input: (array, (scale, offset) or None)}, reference(x, w) -> output,
#        (Y_scale, Glow offset) of an int8 output or None for float)

def _nets():
    n = {}
    # NHWC, group 2, 1x1 kernel, pad 1; per-channel filter scales 6 and offsets 5 from the
    # conv_w_loaded_* blobs (Glow's int8 offsets, not shifted); float bias 7
    xs, xz = 0.5, -3
    n["conv_group_quantized"] = (
        "conv_group_quantized_pred_net.pbtxt", "conv_group_quantized_init_net.pbtxt",
        {"input": (q8(1, 1, 1, 4, lo=-12, hi=6), (xs, xz))},
        lambda x, w: quant(nhwc(conv)(deq(x, xs, xz), 6.0 * ((np.frombuffer(b"\x80\x81" * 4, np.uint8)
                                                              .astype(np.int64) - 128 - 5).reshape(4, 1, 1, 2)
                                                             .transpose(0, 3, 1, 2)),
                                      on_grid(w["conv_b"], xs * 6.0), 1, (1,) * 4, group=2),
                           3.14, 5 - 128),
        (3.14, -123))
    cs, cz = 0.25, 10
    n["int8convrelu"] = (
        "int8convrelu_pred_net.pbtxt", "int8convrelu_init_net.pbtxt",
        {"gpu_0/data_0": (q8(1, 1, 3, 3, lo=-30, hi=14), (cs, cz))},
        lambda x, w: quant(np.maximum(conv(deq(x, cs, cz), w["conv_w"], w["conv_b"], 1, (1,) * 4), 0), 1.5, 7 - 128),
        (1.5, -121))
    fs, fz = 0.25, -5
    n["int8fc_3d_second_axis"] = (
        "int8fc_3d_second_axis_predict.pbtxt", "int8fc_3d_second_axis_init.pbtxt",
        {"input": (q8(2, 2, 3, lo=-60, hi=120), (fs, fz))},
        lambda x, w: deq(quant(fc(deq(x, fs, fz), w["weights"], w["bias"], 2), 1, -128), 1, -128), None)
    n["int8fc_4d_first_axis"] = (
        "int8fc_4d_first_axis_predict_net.pbtxt", "int8fc_4d_first_axis_init_net.pbtxt",
        {"input": (q8(2, 5, 1, 1, lo=-30), (0.02, 0))},
        lambda x, w: deq(quant(fc(deq(x, 0.02, 0), w["weights"], w["bias"], 1), 1, -128), 1, -128), None)
    # dequantize_output=1 with a float input: Caffe2's dynamic quantization, computed in float
    n["dynamic_quantized_fc"] = (
        "dynamic_quantized_fc_predict_net.pbtxt", "dynamic_quantized_fc_init.pbtxt",
        {"input": (RNG.uniform(-2, 2, (2, 3)).astype(np.float32), None)},
        lambda x, w: fc(x, w["weights"], w["bias"]), None)
    n["int8sumrelu"] = (
        "int8sumrelu_pred_net.pbtxt", "int8sumrelu_init_net.pbtxt",
        {"gpu_0/data_0": (q8(4, 2), (0.5, 3))},
        lambda x, w: quant(np.maximum(deq(x, 0.5, 3) + w["rhs"], 0), 1, -128), (1.0, -128))
    # Int8Quantize(scale 1, zero point 0) then a sum with -75600: every output is 0 (offset -8)
    n["int8sumrelu_large_range"] = (
        "int8sumrelu_large_range_pred_net.pbtxt", "int8sumrelu_large_range_init_net.pbtxt",
        {"gpu_0/data_0": (RNG.uniform(-50, 300, (4, 2)).astype(np.float32), None)},
        lambda x, w: quant(np.maximum(deq(quant(x, 1, -128), 1, -128) + w["rhs"], 0), 575, 120 - 128),
        (575.0, -8))
    # scales 1e-10 (input), 7e-10 (rhs), 1e-11 (output): results across the output's range
    n["int8sumrelu_tiny_scale"] = (
        "int8sumrelu_tiny_scale_pred_net.pbtxt", "int8sumrelu_tiny_scale_init_net.pbtxt",
        {"gpu_0/data_0": (q8(4, 2, lo=70, hi=120), (1e-10, 0))},
        lambda x, w: quant(np.maximum(deq(x, 1e-10, 0) + w["rhs"], 0), 1e-11, 5 - 128),
        (float(np.float32(1e-11)), -123))
    return n


INT8_NETS = _nets()


def specs_of(inputs):
    return [InputSpec(k, v.dtype, v.shape, *(q or ())) for k, (v, q) in inputs.items()]


def compile_c2(paths, inputs, out_dir, **options):
    info = glowpy.compile(paths, str(out_dir), model_inputs=specs_of(inputs), **options)
    return info, Bundle(str(out_dir), info.name).run({k: v for k, (v, _) in inputs.items()})


def ops_after_optimize(paths, inputs):
    g = load_caffe2(paths, LoadOptions({s.name: s for s in specs_of(inputs)}))
    return {n.op for n in optimize(g).nodes}


@pytest.mark.parametrize("name", sorted(INT8_NETS))
def test_shared_int8_net_matches_quantized_reference(name, tmp_path):
    predict, init, inputs, ref, yq = INT8_NETS[name]
    paths = [os.path.join(C2DIR, predict), os.path.join(C2DIR, init)]
    info, got = compile_c2(paths, inputs, tmp_path)
    (out,), = [info.outputs]
    g = got[out["name"]]
    expected = ref(next(iter(inputs.values()))[0], real_weights(init))
    if yq is None:
        assert g.dtype == np.float32 and g.shape == expected.shape
        step = 1.0 if name.startswith("int8fc") else 0.0  # dequantized int8 (scale 1), or float
        np.testing.assert_allclose(g, expected, rtol=2e-6, atol=step + 1e-5)
    else:
        within_a_step(g, expected, name)
        assert out["quantization"] == {"scale": pytest.approx(yq[0], rel=1e-6), "offset": yq[1]}
    ops = ops_after_optimize(paths, inputs)
    if name != "dynamic_quantized_fc":  # the others compute on integers only
        assert not ops & {"Conv", "Gemm", "MatMul", "Add", "Sum", "Relu"}, ops


def test_int8_fc_values_match_caffe2(tmp_path):
    """Glow's importer tests: Int8FC on iota inputs against the values Caffe2 computed (its
    dynamic quantization of the second net is only close to the exact products)."""
    x = np.arange(12, dtype=np.int8).reshape(2, 2, 3)
    _, got = compile_c2([os.path.join(C2DIR, "int8fc_3d_second_axis_predict.pbtxt"),
                         os.path.join(C2DIR, "int8fc_3d_second_axis_init.pbtxt")],
                        {"input": (x, (1.0, 0))}, tmp_path / "a")
    caffe2 = [[[4.956894, 14.890197], [14.003877, 51.125492]], [[22.921618, 86.84314], [31.9686, 123.07844]]]
    np.testing.assert_allclose(got["output"], caffe2, atol=0.2)
    x = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    _, got = compile_c2([os.path.join(C2DIR, "dynamic_quantized_fc_predict_net.pbtxt"),
                         os.path.join(C2DIR, "dynamic_quantized_fc_init.pbtxt")],
                        {"input": (x, None)}, tmp_path / "b")
    np.testing.assert_allclose(got["output"], [[8, 27, 46, 65], [17, 63, 109, 155]], atol=1e-5)


# -- nets built here --------------------------------------------------------------------------

def int8_fill(name, real_shape_values, scale, zero_point, int32=False):
    """Int8GivenTensorFill (uint8 bytes in `s`, as Caffe2 writes them) or Int8GivenIntTensorFill."""
    v = np.asarray(real_shape_values)
    o = op("Int8GivenIntTensorFill" if int32 else "Int8GivenTensorFill", [], name, shape=list(v.shape),
           Y_scale=float(scale), Y_zero_point=int(zero_point))
    a = c2.Argument(name="values")
    if int32:
        a.ints.extend(int(x) for x in v.reshape(-1))
    else:
        a.s = v.astype(np.uint8).tobytes()
    o.arg.append(a)
    return o


def avg_include_pad(x, k, stride, pad):
    """NCHW average over k x k windows of x zero-padded by `pad` (padding counted)."""
    return pool(np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad))), k, stride, (0,) * 4, "avg")


def chain_net():
    """Int8Quantize -> Int8Conv (NHWC) -> Int8Relu -> Int8MaxPool -> Int8AveragePool -> Int8FC ->
    Int8Dequantize, every stage an external output, and its per-stage references."""
    w_u8 = RNG.integers(0, 256, (4, 3, 3, 3))  # [M, kh, kw, C]: the NHWC filter layout
    ws, wz = 0.02, 131
    b_i32 = RNG.integers(-300, 300, 4)
    fw_u8, fws, fwz = RNG.integers(0, 256, (5, 64)), 0.01, 120
    fb_i32 = RNG.integers(-2000, 2000, 5)
    bs = float(np.float32(0.05) * np.float32(ws))  # the accumulator's grid: bias used as is
    fbs = float(np.float32(0.06) * np.float32(fws))
    init = net("init", [int8_fill("w", w_u8, ws, wz), int8_fill("b", b_i32, bs, 0, int32=True),
                        int8_fill("fw", fw_u8, fws, fwz), int8_fill("fb", fb_i32, fbs, 0, int32=True)])
    ops = [op("Int8Quantize", "data", "q0", Y_scale=0.05, Y_zero_point=128),
           op("Int8Conv", ["q0", "w", "b"], "c1", kernel=3, pad=1, order="NHWC", Y_scale=0.1, Y_zero_point=120),
           op("Int8Relu", "c1", "r", Y_scale=0.08, Y_zero_point=0),
           op("Int8MaxPool", "r", "m", kernel=2, stride=2, order="NHWC", Y_scale=9.0, Y_zero_point=3),
           op("Int8AveragePool", "m", "a", kernel=2, stride=1, pad=1, order="NHWC", Y_scale=0.06, Y_zero_point=10),
           op("Int8FC", ["a", "fw", "fb"], "f", Y_scale=0.2, Y_zero_point=100),
           op("Int8Dequantize", "f", "out")]
    outs = ["q0", "c1", "r", "m", "a", "f", "out"]
    w = (w_u8 - wz) * np.float32(ws)
    fw = (fw_u8 - fwz) * np.float32(fws)
    refs = {  # stage -> (previous stage, reference of the previous stage's value)
        "q0": ("data", lambda x: quant(x, 0.05, 0)),
        "c1": ("q0", lambda v: quant(nhwc(conv)(deq(v, 0.05, 0), w.transpose(0, 3, 1, 2), b_i32 * np.float32(bs),
                                                1, (1,) * 4), 0.1, -8)),
        "r": ("c1", lambda v: quant(np.maximum(deq(v, 0.1, -8), 0), 0.08, -128)),
        "m": ("r", lambda v: nhwc(pool)(v.astype(np.float64), 2, 2, (0,) * 4, "max").astype(np.int8)),
        "a": ("m", lambda v: quant(nhwc(avg_include_pad)(deq(v, 0.08, -128), 2, 1, 1), 0.06, -118)),
        "f": ("a", lambda v: quant(fc(deq(v, 0.06, -118), fw, fb_i32 * np.float32(fbs)), 0.2, -28)),
    }
    return net("chain", ops, ["data", "w", "b", "fw", "fb"], outs), init, refs


@pytest.mark.parametrize("form", ["pbtxt", "pb"])
def test_int8_chain_built_through_the_schema(form, tmp_path):
    predict, init, refs = chain_net()
    paths = [save(predict, str(tmp_path / f"predict_net.{form}")), save(init, str(tmp_path / f"init_net.{form}"))]
    x = RNG.uniform(-2, 5, (1, 6, 6, 3)).astype(np.float32)
    info, got = compile_c2(paths, {"data": (x, None)}, tmp_path / "b")
    values = dict(got, data=x)
    for stage, (prev, ref) in refs.items():
        within_a_step(got[stage], ref(values[prev]), stage)
    np.testing.assert_allclose(got["out"], deq(got["f"], 0.2, -28), rtol=1e-6)
    assert got["m"].shape == (1, 3, 3, 4) and got["a"].shape == (1, 4, 4, 4) and got["out"].shape == (1, 5)
    quant_of = {o["name"]: o.get("quantization") for o in info.outputs}
    assert quant_of["m"] == {"scale": pytest.approx(0.08), "offset": -128}  # the input's (Glow)
    assert quant_of["a"] == {"scale": pytest.approx(0.06), "offset": -118}
    # integer kernels throughout; with only the final output the results are the same
    ops = ops_after_optimize(paths, {"data": (x, None)})
    assert {"QConv", "QAvgPool", "QMatMul"} <= ops and not ops & {"Conv", "AveragePool", "Gemm", "Relu"}, ops
    predict.ClearField("external_output")
    predict.external_output.append("out")
    save(predict, paths[0])
    _, alone = compile_c2(paths, {"data": (x, None)}, tmp_path / "c")
    np.testing.assert_array_equal(alone["out"], got["out"])


def test_nchw_groupwise_conv_and_three_way_sum(tmp_path):
    """Default (NCHW) order with Glow's NCHW filter layout, per-group filter scales and
    offsets (one per group: each of its channels), stride 2, no bias, a uint8q input; and an
    Int8SumRelu of three tensors."""
    ws, wo = np.array([0.03, 0.07], np.float32), np.array([-3, 4], np.int32)
    w_u8 = RNG.integers(100, 160, (4, 2, 3, 3))  # [M, C/group, kh, kw], group 2
    init = net("init", [int8_fill("w", w_u8, 1.0, 0), op("GivenTensorFill", [], "w_loaded_scales", shape=[2],
                                                         values=ws.tolist()),
                        op("GivenTensorIntFill", [], "w_loaded_offsets", shape=[2], values=wo.tolist())])
    ops = [op("Int8ConvRelu", ["x", "w"], "y", kernel=3, stride=2, group=2, quantize_groupwise=1,
              Y_scale=0.05, Y_zero_point=20),
           op("Int8SumRelu", ["y", "y2", "y3"], "s", Y_scale=0.1, Y_zero_point=50)]
    predict = net("t", ops, ["x", "w", "y2", "y3"], ["y", "s"])
    paths = [save(predict, str(tmp_path / "p.pbtxt")), save(init, str(tmp_path / "i.pbtxt"))]
    x = RNG.integers(0, 256, (1, 4, 7, 7)).astype(np.uint8)
    y2, y3 = q8(1, 4, 3, 3), q8(1, 4, 3, 3)
    inputs = {"x": (x, (0.04, 130)), "y2": (y2, (0.03, -5)), "y3": (y3, (0.02, 7))}
    info, got = compile_c2(paths, inputs, tmp_path / "b")
    w = ((w_u8 - 128) - np.repeat(wo, 2).reshape(4, 1, 1, 1)) * np.repeat(ws, 2).reshape(4, 1, 1, 1)
    within_a_step(got["y"], quant(np.maximum(conv(deq(x, 0.04, 130), w, np.zeros(4), 2, group=2), 0), 0.05, -108))
    s = deq(got["y"], 0.05, -108) + deq(y2, 0.03, -5) + deq(y3, 0.02, 7)
    within_a_step(got["s"], quant(np.maximum(s, 0), 0.1, -78), "sum")



@pytest.mark.parametrize("rounding", ["even", "away"])
def test_int8_average_pool_padding_and_zero_points(rounding, tmp_path):
    """Padding is real 0 (the input's zero point), whether the divisor counts it (Int8's
    default, QNNPACK's) or not; same scale (exact division) and a new scale (requantized)."""
    ops = [op("Int8AveragePool", "x", "incl", kernel=3, stride=2, pad=1, Y_scale=0.1, Y_zero_point=100),
           op("Int8AveragePool", "x", "excl", kernel=3, stride=2, pad=1, count_include_pad=0,
              Y_scale=0.1, Y_zero_point=100),
           op("Int8AveragePool", "x", "rescaled", kernel=2, stride=1, pad_t=1, pad_l=0, pad_b=0, pad_r=1,
              Y_scale=0.07, Y_zero_point=140),
           op("Int8MaxPool", "x", "max", kernel=3, stride=2, pad=1)]
    p = save(net("t", ops, ["x"], ["incl", "excl", "rescaled", "max"]), str(tmp_path / "p.pbtxt"))
    x = q8(2, 3, 7, 6)
    inputs = {"x": (x, (0.1, 45))}
    _, got = compile_c2([p], inputs, tmp_path / "b", quantization_rounding=rounding)
    xr = deq(x, 0.1, 45)
    within_a_step(got["incl"], quant(avg_include_pad(xr, 3, 2, 1), 0.1, -28), "incl")
    within_a_step(got["excl"], quant(pool(xr, 3, 2, (1,) * 4, "avg"), 0.1, -28), "excl")
    padded = np.pad(xr, ((0, 0), (0, 0), (1, 0), (0, 1)))
    within_a_step(got["rescaled"], quant(pool(padded, 2, 1, (0,) * 4, "avg"), 0.07, 12), "rescaled")
    np.testing.assert_array_equal(got["max"], pool(x.astype(np.float64), 3, 2, (1,) * 4, "max"))
    assert "QAvgPool" in ops_after_optimize([p], inputs)


def test_moves_between_int8_ops_keep_the_quantization(tmp_path):
    """Int8 tensors through NHWC2NCHW, Reshape and Flatten keep their scale and offset."""
    ops = [op("Int8Quantize", "x", "q", Y_scale=0.05, Y_zero_point=60),
           op("NHWC2NCHW", "q", "t"), op("Reshape", "t", ["r", "old_shape"], shape=[1, 3, 8]),
           op("Flatten", "r", "f"), op("Int8Relu", "f", "y", Y_scale=0.02, Y_zero_point=0),
           op("Int8Dequantize", "y", "out")]
    p = save(net("t", ops, ["x"], ["t", "out"]), str(tmp_path / "p.pbtxt"))
    x = RNG.uniform(-3, 6, (1, 2, 4, 3)).astype(np.float32)
    info, got = compile_c2([p], {"x": (x, None)}, tmp_path / "b")
    xq = quant(x, 0.05, -68)
    np.testing.assert_array_equal(got["t"], xq.transpose(0, 3, 1, 2))
    assert {o["name"]: o.get("quantization") for o in info.outputs}["t"] == {"scale": pytest.approx(0.05),
                                                                           "offset": -68}
    y = quant(np.maximum(deq(xq.transpose(0, 3, 1, 2).reshape(1, 24), 0.05, -68), 0), 0.02, -128)
    np.testing.assert_allclose(got["out"], deq(y, 0.02, -128), atol=0.02 + 1e-6)

def test_int8q_input_through_the_command_line(tmp_path, capsys):
    cmd = __import__("typer").main.get_command(app)
    out = str(tmp_path / "b")
    model = [f"-model={C2DIR}/int8sumrelu_pred_net.pbtxt", f"-model={C2DIR}/int8sumrelu_init_net.pbtxt"]
    rc = cli_run(model + [f"-emit-bundle={out}", "-model-input=gpu_0/data_0,int8q,0.5,3,[4,2]"],
                 "model-compiler", cmd)
    assert rc == 0, capsys.readouterr().err
    x = q8(4, 2)
    got = Bundle(out, "int8sumrelu_pred_net").run({"gpu_0/data_0": x})["out"]
    within_a_step(got, quant(np.maximum(deq(x, 0.5, 3) + 1.0, 0), 1, -128))
    header = open(os.path.join(out, "int8sumrelu_pred_net.h")).read()
    assert "Scale: 0.5" in header and "Offset (zero point): 3" in header
    rc = cli_run(model + [f"-emit-bundle={out}x", "-model-input=gpu_0/data_0,int8q,0,3,[4,2]"], "model-compiler", cmd)
    err = capsys.readouterr().err
    assert rc == 2 and "scale 0.0 must be a positive finite number" in err and err.count("\n") == 1, err


# -- errors -----------------------------------------------------------------------------------

W1 = int8_fill("w1", np.full((1, 1, 1, 1), 130), 0.5, 128)


@pytest.mark.parametrize("bad_op,fills,text", [
    (op("Int8Conv", ["xq", "w1"], "y", kernel=1, Y_zero_point=0), [W1], "argument 'Y_scale' is missing"),
    (op("Int8Quantize", "xf", "y", Y_scale=1.0, Y_zero_point=300), [],
     "'Y_zero_point' is 300; Caffe2's uint8 zero points are 0..255"),
    (op("Int8Relu", "xf", "y"), [], "input 'xf' is float32, but Int8Relu reads an int8 tensor: declare it "
     "with -model-input=xf,int8q,scale,offset,\\[shape\\] or quantize it with Int8Quantize"),
    (op("Int8Quantize", "xq", "y", Y_scale=1.0, Y_zero_point=0), [], "Int8Quantize reads a float tensor"),
    (op("Int8Relu", "w1", "y"), [int8_fill("w1", np.full((2, 2), 1), 1.0, 0).__class__(
        type="Int8GivenTensorFill", output=["w1"], arg=[arg("shape", [2, 2]), arg("values", b"\x01\x02\x03"),
                                                          arg("Y_scale", 1.0), arg("Y_zero_point", 0)])],
     "3 values given for shape \\[2, 2\\]"),
    (op("Int8Relu", "w1", "y"), [op("Int8GivenTensorFill", [], "w1", shape=[1], values=b"\x01", Y_zero_point=0)],
     "argument 'Y_scale' is missing"),
    (op("Int8Conv", ["xq", "w1"], "y", kernel=1, group=2, quantize_groupwise=1, Y_scale=1.0, Y_zero_point=0),
     [int8_fill("w1", np.ones((2, 1, 1, 1)), 1.0, 0)], "quantize_groupwise=1 needs the constant blobs 'w1_loaded_scales'"),
    (op("Int8FC", ["xq", "w1", "bi"], "y", Y_scale=1.0, Y_zero_point=0),
     [int8_fill("w1", np.ones((1, 2)), 1.0, 0), op("GivenTensorIntFill", [], "bi", shape=[1], values=[3])],
     "bias 'bi' is int32 without a scale"),
    (op("Int8Softmax", "xq", "y"), [], "of Caffe2's Int8 operators glowpy loads those Glow does: Int8Conv"),
])
def test_int8_errors(bad_op, fills, text, tmp_path):
    predict = net("t", [bad_op], ["xq", "xf"], ["y"])
    paths = [save(predict, str(tmp_path / "p.pbtxt"))]
    if fills:
        paths.append(save(net("i", fills), str(tmp_path / "i.pbtxt")))
    specs = [InputSpec("xq", np.dtype(np.int8), (1, 2, 1, 1), 0.5, 0), InputSpec("xf", np.dtype(np.float32), (1, 2, 1, 1))]
    specs = [s for s in specs if s.name in bad_op.input]
    with pytest.raises(ModelError, match=text) as e:
        glowpy.compile(paths, str(tmp_path / "b"), model_inputs=specs)
    assert "\n" not in str(e.value)


def test_int8q_input_with_a_bad_offset(tmp_path):
    p = save(net("t", [op("Int8Relu", "x", "y")], ["x"], ["y"]), str(tmp_path / "p.pbtxt"))
    with pytest.raises(UsageError, match="offset 200 is outside the int8 range -128..127"):
        glowpy.compile([p], str(tmp_path / "b"), model_inputs=[InputSpec("x", np.dtype(np.int8), (2,), 1.0, 200)])
