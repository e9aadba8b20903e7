"""Caffe2 operators mapped onto the graph IR's ONNX-semantics ops.

Each translator reads the operator's arguments (Caffe2's spellings: kernel/kernels/kernel_h,
stride..., pad/pads/pad_t..., legacy_pad, order, broadcast/axis, ...) and adds IR nodes through
Graph.add; it returns one Value per Caffe2 output (None for an output glowpy does not compute).
NHWC operators are the NCHW op between two Transposes (optimizer passes cancel the pairs)."""
from __future__ import annotations

import math

import numpy as np

from glowpy.errors import ModelError, show

LEGACY_NOTSET, LEGACY_VALID, LEGACY_SAME, LEGACY_CAFFE = 0, 1, 2, 3


class Args:
    """An operator's arguments by name, read with Caffe2's defaults."""

    def __init__(self, op, where: str):
        self.d = {a.name: a for a in op.arg}
        self.where = where

    def has(self, k) -> bool:
        return k in self.d

    def _err(self, k, what):
        return ModelError(f"{self.where}: argument '{show(k)}' {what}")

    def i(self, k, default=None):
        a = self.d.get(k)
        if a is None:
            return default
        if a.HasField("i"):
            return int(a.i)
        if a.HasField("f") and float(a.f).is_integer():
            return int(a.f)
        raise self._err(k, "must be an integer (field i)")

    def f(self, k, default=None):
        a = self.d.get(k)
        if a is None:
            return default
        if a.HasField("f"):
            return float(a.f)
        if a.HasField("i"):
            return float(a.i)
        raise self._err(k, "must be a number (field f)")

    def s(self, k, default=None):
        a = self.d.get(k)
        if a is None:
            return default
        if not a.HasField("s"):
            raise self._err(k, "must be a string (field s)")
        return a.s.decode("utf-8", "replace")

    def ints(self, k, default=None):
        a = self.d.get(k)
        if a is None:
            return default
        if not a.ints and (a.HasField("i") or a.floats):
            return [self.i(k)] if a.HasField("i") else [int(v) for v in a.floats]
        return [int(v) for v in a.ints]

    def floats(self, k, default=None):
        a = self.d.get(k)
        if a is None:
            return default
        return [float(v) for v in a.floats] if a.floats else [float(v) for v in a.ints]


class Ctx:
    """One Caffe2 operator being translated: adds its IR nodes, named after it."""

    def __init__(self, graph, op, label: str, where: str):
        self.g, self.op, self.label, self.where = graph, op, label, where
        self.args = Args(op, where)
        self._n = 0

    def err(self, msg) -> ModelError:
        return ModelError(f"{self.where}: {msg}")

    def add(self, op_type, inputs, attrs=None, final=False, n=1):
        """Adds an IR node; the operator's last node (`final`) names its outputs after the
        Caffe2 blobs."""
        self._n += 1
        name = self.label if final else f"{self.label}/{op_type.lower()}{self._n}"
        outs = [o for o in self.op.output[:n]] if final else None
        return self.g.add(op_type, inputs, attrs or {}, name=name, out_names=outs, num_outputs=n)

    def one(self, op_type, inputs, attrs=None, final=False):
        return self.add(op_type, inputs, attrs, final)[0]

    def const(self, array, what="c"):
        return self.g.constant(np.asarray(array), f"{self.label}/{what}")

    def output_const(self, array, j):
        """A constant Caffe2 output j (shapes and sizes known at compile time)."""
        return self.g.constant(np.asarray(array), self.op.output[j] if j < len(self.op.output)
                               else f"{self.label}/out{j}")

    def i64(self, values, what):
        return self.const(np.asarray(values, np.int64), what)

    def reshape(self, x, shape, final=False):
        if tuple(shape) == x.shape and not final:
            return x
        return self.one("Reshape", [x, self.i64(list(shape), "shape")], final=final)

    def transpose(self, x, perm, final=False):
        return self.one("Transpose", [x], {"perm": list(perm)}, final)

    def order(self) -> str:
        o = self.args.s("order", "NCHW").upper()
        if o not in ("NCHW", "NHWC"):
            raise self.err(f"order '{show(o)}' is not supported (NCHW or NHWC)")
        return o


def _to_nchw(c, x):
    r = len(x.shape)
    return c.transpose(x, [0, r - 1] + list(range(1, r - 1)))


def _to_nhwc(c, y, final=True):
    r = len(y.shape)
    return c.transpose(y, [0] + list(range(2, r)) + [1], final)


def _rank_at_least(c, x, r):
    if len(x.shape) < r:
        raise c.err(f"input '{show(x.name)}' has shape {list(x.shape)}; rank >= {r} expected")


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
    _rank_at_least(c, x, 3)
    nhwc = c.order() == "NHWC"
    x = _to_nchw(c, x) if nhwc else x
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
    return [_to_nhwc(c, y) if nhwc else y]


def conv_transpose(c, xs):
    x, w = xs[0], xs[1]
    b = xs[2] if len(xs) > 2 and not c.args.i("no_bias", 0) else None
    _rank_at_least(c, x, 3)
    nhwc = c.order() == "NHWC"
    x = _to_nchw(c, x) if nhwc else x
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
    return [_to_nhwc(c, y) if nhwc else y]


def pool(c, xs):
    x = xs[0]
    _rank_at_least(c, x, 3)
    nhwc = c.order() == "NHWC"
    x = _to_nchw(c, x) if nhwc else x
    is_max = c.op.type.startswith("MaxPool")
    if c.args.i("global_pooling", 0):
        y = c.one("GlobalMaxPool" if is_max else "GlobalAveragePool", [x], final=not nhwc)
    else:
        attrs = window_attrs(c, x.shape[2:])
        if "kernel_shape" not in attrs:
            raise c.err("the kernel size is missing (kernel, kernels or kernel_h/kernel_w)")
        if not is_max:
            attrs["count_include_pad"] = c.args.i("count_include_pad", 0)
        y = c.one("MaxPool" if is_max else "AveragePool", [x], attrs, final=not nhwc)
    return [_to_nhwc(c, y) if nhwc else y]


# -- dense ------------------------------------------------------------------------------------

def _axis(c, a, rank):
    v = a + rank if a < 0 else a
    if not 0 <= v < max(rank, 1):
        raise c.err(f"axis {a} is out of range for rank {rank}")
    return v


def fc(c, xs):
    x, w, b = xs
    transposed = c.op.type == "FCTransposed"
    ax = _axis(c, c.args.i("axis", 1), len(x.shape))
    axw = _axis(c, c.args.i("axis_w", 1), len(w.shape))
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
    aa = _axis(c, c.args.i("axis_a", 1), len(a.shape))
    ab = _axis(c, c.args.i("axis_b", 1), len(b.shape))
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
    axis = len(a.shape) - len(bs) if axis == -1 else _axis(c, axis, len(a.shape))
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
    return [c.one("Identity", [xs[0]], final=True)]  # a view: no copy unless it joins two placeholders


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
    return [c.one("Softmax", [x], {"axis": _axis(c, c.args.i("axis", 1), len(x.shape)),
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
    ax = _axis(c, c.args.i("axis", 1), len(x.shape))
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
    x = _to_nchw(c, xs[0]) if nhwc else xs[0]
    y = c.one("BatchNormalization", [x] + list(xs[1:5]),
              {"epsilon": c.args.f("epsilon", 1e-5)}, final=not nhwc)
    return [_to_nhwc(c, y) if nhwc else y]


def lrn(c, xs):
    nhwc = c.order() == "NHWC"
    x = _to_nchw(c, xs[0]) if nhwc else xs[0]
    if not c.args.has("size"):
        raise c.err("argument 'size' is required")
    a = c.args
    y = c.one("LRN", [x], {"size": a.i("size"), "alpha": a.f("alpha", 1e-4),
                           "beta": a.f("beta", 0.75), "bias": a.f("bias", 1.0)}, final=not nhwc)
    return [_to_nhwc(c, y) if nhwc else y]


def layer_norm(c, xs):
    x = xs[0]
    ax = _axis(c, c.args.i("axis", 1), len(x.shape))
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


# -- data movement ----------------------------------------------------------------------------

def concat(c, xs):
    x0 = xs[0]
    add_axis = c.args.i("add_axis", 0)
    r = len(x0.shape) + (1 if add_axis else 0)
    axis = c.args.i("axis") if c.args.has("axis") else (1 if c.order() == "NCHW" else r - 1)
    axis = _axis(c, axis, r)
    if add_axis:
        xs = [c.one("Unsqueeze", [x, c.i64([axis], "axes")]) for x in xs]
    y = c.one("Concat", list(xs), {"axis": axis}, final=True)
    return [y, c.output_const(np.asarray([x.shape[axis] for x in xs], np.int32), 1)]


def split(c, xs):
    x = xs[0]
    r = len(x.shape)
    axis = c.args.i("axis") if c.args.has("axis") else (1 if c.order() == "NCHW" else r - 1)
    axis = _axis(c, axis, r)
    n = len(c.op.output)
    if c.args.has("split"):
        sizes = c.args.ints("split")
    elif len(xs) > 1:
        if not xs[1].is_const:
            raise c.err("the split sizes (input 1) must be known at compile time")
        sizes = [int(v) for v in xs[1].const.reshape(-1)]
    else:
        if x.shape[axis] % n:
            raise c.err(f"dim {axis} ({x.shape[axis]}) does not split into {n} equal parts")
        sizes = [x.shape[axis] // n] * n
    if len(sizes) != n or sum(sizes) != x.shape[axis]:
        raise c.err(f"split sizes {sizes} do not give {n} outputs adding up to {x.shape[axis]}")
    add_axis = c.args.i("add_axis", 0)
    outs = c.add("Split", [x, c.i64(sizes, "split")], {"axis": axis}, final=not add_axis, n=n)
    if add_axis:
        outs = [c.one("Squeeze", [o, c.i64([axis], "axes")]) for o in outs]
    return outs


def reshape(c, xs):
    x = xs[0]
    if c.args.has("shape"):
        shape = c.args.ints("shape")
    elif len(xs) > 1 and xs[1].is_const:
        shape = [int(v) for v in xs[1].const.reshape(-1)]
    else:
        raise c.err("needs the new shape as argument 'shape' or a constant second input")
    y = c.one("Reshape", [x, c.i64(shape, "shape")], final=True)
    return [y, c.output_const(np.asarray(x.shape, np.int64), 1)]


def flatten(c, xs):
    return [c.one("Flatten", [xs[0]], {"axis": c.args.i("axis", 1)}, final=True)]


def transpose(c, xs):
    x = xs[0]
    axes = c.args.ints("axes") or list(range(len(x.shape)))[::-1]
    return [c.transpose(x, axes, final=True)]


def nchw2nhwc(c, xs):
    _rank_at_least(c, xs[0], 3)
    return [_to_nhwc(c, xs[0])]


def nhwc2nchw(c, xs):
    _rank_at_least(c, xs[0], 3)
    x = xs[0]
    r = len(x.shape)
    return [c.transpose(x, [0, r - 1] + list(range(1, r - 1)), final=True)]


def squeeze(c, xs):
    dims = c.args.ints("dims", [])
    return [c.one("Squeeze", [xs[0]] + ([c.i64(dims, "dims")] if dims else []), final=True)]


def expand_dims(c, xs):
    dims = sorted(set(c.args.ints("dims", [])))
    if not dims:
        raise c.err("argument 'dims' is required")
    return [c.one("Unsqueeze", [xs[0], c.i64(dims, "dims")], final=True)]


def slice_(c, xs):
    x = xs[0]
    if c.args.has("starts"):
        starts, ends = c.args.ints("starts"), c.args.ints("ends", [])
    elif len(xs) >= 3 and xs[1].is_const and xs[2].is_const:
        starts = [int(v) for v in xs[1].const.reshape(-1)]
        ends = [int(v) for v in xs[2].const.reshape(-1)]
    else:
        raise c.err("needs starts and ends as arguments or constant inputs")
    if len(starts) != len(ends) or len(starts) > len(x.shape):
        raise c.err(f"starts {starts} and ends {ends} must have equal length <= rank {len(x.shape)}")
    s2, e2 = [], []
    for d, (s, e) in enumerate(zip(starts, ends)):
        n = x.shape[d]
        s = n + 1 + s if s < 0 else s  # Caffe2: -1 is the end, one past the last element
        e = n + 1 + e if e < 0 else e
        if not 0 <= s <= e <= n:
            raise c.err(f"slice [{starts[d]}, {ends[d]}) is out of range for dim {d} of size {n}")
        s2.append(s)
        e2.append(e)
    return [c.one("Slice", [x, c.i64(s2, "starts"), c.i64(e2, "ends"),
                            c.i64(list(range(len(s2))), "axes")], final=True)]


def gather(c, xs):
    if c.args.i("match_outer", 0):
        raise c.err("match_outer=1 is not supported")
    return [c.one("Gather", list(xs[:2]), {"axis": c.args.i("axis", 0)}, final=True)]


def resize_nearest(c, xs):
    """Caffe2: out = int(in * scale), in_index = min(int(out_index / scale), in - 1); a Gather
    of those rows and columns (float32 arithmetic, as Caffe2 does)."""
    x = xs[0]
    if len(x.shape) != 4:
        raise c.err(f"input must be 4-D, got {list(x.shape)}")
    hs, ws = c.args.f("height_scale", 1.0), c.args.f("width_scale", 1.0)
    if len(xs) > 1:
        if not xs[1].is_const or xs[1].size != 2:
            raise c.err("the scales input must be a constant [height_scale, width_scale]")
        hs, ws = (float(v) for v in xs[1].const.reshape(-1))
    h_ax, w_ax = (2, 3) if c.order() == "NCHW" else (1, 2)
    y = x
    for ax, s, last in ((h_ax, hs, False), (w_ax, ws, True)):
        n = x.shape[ax]
        out = int(np.float32(n) * np.float32(s))
        if s <= 0 or out < 1:
            raise c.err(f"scale {s} gives an empty output")
        if out == n and s == 1.0 and not last:
            continue
        idx = [min(int(np.float32(i) / np.float32(s)), n - 1) for i in range(out)]
        y = c.one("Gather", [y, c.i64(idx, f"index{ax}")], {"axis": ax}, final=last)
    return [y]


def cast(c, xs):
    from glowpy.frontend.caffe2 import dtype_of
    return [c.one("Cast", [xs[0]], {"to": dtype_of(c.args.i("to", 1), c.where)}, final=True)]


def shape(c, xs):
    s = np.asarray(xs[0].shape, np.int64)
    if c.args.has("axes"):
        s = s[[_axis(c, a, len(xs[0].shape)) for a in c.args.ints("axes")]]
    return [c.output_const(s, 0)]


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
    "Sum": variadic("Sum"), "Max": variadic("Max"), "Min": variadic("Min"), "Mean": variadic("Mean"),
    "ElementwiseLinear": elementwise_linear,
    "Concat": concat, "Split": split, "Reshape": reshape, "Flatten": flatten,
    "Transpose": transpose, "NCHW2NHWC": nchw2nhwc, "NHWC2NCHW": nhwc2nchw,
    "Squeeze": squeeze, "ExpandDims": expand_dims, "Slice": slice_, "Gather": gather,
    "Dropout": identity, "Copy": identity, "Alias": identity, "StopGradient": identity,
    "EnsureCPUOutput": identity, "ResizeNearest": resize_nearest, "Cast": cast, "Shape": shape,
}


def refusal_reason(op_type: str) -> str:
    if op_type.startswith("Int8"):
        return "int8 Caffe2 ops need quantized int8 support, which glowpy does not have yet"
    return ""
