"""The op-level Caffe2 nets of ../shared/caffe2Models: every net whose operators glowpy supports
is compiled (predict + init net, protobuf text), linked into a -Wall -Werror C harness and run
on inputs given here, and each output is compared with a numpy implementation of the Caffe2
operator written in this file (Caffe2 semantics: NHWC order, legacy padding, legacy broadcast,
count_include_pad=0 averages, ...); the Int8 nets are checked in test_caffe2_int8.py. Every
other net is refused with one error listing its unsupported operators. The lists together
cover the directory."""
import glob
import math
import os

import numpy as np
import pytest
from google.protobuf import text_format

import glowpy
from glowpy.errors import ModelError
from glowpy.frontend import caffe2_proto as c2
from glowpy.frontend.onnx import InputSpec
from glowpy.runtime import Bundle
from util import SHARED

C2DIR = os.path.join(SHARED, "caffe2Models")
RNG = np.random.default_rng(2024)


def R(*shape, lo=-1.0, hi=1.0):
    return RNG.uniform(lo, hi, shape).astype(np.float32)


def weights_of(init):
    """Fill values of an init net, read independently of the loader."""
    if init is None:
        return {}
    n = c2.NetDef()
    text_format.Parse(open(os.path.join(C2DIR, init)).read(), n)
    out = {}
    for o in n.op:
        a = {x.name: x for x in o.arg}
        shape = list(a["shape"].ints) if "shape" in a else None
        if o.type == "GivenTensorFill":
            v = np.asarray(a["values"].floats, np.float32)
        elif o.type == "GivenTensorIntFill":
            v = np.asarray(a["values"].ints, np.int32)
        elif o.type == "GivenTensorInt64Fill":
            v = np.asarray(a["values"].ints, np.int64)
        elif o.type == "GivenTensorByteStringToUInt8Fill":
            v = np.frombuffer(a["values"].strings[0], np.uint8)
        elif o.type == "ConstantFill":
            v = np.full(shape, a["value"].f if "value" in a else 0.0, np.float32)
        out[o.output[0]] = v.reshape(shape)
    return out


# -- numpy references of the Caffe2 operators (NCHW, OIHW filters) ----------------------------

def conv(x, w, b, stride=1, pads=(0, 0, 0, 0), dil=1, group=1):
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    t, l, bo, r = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (t, bo), (l, r)))
    oh = (h + t + bo - ((kh - 1) * dil + 1)) // stride + 1
    ow = (wd + l + r - ((kw - 1) * dil + 1)) // stride + 1
    y = np.zeros((n, m, oh, ow))
    for oc in range(m):
        g = oc // (m // group)
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, g * cg:(g + 1) * cg, i * dil:i * dil + stride * (oh - 1) + 1:stride,
                           j * dil:j * dil + stride * (ow - 1) + 1:stride]
                y[:, oc] += np.einsum("nchw,c->nhw", patch, w[oc, :, i, j])
    return y + b.reshape(1, -1, 1, 1)


def conv_transpose(x, w, b, stride=1, pads=(0, 0, 0, 0)):
    n, c, h, wd = x.shape
    _, m, kh, kw = w.shape
    full = np.zeros((n, m, (h - 1) * stride + kh, (wd - 1) * stride + kw))
    for i in range(h):
        for j in range(wd):
            full[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw] += \
                np.einsum("nc,cmhw->nmhw", x[:, :, i, j].astype(np.float64), w)
    t, l, bo, r = pads
    return full[:, :, t:full.shape[2] - bo, l:full.shape[3] - r] + b.reshape(1, -1, 1, 1)


def pool(x, k, stride, pads, kind):
    t, l, bo, r = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (t, bo), (l, r)), constant_values=np.nan)
    oh, ow = (xp.shape[2] - k) // stride + 1, (xp.shape[3] - k) // stride + 1
    y = np.zeros(x.shape[:2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, :, i * stride:i * stride + k, j * stride:j * stride + k]
            y[:, :, i, j] = np.nanmax(win, axis=(2, 3)) if kind == "max" else np.nanmean(win, axis=(2, 3))
    return y


def nhwc(f):
    """Runs an NCHW reference on NHWC data."""
    return lambda x, *a, **k: np.transpose(f(np.transpose(x, (0, 3, 1, 2)), *a, **k), (0, 2, 3, 1))


def fc(x, w, b, axis=1, transposed=False):
    x2 = x.reshape(math.prod(x.shape[:axis]), -1).astype(np.float64)
    y = x2 @ (w if transposed else w.T) + b
    return y.reshape(x.shape[:axis] + (y.shape[-1],))


def layer_norm(x, axis, eps, gamma=None, beta=None):
    axes = tuple(range(axis % x.ndim, x.ndim))
    x = x.astype(np.float64)
    y = (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + eps)
    return y * (1 if gamma is None else gamma) + (0 if beta is None else beta)


def softplus(x):
    return np.log1p(np.exp(x.astype(np.float64)))


def resize_nearest_nhwc(x, hs, ws):
    h, w = x.shape[1:3]
    oh, ow = int(h * hs), int(w * ws)
    rows = [min(int(i / hs), h - 1) for i in range(oh)]
    cols = [min(int(j / ws), w - 1) for j in range(ow)]
    return x[:, rows][:, :, cols]


# -- the nets ---------------------------------------------------------------------------------
# name: (predict, init, {input: array}, reference(inputs dict, weights dict) -> [outputs])

def _nets():
    n = {}
    x = R(1, 1, 4, 4)
    n["conv"] = ("predict_net.pbtxt", "init_net.pbtxt", {"gpu_0/data_0": x},
                 lambda i, w: [conv(i["gpu_0/data_0"], w["conv_w"], w["conv_b"], 1, (1,) * 4, dil=2)])
    n["conv_nhwc"] = ("conv_nhwc_predict_net.pbtxt", "conv_nhwc_init_net.pbtxt", {"inputs": R(1, 3, 3, 1)},
                      lambda i, w: [nhwc(conv)(i["inputs"], w["conv_w"], w["conv_b"], 1, (1,) * 4)])
    n["convrelu"] = ("convrelu_pred_net.pbtxt", "convrelu_init_net.pbtxt", {"gpu_0/data_0": R(1, 1, 3, 3, lo=-3)},
                     lambda i, w: [np.maximum(conv(i["gpu_0/data_0"], w["conv_w"], w["conv_b"], 1, (1,) * 4), 0)])
    n["convtranspose"] = ("convtranspose.pbtxt", "convtranspose_init.pbtxt", {"gpu_0/data_0": R(1, 1, 2, 2)},
                          lambda i, w: [conv_transpose(i["gpu_0/data_0"], w["convTranspose_w"], w["convTranspose_b"])])
    n["convtranspose_pads"] = ("convtranspose_pads.pbtxt", "convtranspose_init.pbtxt", {"gpu_0/data_0": R(1, 1, 3, 3)},
                               lambda i, w: [conv_transpose(i["gpu_0/data_0"], w["convTranspose_w"],
                                                            w["convTranspose_b"], 1, (1,) * 4)])
    n["convtranspose_nhwc"] = ("convtranspose_nhwc.pbtxt", "convtranspose_nhwc_init.pbtxt", {"inputs": R(1, 3, 3, 1)},
                               lambda i, w: [nhwc(conv_transpose)(i["inputs"], w["convTranspose_w"],
                                                                  w["convTranspose_b"], 1, (1,) * 4)])
    # no init net: the filter and bias are inputs of the bundle
    n["convtranspose_net"] = ("convtranspose_net.pbtxt", None,
                              {"gpu_0/data_0": R(1, 1, 3, 3), "convTranspose_w": R(1, 1, 2, 2),
                               "convTranspose_b": R(1)},
                              lambda i, w: [conv_transpose(i["gpu_0/data_0"], i["convTranspose_w"],
                                                           i["convTranspose_b"], 1, (1,) * 4)])
    n["dce"] = ("dce_test_predict_net.pbtxt", "dce_test_init_net.pbtxt",
                {"fc_inputs": R(2, 3), "conv_inputs": R(1, 3, 3, 1)},
                lambda i, w: [nhwc(conv)(i["conv_inputs"], w["conv_w"], w["conv_b"], 1, (1,) * 4)])
    for name, ax, tr, shape in (("fc", 1, False, (2, 3)), ("fc_3d_second_axis", 2, False, (2, 3, 4)),
                                ("fcTransposed", 1, True, (2, 3))):
        pred = {"fc_3d_second_axis": "fc_3d_second_axis_predict.pbtxt"}.get(name, name + "_predict_net.pbtxt")
        init = {"fc_3d_second_axis": "fc_3d_second_axis_init.pbtxt"}.get(name, name + "_init_net.pbtxt")
        inp = "input" if name == "fc_3d_second_axis" else "inputs"
        n[name] = (pred, init, {inp: R(*shape)},
                   lambda i, w, ax=ax, tr=tr, inp=inp: [fc(i[inp], w["weights"], w["bias"], ax, tr)])
    n["fc_4d_first_axis"] = ("fc_4d_first_axis_predict_net.pbtxt", "fc_4d_first_axis_init_net.pbtxt",
                             {"inputs": R(2, 5, 1, 1)},
                             lambda i, w: [fc(i["inputs"], w["weights"], w["bias"], 1)])
    n["NCHW2NHWC"] = ("NCHW2NHWC_predict_net.pbtxt", None, {"inputs": R(1, 2, 3, 4)},
                      lambda i, w: [np.transpose(i["inputs"], (0, 2, 3, 1))])
    n["alias"] = ("alias_op_net.pbtxt", None, {"X": R(2, 3)}, lambda i, w: [i["X"]])
    n["copy_fills"] = ("pre_partitioned_fill_test_predict_net.pbtxt", "fill_test_init_net.pbtxt", {},
                       lambda i, w: [w["tensor_fill_float"], w["tensor_int_fill"], w["tensor_int64_fill"],
                                     w["tensor_string_to_uint8_fill"]])
    n["dropout"] = ("dropout.pbtxt", None, {"input": R(3, 4)}, lambda i, w: [i["input"]])
    n["avgpool"] = ("avgpool_predict_net.pbtxt", None, {"inputs": R(1, 2, 3, 3)},
                    lambda i, w: [pool(i["inputs"], 2, 1, (1,) * 4, "avg")])
    n["avgpool_nhwc"] = ("avgpool_nhwc_predict_net.pbtxt", None, {"inputs": R(1, 3, 3, 2)},
                         lambda i, w: [nhwc(pool)(i["inputs"], 2, 1, (1,) * 4, "avg")])
    n["maxpool"] = ("maxpool_predict_net.pbtxt", None, {"inputs": R(1, 2, 3, 3)},
                    lambda i, w: [pool(i["inputs"], 2, 1, (1,) * 4, "max")])
    n["maxpool_nhwc"] = ("maxpool_nhwc_predict_net.pbtxt", None, {"inputs": R(1, 3, 3, 2)},
                         lambda i, w: [nhwc(pool)(i["inputs"], 2, 1, (1,) * 4, "max")])
    # legacy_pad=3 (Caffe's rounding up) changes nothing at stride 1; test_caffe2_loader.py
    # covers strides where it does
    n["maxpool_legacy_padding"] = ("maxpool_legacy_padding_predict_net.pbtxt", None, {"inputs": R(1, 1, 4, 4)},
                                   lambda i, w: [pool(i["inputs"], 2, 1, (1,) * 4, "max")])
    n["batched_matmul"] = ("batched_matmul.pbtxt", None, {"lhs": R(3, 2, 4), "rhs": R(3, 4, 5)},
                           lambda i, w: [i["lhs"].astype(np.float64) @ i["rhs"]])
    n["matmul_trans_RHS"] = ("matmul_trans_RHS_predict_net.pbtxt", None, {"inputs_0": R(2, 3, 4), "inputs_1": R(2, 5, 4)},
                             lambda i, w: [i["inputs_0"].astype(np.float64) @ np.swapaxes(i["inputs_1"], 1, 2)])
    n["parallel_matmul"] = ("parallel_matmul_predict_net.pbtxt", None, {"inputs_0": R(4, 3, 2), "inputs_1": R(4, 2, 3)},
                            lambda i, w: [i["inputs_0"].astype(np.float64) @ i["inputs_1"]])
    n["clip_default"] = ("clip_op_default_net.pbtxt", None, {"inputs_0": R(3, 4, lo=-100, hi=100)},
                         lambda i, w: [i["inputs_0"]])
    n["clip"] = ("clip_op_net.pbtxt", None, {"inputs_0": R(5, 4, lo=0, hi=80)},
                 lambda i, w: [np.clip(i["inputs_0"], 20, 60)])
    xs3 = {f"inputs_{k}": R(2, 3, 4, 5) for k in range(3)}
    n["concat_add_axis_at_edge"] = ("concat_add_axis_at_edge.pbtxt", None, xs3,
                                    lambda i, w: [np.stack([i[f"inputs_{k}"] for k in range(3)], axis=4)])
    xs2 = {f"inputs_{k}": R(2, 3) for k in range(3)}
    n["concat_add_axis"] = ("concat_add_axis_predict_net.pbtxt", None, xs2,
                            lambda i, w: [np.stack([i[f"inputs_{k}"] for k in range(3)], axis=1)])
    xsc = {"inputs_0": R(2, 1), "inputs_1": R(2, 2), "inputs_2": R(2, 3)}
    n["concat"] = ("concat_predict_net.pbtxt", None, xsc,
                   lambda i, w: [np.concatenate([i[f"inputs_{k}"] for k in range(3)], axis=1)])
    n["constant_fill_input_as_shape"] = ("constant_fill_input_as_shape.pbtxt", "constant_fill_input_as_shape_init.pbtxt",
                                         {}, lambda i, w: [np.full(w["inputs_0"], 3.0, np.float32)])
    n["constant_fill_use_input_shape"] = ("constant_fill_use_input_shape.pbtxt", None, {"inputs_0": R(7, 11, 13)},
                                          lambda i, w: [np.full((7, 11, 13), 3.0, np.float32)])
    n["constant_fill_use_provided_shape"] = ("constant_fill_use_provided_shape.pbtxt", None, {},
                                             lambda i, w: [np.full((7, 11, 13, 17), 3.0, np.float32)])
    n["elementwise_linear_broadcast"] = ("elementwise_linear_broadcast_net.pbtxt", None,
                                         {"X": R(10, 9), "w": R(9), "b": R(9)},
                                         lambda i, w: [i["X"] * i["w"] + i["b"]])
    n["elementwise_linear_default"] = ("elementwise_linear_default_net.pbtxt", None,
                                       {"X": R(10, 9), "w": R(9), "b": R(9)},
                                       lambda i, w: [i["X"] * i["w"] + i["b"]])
    n["elementwise_linear_axis0"] = ("elementwise_linear_net.pbtxt", None,
                                     {"X": R(2, 3, 4), "w": R(24), "b": R(24)},
                                     lambda i, w: [(i["X"].reshape(1, 24) * i["w"] + i["b"]).reshape(2, 3, 4)])
    n["exp"] = ("exp_op_net.pbtxt", None, {"data": R(3, 4, lo=-5, hi=5)}, lambda i, w: [np.exp(i["data"])])
    n["gather_const_fold"] = ("gather_const_fold.pbtxt", "gather_const_fold_init.pbtxt", {"data": R(1, 2, 3, 4)},
                              lambda i, w: [i["data"].reshape(np.asarray((1, 2, 3, 4))[w["index"]])])
    n["layernorm"] = ("layernorm_pred_net.pbtxt", None, {"input": R(2, 3, 4, 5)},
                      lambda i, w: [layer_norm(i["input"], 2, 0.05)])
    n["layernorm_neg_axis"] = ("layernorm_neg_axis_pred_net.pbtxt", None, {"input": R(2, 3, 4, 5)},
                               lambda i, w: [layer_norm(i["input"], -2, 0.05)])
    n["layernorm_weight_bias"] = ("layernorm_weight_bias_pred_net.pbtxt", "layernorm_weight_bias_init_net.pbtxt",
                                  {"input": R(2, 4, 3)},
                                  lambda i, w: [layer_norm(i["input"], 1, 1e-5, w["weight"], w["bias"])])
    n["mean_3inputs"] = ("mean_3inputs.pbtxt", None, {f"input{k}": R(3, 4) for k in (1, 2, 3)},
                         lambda i, w: [(i["input1"] + i["input2"] + i["input3"]) / 3])
    n["multiple_inputs"] = ("multiple_inputs_graph.pbtxt", None, {"input1": R(2, 3), "input2": R(2, 3)},
                            lambda i, w: [i["input1"] + i["input2"]])
    n["negative"] = ("negative.pbtxt", None, {"input": R(3, 4)}, lambda i, w: [-i["input"]])
    n["multi_op"] = ("pre_partitioned_multi_op_predict_net.pbtxt", None,
                     {"mm0_in": R(3, 3), "mm1_in": R(3, 3), "add_in": R(3, 3)},
                     lambda i, w: [i["mm0_in"] * (i["mm0_in"] @ i["mm1_in"])
                                   - (i["mm0_in"] @ i["mm1_in"] + i["add_in"])])
    n["prelu"] = ("prelu.pbtxt", None, {"prelu_test_input": R(2, 3, 4, 4), "slope": R(3)},
                  lambda i, w: [np.where(i["prelu_test_input"] < 0,
                                         i["prelu_test_input"] * i["slope"].reshape(1, 3, 1, 1),
                                         i["prelu_test_input"])])
    n["resize_nearest"] = ("resize_nearest_op_net.pbtxt", None, {"input_0": R(1, 3, 4, 2)},
                           lambda i, w: [resize_nearest_nhwc(i["input_0"], 2.0, 1.5)])
    n["sigmoid"] = ("sigmoid.pbtxt", None, {"sigmoid_test_input": R(3, 5, lo=-8, hi=8)},
                    lambda i, w: [1 / (1 + np.exp(-i["sigmoid_test_input"].astype(np.float64)))])
    n["softplus"] = ("softplus.pbtxt", None, {"input": R(3, 5, lo=-20, hi=20)},
                     lambda i, w: [softplus(i["input"])])
    n["swish"] = ("swish_op_net.pbtxt", None, {"input": R(3, 5, lo=-8, hi=8)},
                  lambda i, w: [i["input"] / (1 + np.exp(-i["input"].astype(np.float64)))])
    n["cast_int64"] = ("cast_int64_to_int64.pbtxt", None,
                       {"input": RNG.integers(-100, 100, (3, 4)).astype(np.int64)}, lambda i, w: [i["input"]])
    return n


NETS = _nets()

# predict nets refused, with the operator the error must name
REFUSED = {
    "4bit_fused_rowwise_quantized_sparse_lengths_sum_predict_net.pbtxt": "SparseLengthsSumFused4BitRowwise",
    "argmin.pbtxt": "ArgMin", "batch_box_cox_predict_net.pbtxt": "BatchBoxCox",
    "batch_sparse_to_dense_last_dim_1.pbtxt": "BatchSparseToDense", "bucketize_op_net.pbtxt": "Bucketize",
    "dot_product_predict_net.pbtxt": "DotProduct",
"eq_op_net.pbtxt": "EQ",
    "fbfcpacked_3d_second_axis_predict.pbtxt": "FbFCPacked",
    "fbfcpacked_4d_first_axis_predict_net.pbtxt": "FbFCPacked",
    "fill_examples_with_indicator.pbtxt": "FillExamplesWithIndicator", "fill_test_predict_net.pbtxt": "EQ",
    "fused_rowwise_quantized_sparse_lengths_sum_predict_net.pbtxt": "SparseLengthsSumFused8BitRowwise",
    "fused_rowwise_quantized_sparse_lengths_sum_predict_net_length1.pbtxt": "SparseLengthsSumFused8BitRowwise",
    "fused_rowwise_quantized_sparse_lengths_weighted_sum_avg_length_predict_net.pbtxt":
        "SparseLengthsWeightedSumFused8BitRowwise",
    "fused_rowwise_quantized_sparse_lengths_weighted_sum_predict_net.pbtxt": "SparseLengthsWeightedSumFused8BitRowwise",
    "gather_ranges.pbtxt": "GatherRanges", "gaussian_fill_input_as_shape.pbtxt": "GaussianFill",
    "gaussian_fill_use_input_shape.pbtxt": "GaussianFill",
    "gaussian_fill_use_input_shape_with_extra_shape.pbtxt": "GaussianFill",
    "gaussian_fill_use_provided_shape.pbtxt": "GaussianFill", "gelu.pbtxt": "Gelu",
    "halftofloat_op_net.pbtxt": "HalfToFloat", 
    "lengths_range_fill_predict_net.pbtxt": "LengthsRangeFill", "lengths_sum.pbtxt": "LengthsSum",
    "lengths_to_ranges.pbtxt": "LengthsToRanges", "log1p.pbtxt": "Log1p", "logit_op_net.pbtxt": "Logit",
    "lpnorm_p1.pbtxt": "LpNorm", "lpnorm_p2.pbtxt": "LpNorm", "modulo_op_net.pbtxt": "Mod",
    "reduce_back_sum.pbtxt": "ReduceBackSum", "reducebackmean.pbtxt": "ReduceBackMean",
    "replace_nan_predict_net.pbtxt": "ReplaceNaN", "rmsnorm.pbtxt": "RMSNorm",
    "rowwise_quantized_sparse_lengths_sum_predict_net.pbtxt": "SparseLengthsSum8BitsRowwise",
    "rowwise_quantized_sparse_lengths_weighted_sum_predict_net.pbtxt": "SparseLengthsWeightedSum8BitsRowwise",
    "scale.pbtxt": "Scale", "sign.pbtxt": "Sign", "sparse_to_dense.pbtxt": "SparseToDense",
    "sparse_to_dense_mask_op_net.pbtxt": "SparseToDenseMask", "sparselabelsplit.pbtxt": "SparseLabelSplit",
    "sqr_predict_net.pbtxt": "Sqr", "topk_k2.pbtxt": "TopK", "uniform_fill_input_as_shape.pbtxt": "UniformFill",
    "uniform_fill_use_input_shape.pbtxt": "UniformFill",
}
# nets whose 75 MB ConstantFill weights ([9190, 2048]) make a 450 MB weights.txt
BIG = {
    "fc_4d": ("fc_4d_predict_net.pbtxt", "fc_4d_init_net.pbtxt", (1, 1, 1, 2048), 3, False),
    "fcTransposed_4d": ("fcTransposed_4d_predict_net.pbtxt", "fcTransposed_4d_init_net.pbtxt", (1, 1, 1, 2048), 3, True),
}
EMPTY = "empty_predict_net.pbtxt"


def compile_net(predict, init, inputs, out_dir):
    paths = [os.path.join(C2DIR, predict)] + ([os.path.join(C2DIR, init)] if init else [])
    specs = [InputSpec(k, v.dtype, v.shape) for k, v in inputs.items()]
    info = glowpy.compile(paths, str(out_dir), model_inputs=specs)
    return info, Bundle(str(out_dir), info.name)


@pytest.mark.parametrize("name", sorted(NETS))
def test_net_matches_numpy_reference(name, tmp_path):
    predict, init, inputs, ref = NETS[name]
    info, bundle = compile_net(predict, init, inputs, tmp_path)
    got = bundle.run(inputs)
    expected = ref(inputs, weights_of(init))
    assert len(info.outputs) == len(expected)
    for p, e in zip(info.outputs, expected):
        g = got[p["name"]]
        assert g.shape == np.shape(e), f"{p['name']}: shape {g.shape} != {np.shape(e)}"
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-5, err_msg=p["name"])
        else:
            assert g.dtype == np.asarray(e).dtype
            np.testing.assert_array_equal(g, e, err_msg=p["name"])


@pytest.mark.parametrize("name", sorted(BIG))
def test_big_fc_nets(name, tmp_path):
    predict, init, shape, axis, transposed = BIG[name]
    x = R(*shape)
    _, bundle = compile_net(predict, init, {"inputs": x}, tmp_path)
    got = list(bundle.run({"inputs": x}).values())[0]
    w = weights_of(init)
    np.testing.assert_allclose(got, fc(x, w["weights"], w["bias"], axis, transposed), atol=1e-5)


@pytest.mark.parametrize("predict", sorted(REFUSED))
def test_unsupported_net_is_refused_listing_its_ops(predict, tmp_path):
    with pytest.raises(ModelError) as e:  # (a net named 'log1p' would be libm's function)
        glowpy.compile([os.path.join(C2DIR, predict)], str(tmp_path), network_name="net")
    msg = str(e.value)
    assert msg.startswith("unsupported Caffe2 operators") and REFUSED[predict] in msg, msg
    assert not os.listdir(tmp_path)


def test_empty_net_is_refused(tmp_path):
    with pytest.raises(ModelError, match="external output 'unused_output' is not produced"):
        glowpy.compile([os.path.join(C2DIR, EMPTY), os.path.join(C2DIR, "empty_init_net.pbtxt")],
                       str(tmp_path))


def test_every_net_is_accounted_for():
    from test_caffe2_int8 import INT8_NETS  # the Int8 nets, checked there
    files = {os.path.basename(p) for p in glob.glob(os.path.join(C2DIR, "*.pbtxt"))}
    passing = {v[0] for v in NETS.values()} | {v[0] for v in BIG.values()} | {v[0] for v in INT8_NETS.values()}
    assert not passing & set(REFUSED)
    predict_nets = {f for f in files if "init" not in f}
    assert predict_nets == passing | set(REFUSED) | {EMPTY}
