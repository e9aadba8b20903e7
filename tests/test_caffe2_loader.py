"""The Caffe2 loader on nets built here through glowpy's schema: operator arguments the shared
nets do not exercise (legacy padding, NHWC filters in Caffe2's layout, legacy broadcast, extra
outputs, ...), each compiled, run and compared with numpy; the model forms; and the errors
(missing or wrong -model-input, unsupported operators listed at once, unreadable files)."""
import numpy as np
import pytest

import glowpy
from caffe2_models import fill, net, op, save
from glowpy.cli import run as cli_run
from glowpy.cli import app
from glowpy.errors import ModelError, UsageError
from glowpy.frontend.onnx import InputSpec
from glowpy.runtime import Bundle
from test_caffe2_nets import conv, fc, pool

RNG = np.random.default_rng(5)


def R(*shape, lo=-1.0, hi=1.0):
    return RNG.uniform(lo, hi, shape).astype(np.float32)


def run_net(tmp_path, ops, inputs, outputs, weights=None, form="pbtxt", **options):
    """Writes predict (+ init) nets, compiles, runs; returns {output name: array}."""
    weights = weights or {}
    predict = net("t", ops, list(inputs) + list(weights), outputs)
    paths = [save(predict, str(tmp_path / f"predict_net.{form}"))]
    if weights:
        paths.append(save(net("init", [fill(k, v) for k, v in weights.items()]),
                          str(tmp_path / f"init_net.{form}")))
    specs = [InputSpec(k, v.dtype, v.shape) for k, v in inputs.items()]
    info = glowpy.compile(paths, str(tmp_path / "b"), model_inputs=specs, **options)
    return Bundle(str(tmp_path / "b"), info.name).run(inputs), info


def close(a, b, tol=2e-5):
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


# -- operators --------------------------------------------------------------------------------

def test_pooling_legacy_pad_modes(tmp_path):
    x = R(1, 2, 6, 7)
    ops = [op("MaxPool", "x", "caffe", kernel=3, stride=2, pad=1, legacy_pad=3),
           op("AveragePool", "x", "caffe_avg", kernel=2, stride=2, legacy_pad=3),
           op("MaxPool", "x", "valid", kernel=3, stride=2, legacy_pad=1),
           op("AveragePool", "x", "same", kernel=3, stride=2, legacy_pad=2),
           op("AveragePool", "x", "incl", kernel=3, stride=2, pad_t=1, pad_l=0, pad_b=2, pad_r=1,
              count_include_pad=1),
           op("MaxPool", "x", "glob", global_pooling=1),
           op("AveragePool", "x", "hw", kernel_h=3, kernel_w=2, stride_h=1, stride_w=2)]
    got, _ = run_net(tmp_path, ops, {"x": x}, ["caffe", "caffe_avg", "valid", "same", "incl", "glob", "hw"])
    # Caffe's legacy rounding: rows ceil((6+2-3)/2)+1 = 4 where Caffe2 has 3, so the bottom
    # padding grows to 1 + 2 = 3; columns agree (4)
    assert got["caffe"].shape == (1, 2, 4, 4)
    close(got["caffe"], pool(x, 3, 2, (1, 1, 3, 1), "max"))
    # columns ceil((7-2)/2)+1 = 4 where Caffe2 has 3 (no head padding: no clipping)
    assert got["caffe_avg"].shape == (1, 2, 3, 4)
    close(got["caffe_avg"], pool(x, 2, 2, (0, 0, 0, 2), "avg"))
    close(got["valid"], pool(x, 3, 2, (0, 0, 0, 0), "max"))
    # SAME, stride 2: out = ceil(in/2); padding totals 1 (rows) and 2 (cols), the odd one last
    close(got["same"], pool(x, 3, 2, (0, 1, 1, 1), "avg"))
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 2), (0, 1)))
    close(got["incl"], pool(xp, 3, 2, (0, 0, 0, 0), "avg"))
    close(got["glob"], x.max(axis=(2, 3), keepdims=True))
    exp = np.stack([np.stack([x[:, :, i:i + 3, 2 * j:2 * j + 2].mean(axis=(2, 3)) for j in range(3)], -1)
                    for i in range(4)], -2)
    close(got["hw"], exp)


def test_conv_arguments(tmp_path):
    x = R(1, 4, 6, 7)
    w_oihw = R(6, 2, 3, 2)
    b = R(6)
    xh = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    ops = [op("Conv", ["x", "w", "b"], "grouped", kernels=[3, 2], strides=[2, 1], pads=[1, 0, 2, 1],
              dilations=[1, 2], group=2),
           # Caffe2's NHWC filter layout [M, kH, kW, C/group]
           op("Conv", ["xh", "wh", "b"], "nhwc", kernel_h=3, kernel_w=2, stride=1, pad=1, group=2,
              order="NHWC"),
           op("ConvRelu", ["x", "w"], "nobias", kernel_h=3, kernel_w=2, group=2),
           op("Conv", ["x", "w", "b"], "same", kernels=[3, 2], group=2, stride=2, legacy_pad=2)]
    weights = {"w": w_oihw, "b": b, "wh": np.ascontiguousarray(w_oihw.transpose(0, 2, 3, 1))}
    got, _ = run_net(tmp_path, ops, {"x": x, "xh": xh}, ["grouped", "nhwc", "nobias", "same"], weights)
    close(got["grouped"], _conv_hw(x, w_oihw, b, (2, 1), (1, 0, 2, 1), (1, 2), 2))
    close(got["nhwc"], conv(x, w_oihw, b, 1, (1, 1, 1, 1), 1, 2).transpose(0, 2, 3, 1))
    close(got["nobias"], np.maximum(conv(x, w_oihw, np.zeros(6), 1, (0, 0, 0, 0), 1, 2), 0))
    # SAME, stride 2: out = ceil(6/2) x ceil(7/2); pad totals 1 (rows) and 1 (cols), the odd one last
    close(got["same"], _conv_hw(x, w_oihw, b, (2, 2), (0, 0, 1, 1), (1, 1), 2))


def _conv_hw(x, w, b, strides, pads, dils, group):
    """conv() with per-dimension strides and dilations."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    t, l, bo, r = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (t, bo), (l, r)))
    oh = (h + t + bo - ((kh - 1) * dils[0] + 1)) // strides[0] + 1
    ow = (wd + l + r - ((kw - 1) * dils[1] + 1)) // strides[1] + 1
    y = np.zeros((n, m, oh, ow))
    for oc in range(m):
        g = oc // (m // group)
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, g * cg:(g + 1) * cg, i * dils[0]:i * dils[0] + strides[0] * (oh - 1) + 1:strides[0],
                           j * dils[1]:j * dils[1] + strides[1] * (ow - 1) + 1:strides[1]]
                y[:, oc] += np.einsum("nchw,c->nhw", patch, w[oc, :, i, j])
    return y + b.reshape(1, -1, 1, 1)


def _conv_transpose(x, w, b, stride, pads, adj=(0, 0)):
    """Scatter into the unpadded output (plus adj rows/cols), then crop [begin, size - end)."""
    n, c, h, wd = x.shape
    _, m, kh, kw = w.shape
    full = np.zeros((n, m, (h - 1) * stride + kh + adj[0], (wd - 1) * stride + kw + adj[1]))
    for i in range(h):
        for j in range(wd):
            full[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw] += \
                np.einsum("nc,cmhw->nmhw", x[:, :, i, j].astype(np.float64), w)
    t, l, bo, r = pads
    return full[:, :, t:full.shape[2] - bo, l:full.shape[3] - r] + b.reshape(1, -1, 1, 1)


def test_conv_transpose_arguments(tmp_path):
    x = R(1, 3, 3, 4)
    w = R(3, 2, 3, 3)
    b = R(2)
    xh = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    ops = [op("ConvTranspose", ["x", "w", "b"], "s2", kernel=3, stride=2, pads=[1, 0, 0, 1], adj=1),
           # Caffe2's NHWC filter layout [C, kH, kW, M]
           op("ConvTranspose", ["xh", "wh", "b"], "nhwc", kernel=3, stride=2, order="NHWC")]
    weights = {"w": w, "b": b, "wh": np.ascontiguousarray(w.transpose(0, 2, 3, 1))}
    got, _ = run_net(tmp_path, ops, {"x": x, "xh": xh}, ["s2", "nhwc"], weights)
    close(got["s2"], _conv_transpose(x, w, b, 2, (1, 0, 0, 1), (1, 1)))
    close(got["nhwc"], _conv_transpose(x, w, b, 2, (0, 0, 0, 0)).transpose(0, 2, 3, 1))


def test_fc_matmul_and_broadcast(tmp_path):
    x, w3, b, wt = R(2, 3, 4), R(5, 3, 4), R(5), R(4, 5)
    a, c = R(2, 3, 4), R(4)
    ops = [op("FC", ["x", "w3", "b"], "fc", axis=1, axis_w=1),
           op("FCTransposed", ["x", "wt", "b"], "fct", axis=2),
           op("MatMul", ["m1", "m2"], "mm", trans_a=1, trans_b=1),
           op("Add", ["a", "c"], "add_trailing", broadcast=1),
           op("Mul", ["a", "c3"], "mul_axis", broadcast=1, axis=1),
           op("Sub", ["a", "row"], "sub_numpy"),
           op("Div", ["a", "c"], "div_numpy"),
           op("Pow", "pos", "pow_arg", exponent=2.5),
           op("Sum", ["a", "a", "a"], "sum3"),
           op("Max", ["a", "a2"], "max2"), op("Min", ["a", "a2"], "min2"),
           op("ElementwiseLinear", ["a", "el_w", "el_b"], "el", axis=2)]
    inputs = {"x": x, "m1": R(4, 3), "m2": R(5, 4), "a": a, "c": c, "c3": R(3), "row": R(1, 3, 1),
              "pos": R(3, 4, lo=0.1, hi=3), "a2": R(2, 3, 4), "el_w": R(4), "el_b": R(4)}
    outs = ["fc", "fct", "mm", "add_trailing", "mul_axis", "sub_numpy", "div_numpy", "pow_arg",
            "sum3", "max2", "min2", "el"]
    got, _ = run_net(tmp_path, ops, inputs, outs, {"w3": w3, "b": b, "wt": wt})
    close(got["fc"], x.reshape(2, 12).astype(np.float64) @ w3.reshape(5, 12).T + b)
    close(got["fct"], fc(x, wt, b, 2, transposed=True))
    close(got["mm"], inputs["m1"].T.astype(np.float64) @ inputs["m2"].T)
    close(got["add_trailing"], a + c)
    close(got["mul_axis"], a * inputs["c3"].reshape(1, 3, 1))
    close(got["sub_numpy"], a - inputs["row"])
    close(got["div_numpy"], a / c)
    close(got["pow_arg"], inputs["pos"].astype(np.float64) ** 2.5, 1e-5)
    close(got["sum3"], 3 * a.astype(np.float64))
    close(got["max2"], np.maximum(a, inputs["a2"]))
    close(got["min2"], np.minimum(a, inputs["a2"]))
    close(got["el"], a * inputs["el_w"] + inputs["el_b"])


def test_data_movement(tmp_path):
    x = R(2, 6, 3, 4)
    ops = [op("Concat", ["x", "x"], ["cat", "cat_info"], order="NHWC"),
           op("Split", "x", ["s0", "s1", "s2"], axis=1, split=[1, 2, 3]),
           op("Split", "x", ["e0", "e1"], axis=-1),
           op("Reshape", "x", ["r", "r_old"], shape=[0, -1, 4]),
           op("Flatten", "x", "flat", axis=2),
           op("Transpose", "x", "tr", axes=[3, 1, 0, 2]),
           op("Transpose", "x", "rev"),
           op("NHWC2NCHW", "x", "to_nchw"),
           op("ExpandDims", "x", "ex", dims=[0, 3]),
           op("Squeeze", "ex", "sq", dims=[0, 3]),
           op("Slice", "x", "sl", starts=[1, 2, 0], ends=[-1, -2, 2]),
           op("Gather", ["x", "idx"], "ga"),
           op("Gather", ["x", "idx1"], "ga1", axis=1),
           op("Split", "x", ["u0", "u1"], axis=0, add_axis=1)]
    inputs = {"x": x}
    weights = {"idx": np.asarray([[1, 0], [1, 1]], np.int64), "idx1": np.asarray([5, 0, 2], np.int32)}
    outs = ["cat", "cat_info", "s0", "s1", "s2", "e0", "e1", "r", "r_old", "flat", "tr", "rev",
            "to_nchw", "sq", "sl", "ga", "ga1", "u0", "u1"]
    got, _ = run_net(tmp_path, ops, inputs, outs, weights)
    close(got["cat"], np.concatenate([x, x], 3))
    np.testing.assert_array_equal(got["cat_info"], np.asarray([4, 4], np.int32))
    for k, part in zip(("s0", "s1", "s2"), np.split(x, [1, 3], axis=1)):
        close(got[k], part)
    close(got["e0"], x[..., :2])
    close(got["e1"], x[..., 2:])
    close(got["r"], x.reshape(2, 18, 4))
    np.testing.assert_array_equal(got["r_old"], np.asarray([2, 6, 3, 4], np.int64))
    close(got["flat"], x.reshape(12, 12))
    close(got["tr"], x.transpose(3, 1, 0, 2))
    close(got["rev"], x.transpose(3, 2, 1, 0))
    close(got["to_nchw"], x.transpose(0, 3, 1, 2))
    close(got["sq"], x)
    close(got["sl"], x[1:2, 2:5, 0:2])  # Caffe2: end -1 is one past the last element, -2 the last
    close(got["ga"], x[np.asarray([[1, 0], [1, 1]])])
    close(got["ga1"], x[:, [5, 0, 2]])
    close(got["u0"], x[0])
    close(got["u1"], x[1])


def test_normalizations_and_activations(tmp_path):
    x = R(2, 3, 4, 5, lo=-3, hi=3)
    xh = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    s, b, m, v = R(3), R(3), R(3), R(3, lo=0.5, hi=2)
    ops = [op("SpatialBN", ["x", "s", "b", "m", "v"], "bn", epsilon=1e-3, is_test=1),
           op("SpatialBN", ["xh", "s", "b", "m", "v"], "bn_nhwc", order="NHWC", is_test=1),
           op("LRN", "xh", ["lrn", "lrn_scale"], size=3, alpha=0.1, beta=0.5, bias=2.0, order="NHWC"),
           op("LayerNorm", "x", ["ln", "ln_mean", "ln_std"], axis=2, epsilon=1e-3),
           op("ResizeNearest", "x", "rs", height_scale=1.5, width_scale=0.5),
           op("Softmax", "x", "sm", axis=2),
           op("Tanh", "x", "tanh"), op("Abs", "x", "abs"), op("Log", "ax", "log"), op("Sqrt", "ax", "sqrt"),
           op("Sigmoid", "x", "sig"), op("Relu", "x", "relu"), op("Exp", "x", "exp"),
           op("Clip", "x", "clip_max", max=0.5),
           op("Dropout", "x", ["drop", "mask"], ratio=0.5, is_test=1),
           op("PRelu", ["xh", "slope"], "prelu_nhwc", order="NHWC"),
           op("PRelu", ["x", "slope1"], "prelu_shared")]
    inputs = {"x": x, "xh": xh, "ax": np.abs(x) + 0.1}
    weights = {"s": s, "b": b, "m": m, "v": v, "slope": R(3), "slope1": R(1)}
    outs = ["bn", "bn_nhwc", "lrn", "ln", "ln_mean", "ln_std", "rs", "sm", "tanh", "abs", "log", "sqrt",
            "sig", "relu", "exp", "clip_max", "drop", "prelu_nhwc", "prelu_shared"]
    got, _ = run_net(tmp_path, ops, inputs, outs, weights)
    x64 = x.astype(np.float64)
    c4 = (1, -1, 1, 1)
    bn = (x64 - m.reshape(c4)) / np.sqrt(v.reshape(c4) + 1e-3) * s.reshape(c4) + b.reshape(c4)
    close(got["bn"], bn)
    bn5 = (x64 - m.reshape(c4)) / np.sqrt(v.reshape(c4) + 1e-5) * s.reshape(c4) + b.reshape(c4)
    close(got["bn_nhwc"], bn5.transpose(0, 2, 3, 1))
    sq = np.pad(x64 ** 2, ((0, 0), (1, 1), (0, 0), (0, 0)))
    lrn = x64 / (2.0 + 0.1 / 3 * (sq[:, :-2] + sq[:, 1:-1] + sq[:, 2:])) ** 0.5
    close(got["lrn"], lrn.transpose(0, 2, 3, 1))
    mean = x64.mean(axis=(2, 3), keepdims=True)
    std = np.sqrt(x64.var(axis=(2, 3), keepdims=True) + 1e-3)
    close(got["ln"], (x64 - mean) / std)
    close(got["ln_mean"], mean.reshape(2, 3, 1))
    close(got["ln_std"], std.reshape(2, 3, 1))
    rows = [min(int(i / 1.5), 3) for i in range(6)]
    cols = [min(int(j / 0.5), 4) for j in range(2)]
    close(got["rs"], x[:, :, rows][:, :, :, cols])
    e = np.exp(x64 - x64.max(axis=(2, 3), keepdims=True))  # Caffe2 coerces to 2-D at axis 2
    close(got["sm"], e / e.sum(axis=(2, 3), keepdims=True))
    close(got["tanh"], np.tanh(x64))
    close(got["abs"], np.abs(x))
    close(got["log"], np.log(inputs["ax"].astype(np.float64)))
    close(got["sqrt"], np.sqrt(inputs["ax"].astype(np.float64)))
    close(got["sig"], 1 / (1 + np.exp(-x64)))
    close(got["relu"], np.maximum(x, 0))
    close(got["exp"], np.exp(x64), 1e-5)
    close(got["clip_max"], np.minimum(x, 0.5))
    close(got["drop"], x)
    close(got["prelu_nhwc"], np.where(xh < 0, xh * weights["slope"], xh))
    close(got["prelu_shared"], np.where(x < 0, x * weights["slope1"][0], x))


def test_in_place_blobs_keep_their_names(tmp_path):
    x = R(2, 3, lo=-1)
    ops = [op("Relu", "x", "y"), op("Sigmoid", "y", "y"), op("Copy", "y", "z"), op("Neg", "z", "z")]
    got, info = run_net(tmp_path, ops, {"x": x}, ["y", "z"])
    assert [p["name"] for p in info.outputs] == ["y", "z"]
    close(got["y"], 1 / (1 + np.exp(-np.maximum(x, 0).astype(np.float64))))
    close(got["z"], -got["y"])


# -- model forms ------------------------------------------------------------------------------

def _small_pair():
    w, b = R(4, 3), R(4)
    predict = net("small", [op("FC", ["data", "w", "b"], "fc"), op("Relu", "fc", "out")],
                  ["data", "w", "b"], ["out"])
    init = net("small_init", [fill("w", w), fill("b", b)])
    return predict, init, lambda x: np.maximum(x.astype(np.float64) @ w.T + b, 0)


@pytest.mark.parametrize("form", ["dir", "dir_pbtxt", "pb", "pbtxt", "mixed", "swapped"])
def test_model_forms(form, tmp_path):
    predict, init, ref = _small_pair()
    d = tmp_path / "small"
    d.mkdir()
    if form == "dir":
        save(predict, str(d / "predict_net.pb"))
        save(init, str(d / "init_net.pb"))
        paths = [str(d)]
    elif form == "dir_pbtxt":
        save(predict, str(d / "predict_net.pbtxt"))
        save(init, str(d / "init_net.pbtxt"))
        paths = [str(d)]
    elif form == "mixed":
        paths = [save(predict, str(d / "p.pbtxt")), save(init, str(d / "i.pb"))]
    elif form == "swapped":
        paths = [save(init, str(d / "i.pb")), save(predict, str(d / "p.pb"))]
    else:
        paths = [save(predict, str(d / f"p.{form}")), save(init, str(d / f"i.{form}"))]
    x = R(2, 3)
    info = glowpy.compile(paths, str(tmp_path / "b"), model_inputs=[InputSpec("data", np.dtype(np.float32), (2, 3))])
    close(Bundle(str(tmp_path / "b"), info.name).run({"data": x})["out"], ref(x))


def test_cli_directory_model_and_input_errors(tmp_path, capsys):
    predict, init, ref = _small_pair()
    d = tmp_path / "small"
    d.mkdir()
    save(predict, str(d / "predict_net.pb"))
    save(init, str(d / "init_net.pb"))
    cmd = __import__("typer").main.get_command(app)
    out = str(tmp_path / "b")
    rc = cli_run([f"-model={d}", f"-emit-bundle={out}", "-model-input=data,float,[2,3]"], "model-compiler", cmd)
    assert rc == 0
    x = R(2, 3)
    close(Bundle(out, "small").run({"data": x})["out"], ref(x))
    capsys.readouterr()
    for args, code, text in [
        ([], 2, "reads external input(s) 'data'"),
        (["-model-input=data,float,[2,a]"], 2, "expected name,type"),
        (["-model-input=data,float,[2,3]", "-model-input=nope,float,[1]"], 2, "'nope', which the net does not read"),
        (["-model-input=data,float,[2,3]", "-model-input=w,float,[4,3]"], 2, "init net fills"),
        (["-model-input=data,float,[2,4]"], 1, "columns"),
    ]:
        rc = cli_run([f"-model={d}", f"-emit-bundle={tmp_path / 'x'}"] + args, "model-compiler", cmd)
        err = capsys.readouterr().err
        assert rc == code and text in err and err.count("\n") == 1, (args, rc, err)


def test_missing_inputs_are_listed_together(tmp_path):
    ops = [op("Add", ["a", "b"], "ab"), op("Mul", ["ab", "c"], "out")]
    p = save(net("t", ops, [], ["out"]), str(tmp_path / "p.pbtxt"))
    with pytest.raises(UsageError) as e:
        glowpy.compile([p], str(tmp_path / "b"), model_inputs=[InputSpec("b", np.dtype(np.float32), (2,))])
    assert "'a', 'c'" in str(e.value) and "-model-input=a,float," in str(e.value)


def test_unsupported_ops_are_listed_at_once(tmp_path):
    ops = [op("Relu", "x", "r"), op("Foo", "r", "f1"), op("Int8Sigmoid", "f1", "q"), op("Foo", "q", "f2"),
           op("Int8Relu", "f2", "f3"), op("Bar", "f3", "out")]
    p = save(net("t", ops, ["x"], ["out"]), str(tmp_path / "p.pbtxt"))
    i = save(net("i", [op("Int8GivenTensorFill", [], "w", shape=[1], values=b"\x01", Y_scale=1.0,
                          Y_zero_point=0), op("UniformFill", [], "u", shape=[2], min=0.0, max=1.0)]),
             str(tmp_path / "i.pbtxt"))
    with pytest.raises(ModelError) as e:
        glowpy.compile([p, i], str(tmp_path / "b"))
    msg = str(e.value)
    assert "(5 ops)" in msg and "Int8Relu x" not in msg and "Int8GivenTensorFill" not in msg.split("[")[0]
    for part in ("Bar x1 (out)", "Foo x2 (f1, f2)", "Int8Sigmoid x1 (q);", "UniformFill (in the init net) x1 (u)"):
        assert part in msg, msg
    assert msg.endswith("[of Caffe2's Int8 operators glowpy loads those Glow does: Int8Conv, Int8ConvRelu, "
                        "Int8FC, Int8SumRelu, Int8Relu, Int8MaxPool, Int8AveragePool, Int8Quantize, "
                        "Int8Dequantize, and the fills Int8GivenTensorFill, Int8GivenIntTensorFill]")


@pytest.mark.parametrize("content,ext,text", [
    (b"\xff\xff\xff\xff", ".pb", "not a binary Caffe2 NetDef"),
    (b"op { type: \"Relu\" input: \"x\" output: \"y\" } bogus_field: 3", ".pbtxt", "protobuf text format"),
    (b"", ".pb", "declares no external_output"),
])
def test_bad_files(content, ext, text, tmp_path):
    p = tmp_path / ("p" + ext)
    p.write_bytes(content)
    with pytest.raises(ModelError, match=text):
        glowpy.compile([str(p)], str(tmp_path / "b"))


def test_onnx_file_named_pb_gets_a_hint(tmp_path):
    import onnx
    from util import model_path
    p = tmp_path / "model.pb"
    p.write_bytes(open(model_path("mnist8"), "rb").read())
    with pytest.raises(ModelError, match="is an ONNX model: give it the .onnx extension"):
        glowpy.compile([str(p)], str(tmp_path / "b"))
    del onnx


def test_fill_errors(tmp_path):
    cases = [
        (op("GivenTensorFill", [], "w", shape=[2, 2], values=[1.0, 2.0, 3.0]), "3 values given for shape \\[2, 2\\]"),
        (op("ConstantFill", [], "w", shape=[1 << 20, 1 << 20], value=1.0), "more than the limit"),
        (op("ConstantFill", [], "w", shape=[2, -3]), "negative"),
        (op("ConstantFill", [], "w", shape=[2], dtype=4), "data type STRING is not supported"),
    ]
    for k, (fill_op, text) in enumerate(cases):
        p = save(net("t", [op("Relu", "w", "out")], ["w"], ["out"]), str(tmp_path / f"p{k}.pbtxt"))
        i = save(net("i", [fill_op]), str(tmp_path / f"i{k}.pbtxt"))
        with pytest.raises(ModelError, match=text):
            glowpy.compile([p, i], str(tmp_path / f"b{k}"))


def test_unused_extra_outputs_and_their_use(tmp_path):
    ops = [op("Dropout", "x", ["y", "mask"]), op("Relu", "mask", "out")]
    p = save(net("t", ops, ["x"], ["out"]), str(tmp_path / "p.pbtxt"))
    with pytest.raises(ModelError, match="'mask' is output 1 of operator 'y' \\(Dropout\\), which glowpy does not compute"):
        glowpy.compile([p], str(tmp_path / "b"), model_inputs=[InputSpec("x", np.dtype(np.float32), (2,))])


@pytest.mark.parametrize("bad_op,text", [
    (op("Conv", ["x"], "y", kernel=1), "has 1 input\\(s\\); it needs at least 2"),
    (op("FC", ["x", "x"], "y"), "needs at least 3"),
    (op("Split", "x", [], axis=0), "needs named outputs"),
    (op("ResizeNearest", "x", "y", height_scale=1e30), "must be positive and below 65536"),
    (op("Softmax", "x", "y", axis=7), "axis 7 is out of range for rank 4"),
    (op("Slice", "x", "y", starts=[0], ends=[9]), "out of range for dim 0"),
    (op("MaxPool", "x", "y", stride=2), "kernel size is missing"),
    (op("Conv", ["x", "x"], "y", order="NCWH"), "order 'NCWH' is not supported"),
    (op("Add", ["x", "v"], "y", broadcast=1, axis=0), "cannot broadcast \\[3\\] onto \\[1, 2, 3, 4\\] at axis 0"),
    (op("LRN", "x", "y"), "argument 'size' is required"),
    (op("Conv", ["x", "w5"], "y", order="NHWC"), "filter shape \\[2, 5\\] matches neither"),
])
def test_malformed_operators(bad_op, text, tmp_path):
    p = save(net("t", [bad_op], ["x", "v", "w5"], ["y"]), str(tmp_path / "p.pbtxt"))
    specs = [InputSpec("x", np.dtype(np.float32), (1, 2, 3, 4)), InputSpec("v", np.dtype(np.float32), (3,)),
             InputSpec("w5", np.dtype(np.float32), (2, 5))]
    specs = [s for s in specs if s.name in bad_op.input]
    with pytest.raises(ModelError, match=text):
        glowpy.compile([p], str(tmp_path / "b"), model_inputs=specs)


def test_init_net_fill_reading_an_earlier_fill(tmp_path):
    init = net("i", [fill("shape", np.asarray([2, 3], np.int64)),
                     op("ConstantFill", "shape", "w", input_as_shape=1, value=0.5),
                     op("ConstantFill", "w", "k", value=2, dtype=2)])
    predict = net("p", [op("Mul", ["x", "w"], "y")], ["x", "w"], ["y", "k"])
    paths = [save(predict, str(tmp_path / "p.pb")), save(init, str(tmp_path / "i.pb"))]
    x = R(2, 3)
    info = glowpy.compile(paths, str(tmp_path / "b"), model_inputs=[InputSpec("x", np.dtype(np.float32), (2, 3))])
    got = Bundle(str(tmp_path / "b"), info.name).run({"x": x})
    close(got["y"], x * 0.5)
    np.testing.assert_array_equal(got["k"], np.full((2, 3), 2, np.int32))
