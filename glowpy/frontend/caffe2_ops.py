"""Caffe2 operators mapped onto the graph IR's ONNX-semantics ops.

Each translator reads the operator's arguments (Caffe2's spellings: kernel/kernels/kernel_h,
stride..., pad/pads/pad_t..., legacy_pad, order, broadcast/axis, ...) and adds IR nodes through
Graph.add; it returns one Value per Caffe2 output (None for an output glowpy does not compute).
NHWC operators are the NCHW op between two Transposes (optimizer passes cancel the pairs)."""
from __future__ import annotations

import math

import numpy as np

from glowpy.frontend.caffe2_ctx import axis_of, rank_at_least, to_nchw, to_nhwc
from glowpy.frontend.caffe2_movement import (cast, concat, expand_dims, flatten, gather,
                                             nchw2nhwc, nhwc2nchw, reshape, resize_nearest, shape,
                                             slice_, split, squeeze, transpose)

LEGACY_NOTSET, LEGACY_VALID, LEGACY_SAME, LEGACY_CAFFE = 0, 1, 2, 3


# -- sliding windows --------------------------------------------------------------------------

def _hw(c, name, nd, default):
    """kernel/stride/dilation/adj: `<name>s` list, `<name>` int, or `<name>_h`/`<name>_w`."""
    a = c.args
    if a.has(name + "s"):
        v = a.ints(name + "s")
    elif a.has(name):
        v = [a.i(name)] * nd
    elif a.has(name + "_h") or a.has(name + "_w"):
        if nd != 2:
            raise c.err(f"{name}_h/{name}_w are for 2-D inputs; use {name}s for {nd}-D")
        v = [a.i(name + "_h", default), a.i(name + "_w", default)]
    else:
        return None if default is None else [default] * nd
    if len(v) != nd:
        raise c.err(f"{name}s has {len(v)} values for a {nd}-D input")
    return v


def _pads(c, nd):
    a = c.args
    if a.has("pads"):
        p = a.ints("pads")
    elif a.has("pad"):
        p = [a.i("pad")] * (2 * nd)
    elif any(a.has(k) for k in ("pad_t", "pad_l", "pad_b", "pad_r")):
        if nd != 2:
            raise c.err(f"pad_t/pad_l/pad_b/pad_r are for 2-D inputs; use pads for {nd}-D")
        p = [a.i("pad_t", 0), a.i("pad_l", 0), a.i("pad_b", 0), a.i("pad_r", 0)]
    else:
        p = [0] * (2 * nd)
    if len(p) != 2 * nd or min(p) < 0:
        raise c.err(f"pads {p} must be {2 * nd} non-negative values (begin..., end...)")
    return p


def window_attrs(c, spatial, kernel=None, dilate=True):
    """ONNX kernel_shape/strides/dilations/pads (or auto_pad) from Caffe2's arguments and
    legacy_pad. `spatial` are the input's spatial dims (NCHW order)."""
    nd = len(spatial)
    kernel = _hw(c, "kernel", nd, None) or kernel
    strides = _hw(c, "stride", nd, 1)
    dil = _hw(c, "dilation", nd, 1) if dilate else [1] * nd
    pads = _pads(c, nd)
    attrs = {"strides": strides, "dilations": dil}
    if kernel is not None:
        attrs["kernel_shape"] = list(kernel)
    legacy = c.args.i("legacy_pad", LEGACY_NOTSET)
    if legacy == LEGACY_VALID:
        pads = [0] * (2 * nd)
    elif legacy == LEGACY_SAME:
        attrs["auto_pad"] = "SAME_UPPER"  # Caffe2 puts the odd padding at the end too
        return attrs
    elif legacy == LEGACY_CAFFE:
        # Caffe (1) rounded the output size up; the tail padding grows to cover the last window
        if kernel is None:
            raise c.err("legacy_pad=3 needs the kernel size")
        for d in range(nd):
            ph, k, s, i = pads[d], (kernel[d] - 1) * dil[d] + 1, strides[d], spatial[d]
            out = math.ceil((i + 2 * ph - k) / s) + 1
            if ph > 0 and (out - 1) * s >= i + ph:
                out -= 1
            standard = (i + 2 * ph - k) // s + 1
            pads[nd + d] = ph + s * (out - standard)
    elif legacy != LEGACY_NOTSET:
        raise c.err(f"legacy_pad={legacy} is not a Caffe2 padding mode (0 to 3)")
    attrs["pads"] = pads
    return attrs


def _weight_layout(c, w, x_channels, group, kernel, nd, first):
    """Caffe2 stores NHWC filters as [first, k..., last]; Glow's test nets keep [first, last,
    k...] even for NHWC. Returns the weight in [first, last, k...] order (the shape tells)."""
    per_group = x_channels // group if first == "M" else None
    last_ok = (lambda v: v == per_group) if per_group is not None else (lambda v: True)
    nhwc = (kernel is None or list(w.shape[1:-1]) == list(kernel)) and last_ok(w.shape[-1])
    nchw = (kernel is None or list(w.shape[2:]) == list(kernel)) and last_ok(w.shape[1])
    if nhwc and (not nchw or kernel is not None):
        return c.transpose(w, [0, nd + 1] + list(range(1, nd + 1)))
    if nchw:
        return w
    raise c.err(f"filter shape {list(w.shape)} matches neither [M, k..., C/group] nor "
                f"[M, C/group, k...] for {x_channels} input channels and kernel {kernel}")


def conv(c, xs):
    x, w = xs[0], xs[1]
    b = xs[2] if len(xs) > 2 and not c.args.i("no_bias", 0) else None
    rank_at_least(c, x, 3)
    nhwc = c.order() == "NHWC"
    x = to_nchw(c, x) if nhwc else x
    nd = len(x.shape) - 2
    group = c.args.i("group", 1)
    kernel = _hw(c, "kernel", nd, None)
    if nhwc:
        w = _weight_layout(c, w, x.shape[1], group, kernel, nd, "M")
    attrs = window_attrs(c, x.shape[2:], kernel or list(w.shape[2:]))
    attrs["group"] = group
    last = not nhwc and c.op.type == "Conv"
    y = c.one("Conv", [x, w] + ([b] if b is not None else []), attrs, final=last)
    if c.op.type == "ConvRelu":
        y = c.one("Relu", [y], final=not nhwc)
    return [to_nhwc(c, y) if nhwc else y]


def conv_transpose(c, xs):
    x, w = xs[0], xs[1]
    b = xs[2] if len(xs) > 2 and not c.args.i("no_bias", 0) else None
    rank_at_least(c, x, 3)
    nhwc = c.order() == "NHWC"
    x = to_nchw(c, x) if nhwc else x
    nd = len(x.shape) - 2
    kernel = _hw(c, "kernel", nd, None)
    if nhwc:
        w = _weight_layout(c, w, x.shape[1], 1, kernel, nd, "C")
    if c.args.i("legacy_pad", 0) not in (LEGACY_NOTSET, LEGACY_VALID):
        raise c.err("legacy_pad SAME and CAFFE_LEGACY_POOLING are not supported for ConvTranspose")
    attrs = {"strides": _hw(c, "stride", nd, 1), "group": c.args.i("group", 1),
             "pads": [0] * (2 * nd) if c.args.i("legacy_pad", 0) == LEGACY_VALID else _pads(c, nd),
             "output_padding": _hw(c, "adj", nd, 0)}
    if kernel is not None:
        attrs["kernel_shape"] = kernel
    y = c.one("ConvTranspose", [x, w] + ([b] if b is not None else []), attrs, final=not nhwc)
    return [to_nhwc(c, y) if nhwc else y]


def pool(c, xs):
    x = xs[0]
    rank_at_least(c, x, 3)
    nhwc = c.order() == "NHWC"
    y = pool_node(c, to_nchw(c, x) if nhwc else x, final=not nhwc)
    return [to_nhwc(c, y) if nhwc else y]


def pool_node(c, x, final, count_include_pad=0):
    """The pooling op (MaxPool*, AveragePool*, their Int8 forms) of NCHW x."""
    is_max = "MaxPool" in c.op.type
    if c.args.i("global_pooling", 0):
        return c.one("GlobalMaxPool" if is_max else "GlobalAveragePool", [x], final=final)
    attrs = window_attrs(c, x.shape[2:])
    if "kernel_shape" not in attrs:
        raise c.err("the kernel size is missing (kernel, kernels or kernel_h/kernel_w)")
    if not is_max:
        attrs["count_include_pad"] = c.args.i("count_include_pad", count_include_pad)
    return c.one("MaxPool" if is_max else "AveragePool", [x], attrs, final=final)


# -- dense ------------------------------------------------------------------------------------

def fc(c, xs):
    x, w, b = xs
    transposed = c.op.type == "FCTransposed"
    ax = axis_of(c, c.args.i("axis", 1), len(x.shape))
    axw = axis_of(c, c.args.i("axis_w", 1), len(w.shape))
    m, k = math.prod(x.shape[:ax]), math.prod(x.shape[ax:])
    lead, trail = math.prod(w.shape[:axw]), math.prod(w.shape[axw:])
    n, kw = (trail, lead) if transposed else (lead, trail)
    if k != kw:
        raise c.err(f"input {list(x.shape)} flattened at axis {ax} has {k} columns but the "
                    f"weight {list(w.shape)} (axis_w {axw}) expects {kw}")
    if b.size != n:
        raise c.err(f"bias has {b.size} elements, expected {n}")
    w2 = c.reshape(w, (kw, n) if transposed else (n, kw))
    out_shape = x.shape[:ax] + (w.shape[axw:] if transposed else w.shape[:axw])
    same = out_shape == (m, n)
    y = c.one("Gemm", [c.reshape(x, (m, k)), w2, c.reshape(b, (n,))],
              {"transB": 0 if transposed else 1}, final=same)
    return [y if same else c.reshape(y, out_shape, final=True)]


def matmul(c, xs):
    a, b = xs
    aa = axis_of(c, c.args.i("axis_a", 1), len(a.shape))
    ab = axis_of(c, c.args.i("axis_b", 1), len(b.shape))
    a2 = c.reshape(a, (math.prod(a.shape[:aa]), math.prod(a.shape[aa:])))
    b2 = c.reshape(b, (math.prod(b.shape[:ab]), math.prod(b.shape[ab:])))
    return [c.one("Gemm", [a2, b2], {"transA": c.args.i("trans_a", 0),
                                     "transB": c.args.i("trans_b", 0)}, final=True)]


def batch_matmul(c, xs):
    a, b = xs

    def t(v, flag):
        if not flag or len(v.shape) < 2:
            return v
        r = len(v.shape)
        return c.transpose(v, list(range(r - 2)) + [r - 1, r - 2])
    return [c.one("MatMul", [t(a, c.args.i("trans_a", 0)), t(b, c.args.i("trans_b", 0))],
                  final=True)]


# -- elementwise ------------------------------------------------------------------------------

def _broadcast_b(c, a, b):
    """Caffe2's legacy broadcast (broadcast=1, or ranks differ and axis is given): B's dims
    match A's from `axis` on; B gets trailing ones so numpy broadcasting lines it up."""
    legacy = c.args.i("broadcast", 0) == 1 or (len(a.shape) != len(b.shape) and c.args.has("axis"))
    if c.args.has("axis_str"):
        raise c.err("argument axis_str is not supported; use axis")
    if not legacy or len(b.shape) > len(a.shape):
        return b
    bs = list(b.shape)
    axis = c.args.i("axis", -1)
    axis = len(a.shape) - len(bs) if axis == -1 else axis_of(c, axis, len(a.shape))
    if axis + len(bs) > len(a.shape) or any(d not in (1, e) for d, e in zip(bs, a.shape[axis:])):
        raise c.err(f"cannot broadcast {list(b.shape)} onto {list(a.shape)} at axis {axis}")
    return c.reshape(b, bs + [1] * (len(a.shape) - axis - len(bs)))


def binary(onnx_op):
    def tr(c, xs):
        a, b = xs
        return [c.one(onnx_op, [a, _broadcast_b(c, a, b)], final=True)]
    return tr


def unary(onnx_op):
    def tr(c, xs):
        return [c.one(onnx_op, [xs[0]], final=True)]
    return tr


def variadic(onnx_op):
    def tr(c, xs):
        return [c.one(onnx_op, list(xs), final=True)]
    return tr


def identity(c, xs):
    # a view: no copy unless it joins two placeholders
    return [c.one("Identity", [xs[0]], final=True)]


def prelu(c, xs):
    x, slope = xs
    if slope.size not in (1, x.shape[1 if c.order() == "NCHW" else -1]):
        raise c.err(f"slope has {slope.size} elements; expected 1 or the channel count")
    if slope.size > 1 and c.order() == "NCHW":
        slope = c.reshape(slope, [slope.size] + [1] * (len(x.shape) - 2))
    elif slope.size > 1:
        slope = c.reshape(slope, [slope.size])
    return [c.one("PRelu", [x, slope], final=True)]


def softmax(c, xs):
    x = xs[0]
    return [c.one("Softmax", [x], {"axis": axis_of(c, c.args.i("axis", 1), len(x.shape)),
                                   "_coerce2d": True}, final=True)]


def clip(c, xs):
    x = xs[0]
    lo, hi = c.args.f("min"), c.args.f("max")
    ins = [x, None if lo is None else c.const(np.asarray(lo, x.dtype), "min"),
           None if hi is None else c.const(np.asarray(hi, x.dtype), "max")]
    while ins[-1] is None:
        ins.pop()
    return [c.one("Clip", ins, final=True)]


def pow_(c, xs):
    x = xs[0]
    if len(xs) > 1:
        e = _broadcast_b(c, x, xs[1])
    elif c.args.has("exponent"):
        e = c.const(np.asarray(c.args.f("exponent"), np.float32), "exponent")
    else:
        raise c.err("needs an exponent (argument or second input)")
    return [c.one("Pow", [x, e], final=True)]


def swish(c, xs):
    return [c.one("Mul", [xs[0], c.one("Sigmoid", [xs[0]])], final=True)]


def elementwise_linear(c, xs):
    x, w, b = xs
    ax = axis_of(c, c.args.i("axis", 1), len(x.shape))
    n, d = math.prod(x.shape[:ax]), math.prod(x.shape[ax:])
    if w.size != d or b.size != d:
        raise c.err(f"w and b must have {d} elements (X {list(x.shape)} flattened at axis {ax})")
    y = c.one("Mul", [c.reshape(x, (n, d)), c.reshape(w, (d,))])
    y = c.one("Add", [y, c.reshape(b, (d,))], final=(n, d) == x.shape)
    return [c.reshape(y, x.shape, final=True) if (n, d) != x.shape else y]


def batchnorm(c, xs):
    if len(xs) < 5:
        raise c.err("needs X, scale, bias, mean and var (inference form)")
    nhwc = c.order() == "NHWC"
    x = to_nchw(c, xs[0]) if nhwc else xs[0]
    y = c.one("BatchNormalization", [x] + list(xs[1:5]),
              {"epsilon": c.args.f("epsilon", 1e-5)}, final=not nhwc)
    return [to_nhwc(c, y) if nhwc else y]


def lrn(c, xs):
    nhwc = c.order() == "NHWC"
    x = to_nchw(c, xs[0]) if nhwc else xs[0]
    if not c.args.has("size"):
        raise c.err("argument 'size' is required")
    a = c.args
    y = c.one("LRN", [x], {"size": a.i("size"), "alpha": a.f("alpha", 1e-4),
                           "beta": a.f("beta", 0.75), "bias": a.f("bias", 1.0)}, final=not nhwc)
    return [to_nhwc(c, y) if nhwc else y]


def layer_norm(c, xs):
    x = xs[0]
    ax = axis_of(c, c.args.i("axis", 1), len(x.shape))
    norm = x.shape[ax:]
    scale = xs[1] if len(xs) > 1 else c.const(np.ones(norm, x.dtype), "scale")
    bias = xs[2] if len(xs) > 2 else None
    n = max(1, min(3, len(c.op.output)))
    outs = c.add("LayerNormalization", [x, scale] + ([bias] if bias is not None else []),
                 {"axis": ax, "epsilon": c.args.f("epsilon", 1e-5)}, final=True, n=n)
    res = [outs[0]]
    stat = x.shape[:ax] + (1,)
    if n > 1:
        res.append(c.reshape(outs[1], stat))
    if n > 2:
        res.append(c.one("Reciprocal", [c.reshape(outs[2], stat)]))  # Caffe2 returns the std
    return res


TRANSLATORS = {
    "Conv": conv, "ConvRelu": conv, "ConvTranspose": conv_transpose,
    "FC": fc, "FCTransposed": fc, "MatMul": matmul, "BatchMatMul": batch_matmul,
    "MaxPool": pool, "AveragePool": pool, "MaxPool1D": pool, "MaxPool2D": pool, "MaxPool3D": pool,
    "AveragePool1D": pool, "AveragePool2D": pool, "AveragePool3D": pool,
    "SpatialBN": batchnorm, "LRN": lrn, "LayerNorm": layer_norm,
    "Relu": unary("Relu"), "Sigmoid": unary("Sigmoid"), "Tanh": unary("Tanh"),
    "Exp": unary("Exp"), "Log": unary("Log"), "Sqrt": unary("Sqrt"), "Abs": unary("Abs"),
    "Neg": unary("Neg"), "Negative": unary("Neg"), "Softplus": unary("Softplus"),
    "PRelu": prelu, "Softmax": softmax, "Swish": swish, "Clip": clip, "Pow": pow_,
    "Add": binary("Add"), "Sub": binary("Sub"), "Mul": binary("Mul"), "Div": binary("Div"),
    "Sum": variadic("Sum"), "Max": variadic("Max"), "Min": variadic("Min"),
    "Mean": variadic("Mean"),
    "ElementwiseLinear": elementwise_linear,
    "Concat": concat, "Split": split, "Reshape": reshape, "Flatten": flatten,
    "Transpose": transpose, "NCHW2NHWC": nchw2nhwc, "NHWC2NCHW": nhwc2nchw,
    "Squeeze": squeeze, "ExpandDims": expand_dims, "Slice": slice_, "Gather": gather,
    "Dropout": identity, "Copy": identity, "Alias": identity, "StopGradient": identity,
    "EnsureCPUOutput": identity, "ResizeNearest": resize_nearest, "Cast": cast, "Shape": shape,
}


# the fewest inputs each operator reads (more are ignored or optional)
MIN_INPUTS = {"Conv": 2, "ConvRelu": 2, "ConvTranspose": 2, "FC": 3, "FCTransposed": 3,
              "MatMul": 2, "BatchMatMul": 2, "SpatialBN": 5, "PRelu": 2, "Add": 2, "Sub": 2,
              "Mul": 2, "Div": 2, "ElementwiseLinear": 3, "Gather": 2}

