"""Default-domain ONNX ops of signal front ends and pooling written as `Composite`s (see
ops/contrib.py): the window generators fold to constants (their size must be known at compile
time), Hardmax and GlobalLpPool expand into ArgMax/OneHot and ReduceL1/ReduceL2, LpPool into
an AveragePool of |x|^p. Checked against onnxruntime by tests/test_composite_std.py."""
from __future__ import annotations

import numpy as np

from glowpy.errors import ModelError, show
from glowpy.ir.dtypes import from_onnx
from glowpy.ir.ops.composite_std import _axes
from glowpy.ir.ops.contrib import Composite, add, const_scalar
from glowpy.ir.ops.conv import window
from glowpy.ir.ops.registry import get_op, register, norm_axis

# window -> its cosine-series coefficients a_k: w[n] = sum_k (-1)^k a_k cos(2 pi k n / N)
WINDOWS = {"HannWindow": (0.5, 0.5), "HammingWindow": (25 / 46, 21 / 46),
           "BlackmanWindow": (0.42, 0.5, 0.08)}


@register
class Window(Composite):
    """Hann/Hamming/Blackman windows of `size` points (N = size when periodic, size - 1
    otherwise), computed in float64 and rounded once to output_datatype."""
    names = tuple(WINDOWS)
    inputs = ("size",)
    attrs = {"output_datatype": 1, "periodic": 1}
    since = 17

    def expand(self, g, node, ins, n_out):
        size = int(np.asarray(const_scalar(node, ins[0], "size")).reshape(()))
        if size <= 0:
            raise ModelError(f"node '{show(node.name)}' ({node.op}): size is {size}; bundles "
                             "hold no empty tensors (give a size of at least 1)")
        n = np.arange(size, dtype=np.float64)
        period = size if node.attrs["periodic"] else size - 1
        w = np.zeros(size)
        for k, a in enumerate(WINDOWS[node.op]):
            w += (-1) ** k * a * np.cos(2 * np.pi * k * n / max(period, 1))
        dtype = from_onnx(node.attrs["output_datatype"], f"{node.op} 'output_datatype'")
        return [g.constant(w.astype(dtype))]


@register
class Hardmax(Composite):
    """1 at the first maximum along axis, 0 elsewhere (opset 13's form: one axis)."""
    inputs = ("input",)
    attrs = {"axis": -1}
    since = 13

    def expand(self, g, node, ins, n_out):
        x = ins[0]
        axis = norm_axis(node.attrs["axis"], len(x.shape), node)
        i = add(g, node, "ArgMax", [x], {"axis": axis, "keepdims": 0})[0]
        depth = g.constant(np.asarray(x.shape[axis], np.int64))
        values = g.constant(np.asarray([0, 1], x.dtype))
        return [add(g, node, "OneHot", [i, depth, values], {"axis": axis})[0]]


@register
class GlobalLpPool(Composite):
    """(sum over the spatial dims of |x|^p)^(1/p), for p = 1 (ReduceL1) and 2 (ReduceL2)."""
    inputs = ("X",)
    attrs = {"p": 2}
    since = 2

    def expand(self, g, node, ins, n_out):
        x, p = ins[0], node.attrs["p"]
        if p not in (1, 2):
            raise ModelError(f"node '{show(node.name)}' (GlobalLpPool): p={p}; only p = 1 and "
                             "2 are supported")
        ax = _axes(g, list(range(2, len(x.shape))))
        return [add(g, node, "ReduceL1" if p == 1 else "ReduceL2", [x, ax], {"keepdims": 1})[0]]


@register
class LpPool(Composite):
    """(sum over each window of |x|^p)^(1/p): |x|^p (x x for p = 2), an AveragePool counting
    padding, times its own per-position divisors (so ceil_mode's short windows and auto_pad
    count what the sum counts), then the p-th root (Sqrt for 2)."""
    inputs = ("X",)
    attrs = {"auto_pad": "NOTSET", "ceil_mode": 0, "dilations": None, "kernel_shape": None,
             "p": 2, "pads": None, "strides": None}
    attr_kinds = {"dilations": list, "kernel_shape": list, "pads": list, "strides": list}
    since = 1

    def expand(self, g, node, ins, n_out):
        x = ins[0]
        p = float(node.attrs["p"])
        if not p > 0 or x.dtype != np.float32:
            raise ModelError(f"node '{show(node.name)}' (LpPool): p={p} on {x.dtype}; needs "
                             "p > 0 and float32")
        if len(x.shape) < 3:
            raise ModelError(f"node '{show(node.name)}' (LpPool): input {list(x.shape)}; needs "
                             "[N, C, spatial...]")
        # the window checked as the LpPool's, so an error names the model's node
        window(node, x.shape[2:], node.attrs["kernel_shape"], bool(node.attrs["ceil_mode"]))
        if p == 2:
            t = add(g, node, "Mul", [x, x], tag="square")[0]
        else:
            t = add(g, node, "Abs", [x], tag="abs")[0]
            if p != 1:
                t = add(g, node, "Pow", [t, g.constant(np.float32(p), "p")], tag="power")[0]
        attrs = {k: v for k, v in node.attrs.items() if k != "p" and v is not None}
        avg = add(g, node, "AveragePool", [t], dict(attrs, count_include_pad=1), tag="mean")[0]
        div = get_op("AveragePool").divisors(avg.producer).astype(np.float32)
        s = add(g, node, "Mul", [avg, g.constant(div, "window_sizes")], tag="sum")[0]
        if p == 1:
            return [s]
        if p == 2:
            return [add(g, node, "Sqrt", [s], tag="root")[0]]
        return [add(g, node, "Pow", [s, g.constant(np.float32(1 / p), "inverse_p")],
                    tag="root")[0]]
