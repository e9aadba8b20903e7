"""Caffe2's Int8 operators and fills, loaded as Glow's Caffe2 importer loads them, in the QDQ
form of the graph IR: DequantizeLinear -> the float op (Conv, Gemm, Add, Relu, the pools) ->
QuantizeLinear. The QDQ pass (ir/passes/quant/) turns each pattern into one integer
kernel (QConv, QMatMul, QAdd, QAvgPool, Requantize, MaxPool on int8); a pattern it cannot fold
keeps its float form, which computes the same values up to rounding.

Caffe2 quantizes to uint8 with a zero point (arguments Y_scale, Y_zero_point). Glow holds the
tensors as int8, values and zero points shifted down by 128 (OFFSETSHIFT), and so does glowpy:
a bundle's int8 tensors and their (scale, offset) are those of Glow's bundle. Int8GivenTensorFill
holds uint8 bytes (shifted the same way); Int8GivenIntTensorFill int32 values (biases: their zero
point is kept). A quantized external input is declared with
`-model-input=name,int8q,scale,offset,[shape]` (Glow's int8 offset, not shifted).

As in Glow: `order` defaults to NCHW (Caffe2's own Int8 kernels only run NHWC, which its nets
state with order "NHWC"), and Int8Conv's filter follows it ([M, C/group, k...] or
[M, k..., C/group]); quantize_groupwise=1 (with group > 1) takes per-channel filter scales and
offsets from the blobs `<filter>_loaded_scales` / `<filter>_loaded_offsets` (offsets as int8
zero points, unshifted, as Glow reads them); Int8MaxPool keeps its input's scale and offset;
Int8AveragePool counts padding in its divisor (count_include_pad defaults to 1: QNNPACK's and
Glow's average). Int8FC with dequantize_output=1 returns float; its input may then be float
(Caffe2's dynamic quantization), which glowpy multiplies in float32 with the dequantized
weights instead of re-quantizing it at run time."""
from __future__ import annotations

import math

import numpy as np

from glowpy.errors import ModelError, show
from glowpy.frontend.caffe2_ctx import Args, axis_of, rank_at_least, to_nchw, to_nhwc
from glowpy.frontend.caffe2_ops import _hw, pool_node, window_attrs

OFFSETSHIFT = 128
INT8, INT32 = np.dtype(np.int8), np.dtype(np.int32)
QUANTIZED = (np.dtype(np.int8), np.dtype(np.uint8))


# -- quantization parameters ------------------------------------------------------------------

def _scale(args: Args, where: str, name: str = "Y_scale") -> np.float32:
    if not args.has(name):
        raise ModelError(f"{where}: argument '{name}' is missing (the output's quantization "
                         "scale)")
    s = args.f(name)
    if not (math.isfinite(s) and s > 0 and math.isfinite(np.float32(s)) and np.float32(s) > 0):
        raise ModelError(f"{where}: argument '{name}' must be a positive finite scale, got {s}")
    return np.float32(s)


def _uint8_zero_point(args: Args, where: str) -> int:
    """Caffe2's uint8 Y_zero_point as Glow's int8 offset."""
    if not args.has("Y_zero_point"):
        raise ModelError(f"{where}: argument 'Y_zero_point' is missing (the output's zero point)")
    z = args.i("Y_zero_point")
    if not 0 <= z <= 255:
        raise ModelError(f"{where}: argument 'Y_zero_point' is {z}; Caffe2's uint8 zero points "
                         "are 0..255")
    return z - OFFSETSHIFT


def out_params(c, default=None):
    """(scale, int8 offset, dtype) of the operator's output from Y_scale / Y_zero_point."""
    a = c.args
    if default is not None and not a.has("Y_scale") and not a.has("Y_zero_point"):
        return default
    return _scale(a, c.where), _uint8_zero_point(a, c.where), INT8


def _qin(c, x, i, bias=False):
    """(scale, zero point, dtype) of the operator's quantized input i (int8/uint8; int32 too
    for a bias)."""
    name = show(c.op.input[i]) if i < len(c.op.input) else show(x.name)
    if x.dtype in QUANTIZED + ((INT32,) if bias else ()) and x.qparams is not None:
        s, z = x.qparams
        info = np.iinfo(x.dtype)
        if not info.min <= z <= info.max:
            raise c.err(f"input '{name}': offset {z} is outside the {x.dtype.name} range")
        return np.float32(s), int(z), x.dtype
    if x.dtype.kind == "f":
        raise c.err(f"input '{name}' is {x.dtype.name}, but {show(c.op.type)} reads an int8 "
                    f"tensor: declare it with -model-input={name},int8q,scale,offset,[shape] or "
                    "quantize it with Int8Quantize")
    raise c.err(f"input '{name}' ({x.dtype.name}) is not a quantized tensor: it has no scale "
                "and offset (Int8* fills, Int8* operators and int8q inputs have them)")


def _dq(c, x, q, what, axis=None, final=False):
    s, z, dt = q
    ins = [x, c.const(np.asarray(s, np.float32), f"{what}_scale"),
           c.const(np.asarray(z, dt), f"{what}_zero_point")]
    return c.one("DequantizeLinear", ins, {} if axis is None else {"axis": axis}, final)


def _q(c, y, q, final=False):
    s, z, dt = q
    v = c.one("QuantizeLinear", [y, c.const(np.asarray(s, np.float32), "y_scale"),
                                 c.const(np.asarray(z, dt), "y_zero_point")], final=final)
    v.qparams = (float(s), int(z))
    return v


def _nhwc_out(c, v):
    y = to_nhwc(c, v)
    y.qparams = v.qparams
    return y


def _bias(c, b, i, n):
    """A bias of n values: float as it is, quantized ones dequantized (any scale: the QDQ pass
    rounds it onto the accumulator's grid, as Glow's backends do)."""
    if b.size != n:
        raise c.err(f"bias '{show(c.op.input[i])}' has {b.size} elements, expected {n}")
    flat = c.reshape(b, (n,))
    if b.dtype.kind == "f":
        return flat
    if b.qparams is None:
        raise c.err(f"bias '{show(c.op.input[i])}' is {b.dtype.name} without a scale: fill it "
                    "with Int8GivenIntTensorFill (or give a float bias)")
    return _dq(c, flat, _qin(c, b, i, bias=True), "b")


# -- operators --------------------------------------------------------------------------------

def _filter_params(c, wq, m, group):
    """The filter's (scales, offsets, axis): per tensor, or per output channel with
    quantize_groupwise (from the <filter>_loaded_scales / _loaded_offsets blobs)."""
    if not (c.args.i("quantize_groupwise", 0) and group > 1):
        return wq, None
    name = c.op.input[1]
    sv, ov = (c.blobs.get(f"{name}_{k}") for k in ("loaded_scales", "loaded_offsets"))
    if sv is None or ov is None or not (sv.is_const and ov.is_const):
        raise c.err(f"quantize_groupwise=1 needs the constant blobs '{show(name)}_loaded_scales' "
                    f"and '{show(name)}_loaded_offsets' (the filter's scales and offsets)")
    s = np.asarray(sv.const, np.float64).reshape(-1)
    o = np.asarray(ov.const).reshape(-1)
    if s.size == group != m and o.size == group:  # one per group: each of its channels
        s, o = np.repeat(s, m // group), np.repeat(o, m // group)
    if s.size != m or o.size != m:
        raise c.err(f"'{show(name)}_loaded_scales' and '_loaded_offsets' hold {s.size} and "
                    f"{o.size} values; {m} (one per output channel) or {group} (per group) "
                    "expected")
    s = s.astype(np.float32)
    if not (np.isfinite(s).all() and (s > 0).all()):
        raise c.err(f"'{show(name)}_loaded_scales' must be positive finite scales")
    if o.dtype.kind not in "iu" or o.min() < -128 or o.max() > 127:
        raise c.err(f"'{show(name)}_loaded_offsets' must be integers in -128..127")
    return (s, o.astype(np.int8), wq[2]), 0


def int8_conv(c, xs):
    x, w = xs[0], xs[1]
    rank_at_least(c, x, 3)
    xq, wq, yq = _qin(c, x, 0), _qin(c, w, 1), out_params(c)
    nhwc = c.order() == "NHWC"
    nd = len(x.shape) - 2
    if len(w.shape) != nd + 2:
        raise c.err(f"filter shape {list(w.shape)} is not {nd + 2}-D like the input")
    xi = to_nchw(c, x) if nhwc else x
    wi = c.transpose(w, [0, nd + 1] + list(range(1, nd + 1))) if nhwc else w
    group = c.args.i("group", 1)
    attrs = window_attrs(c, xi.shape[2:], _hw(c, "kernel", nd, None) or list(wi.shape[2:]))
    attrs["group"] = group
    wq, axis = _filter_params(c, wq, wi.shape[0], group)
    ins = [_dq(c, xi, xq, "x"), _dq(c, wi, wq, "w", axis)]
    if len(xs) > 2 and not c.args.i("no_bias", 0):
        ins.append(_bias(c, xs[2], 2, wi.shape[0]))
    y = c.one("Conv", ins, attrs)
    if c.op.type == "Int8ConvRelu":
        y = c.one("Relu", [y])
    y = _q(c, y, yq, final=not nhwc)
    return [_nhwc_out(c, y) if nhwc else y]


def int8_fc(c, xs):
    x, w, b = xs
    dequantize = bool(c.args.i("dequantize_output", 0))
    dynamic = dequantize and x.dtype.kind == "f"  # Caffe2 quantizes it at run time
    xq = None if dynamic else _qin(c, x, 0)
    wq = _qin(c, w, 1)
    yq = None if dequantize else out_params(c)
    ax = axis_of(c, c.args.i("axis", 1), len(x.shape))
    axw = axis_of(c, c.args.i("axis_w", 1), len(w.shape))
    m, k = math.prod(x.shape[:ax]), math.prod(x.shape[ax:])
    n, kw = math.prod(w.shape[:axw]), math.prod(w.shape[axw:])
    if k != kw:
        raise c.err(f"input {list(x.shape)} flattened at axis {ax} has {k} columns but the "
                    f"weight {list(w.shape)} (axis_w {axw}) expects {kw}")
    x2 = c.reshape(x, (m, k))
    ins = [x2 if dynamic else _dq(c, x2, xq, "x"), _dq(c, c.reshape(w, (n, kw)), wq, "w"),
           _bias(c, b, 2, n)]
    out_shape = x.shape[:ax] + w.shape[:axw]
    same = out_shape == (m, n)
    y = c.one("Gemm", ins, {"transB": 1}, final=same and dequantize)
    if not dequantize:
        y = _q(c, y, yq, final=same)
    if same:
        return [y]
    r = c.reshape(y, out_shape, final=True)
    r.qparams = y.qparams
    return [r]


def int8_sum_relu(c, xs):
    yq = out_params(c)
    fs = [_dq(c, x, _qin(c, x, i), f"x{i}") for i, x in enumerate(xs)]
    y = c.one("Add" if len(fs) == 2 else "Sum", fs)
    return [_q(c, c.one("Relu", [y]), yq, final=True)]


def int8_relu(c, xs):
    xq = _qin(c, xs[0], 0)
    y = c.one("Relu", [_dq(c, xs[0], xq, "x")])
    return [_q(c, y, out_params(c, default=xq), final=True)]


def int8_pool(c, xs):
    x = xs[0]
    rank_at_least(c, x, 3)
    xq = _qin(c, x, 0)
    yq = xq if c.op.type == "Int8MaxPool" else out_params(c)  # MaxPool only selects values
    nhwc = c.order() == "NHWC"
    xi = to_nchw(c, x) if nhwc else x
    y = pool_node(c, _dq(c, xi, xq, "x"), final=False, count_include_pad=1)
    y = _q(c, y, yq, final=not nhwc)
    return [_nhwc_out(c, y) if nhwc else y]


def int8_quantize(c, xs):
    x = xs[0]
    if x.dtype.kind != "f":
        raise c.err(f"input '{show(c.op.input[0])}' is {x.dtype.name}; Int8Quantize reads a "
                    "float tensor")
    return [_q(c, x, out_params(c), final=True)]


def int8_dequantize(c, xs):
    return [_dq(c, xs[0], _qin(c, xs[0], 0), "x", final=True)]


INT8_TRANSLATORS = {
    "Int8Conv": int8_conv, "Int8ConvRelu": int8_conv, "Int8FC": int8_fc,
    "Int8SumRelu": int8_sum_relu, "Int8Relu": int8_relu,
    "Int8MaxPool": int8_pool, "Int8AveragePool": int8_pool,
    "Int8Quantize": int8_quantize, "Int8Dequantize": int8_dequantize,
}
INT8_MIN_INPUTS = {"Int8Conv": 2, "Int8ConvRelu": 2, "Int8FC": 3, "Int8SumRelu": 2}

# Caffe2 ops that only move values: their int8 results keep the input's scale and offset
MOVES = {"Reshape", "Flatten", "Transpose", "NCHW2NHWC", "NHWC2NCHW", "Squeeze", "ExpandDims",
         "Slice", "Split", "Gather", "Copy", "Alias", "Dropout", "StopGradient",
         "EnsureCPUOutput"}


def propagate_qparams(op_type: str, xs, outs):
    if op_type in MOVES and xs and xs[0].qparams is not None:
        for o in outs:
            if o is not None and o.dtype == xs[0].dtype and o.qparams is None:
                o.qparams = xs[0].qparams


def refusal_reason(op_type: str) -> str:
    if op_type.startswith("Int8"):
        return ("of Caffe2's Int8 operators glowpy loads those Glow does: "
                + ", ".join(INT8_TRANSLATORS) + ", and the fills Int8GivenTensorFill, "
                "Int8GivenIntTensorFill")
    return ""


# -- fills ------------------------------------------------------------------------------------

INT8_FILLS = {"Int8GivenTensorFill": np.int8, "Int8GivenIntTensorFill": np.int32}


def int8_fill_values(op_type: str, args: Args, where: str) -> np.ndarray:
    """The values of an Int8 fill, flat: uint8 bytes shifted to int8, or int32."""
    a = args.d.get("values")
    if op_type == "Int8GivenTensorFill":
        raw = None
        if a is not None:
            raw = a.s if a.HasField("s") else a.strings[0] if len(a.strings) == 1 else None
        if raw is None:
            raise ModelError(f"{where}: 'values' must hold one byte string (the uint8 values)")
        return (np.frombuffer(raw, np.uint8) ^ np.uint8(0x80)).view(np.int8)  # v - 128
    if a is None:
        raise ModelError(f"{where}: argument 'values' is missing")
    v = np.asarray(args.ints("values"), np.int64)
    if v.size and (v.min() < -2 ** 31 or v.max() >= 2 ** 31):
        raise ModelError(f"{where}: values do not fit int32")
    return v.astype(np.int32)


def fill_qparams(op, where: str):
    """(scale, offset) of an Int8 fill's tensor, None for other fills."""
    if op.type not in INT8_FILLS:
        return None
    args = Args(op, where)
    s = _scale(args, where)
    if op.type == "Int8GivenTensorFill":
        return float(s), _uint8_zero_point(args, where)
    if not args.has("Y_zero_point"):
        raise ModelError(f"{where}: argument 'Y_zero_point' is missing")
    z = args.i("Y_zero_point")
    if not -2 ** 31 <= z < 2 ** 31:
        raise ModelError(f"{where}: argument 'Y_zero_point' {z} does not fit int32")
    return float(s), z
