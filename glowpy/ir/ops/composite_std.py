"""Default-domain ONNX ops that are compositions of ops glowpy has kernels for, written as
`Composite`s (ops/contrib.py): the `decompose` pass expands them first in the pipeline, so
activation fusion and every existing kernel serve them, and inference/folding run the same
expansion. Each follows its ONNX function body (onnx/defs), so results match onnxruntime to
the kernels' rounding; tests/test_composite_std.py checks them against onnxruntime."""
from __future__ import annotations

import numpy as np

from glowpy.errors import ModelError, show
from glowpy.ir.ops.contrib import Composite, add
from glowpy.ir.ops.registry import register


def _c(g, like, value):
    """A scalar constant of `like`'s dtype (the composed ops do not promote)."""
    return g.constant(np.asarray(value, like.dtype))


@register
class CastLike(Composite):
    """Cast to target_type's dtype (torch.onnx's dynamo exporter writes it around most ops)."""
    inputs = ("input", "target_type")
    attrs = {"saturate": 1}
    since = 15

    def expand(self, g, node, ins, n_out):
        x, t = ins
        if x.dtype == t.dtype:
            return [add(g, node, "Identity", [x])[0]]
        return [add(g, node, "Cast", [x], {"to": np.dtype(t.dtype),
                                           "saturate": node.attrs["saturate"]})[0]]


@register
class Swish(Composite):
    """x * Sigmoid(alpha * x) (opset 24)."""
    inputs = ("X",)
    attrs = {"alpha": 1.0}
    since = 24

    def expand(self, g, node, ins, n_out):
        x = ins[0]
        ax = x if node.attrs["alpha"] == 1.0 else \
            add(g, node, "Mul", [x, _c(g, x, node.attrs["alpha"])])[0]
        return [add(g, node, "Mul", [x, add(g, node, "Sigmoid", [ax])[0]], tag="gate")[0]]


@register
class Celu(Composite):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)) = alpha * Elu(x / alpha) (ONNX's
    function body divides by alpha the same way)."""
    inputs = ("X",)
    attrs = {"alpha": 1.0}
    since = 12

    def expand(self, g, node, ins, n_out):
        x, alpha = ins[0], node.attrs["alpha"]
        if alpha == 1.0:
            return [add(g, node, "Elu", [x], {"alpha": 1.0})[0]]
        xa = add(g, node, "Div", [x, _c(g, x, alpha)])[0]
        e = add(g, node, "Elu", [xa], {"alpha": 1.0})[0]
        return [add(g, node, "Mul", [e, _c(g, x, alpha)])[0]]


@register
class ThresholdedRelu(Composite):
    """x where x > alpha, else 0."""
    inputs = ("X",)
    attrs = {"alpha": 1.0}
    since = 10

    def expand(self, g, node, ins, n_out):
        x = ins[0]
        gt = add(g, node, "Greater", [x, _c(g, x, node.attrs["alpha"])])[0]
        return [add(g, node, "Where", [gt, x, _c(g, x, 0)])[0]]


@register
class Shrink(Composite):
    """x + bias where x < -lambd, x - bias where x > lambd, else 0."""
    inputs = ("input",)
    attrs = {"bias": 0.0, "lambd": 0.5}
    since = 9

    def expand(self, g, node, ins, n_out):
        x, a = ins[0], node.attrs
        if x.dtype.kind != "f":
            raise ModelError(f"node '{show(node.name)}' (Shrink): input '{show(x.name)}' is "
                             f"{x.dtype}; only float Shrink is supported (Cast it to float)")
        lo = add(g, node, "Less", [x, _c(g, x, -a["lambd"])])[0]
        hi = add(g, node, "Greater", [x, _c(g, x, a["lambd"])])[0]
        up = add(g, node, "Add", [x, _c(g, x, a["bias"])])[0]
        down = add(g, node, "Sub", [x, _c(g, x, a["bias"])])[0]
        inner = add(g, node, "Where", [hi, down, _c(g, x, 0)], tag="where_hi")[0]
        return [add(g, node, "Where", [lo, up, inner], tag="where_lo")[0]]


def _axes(g, axes):
    return g.constant(np.asarray(axes, np.int64))


@register
class LpNormalization(Composite):
    """x / ||x||_p along axis (p = 1 or 2), as onnxruntime computes it (no epsilon; 0 where the
    norm is 0)."""
    inputs = ("input",)
    attrs = {"axis": -1, "p": 2}
    since = 1

    def expand(self, g, node, ins, n_out):
        x, p = ins[0], node.attrs["p"]
        if p not in (1, 2):
            raise ModelError(f"node '{show(node.name)}' (LpNormalization): p={p}; ONNX allows "
                             "only 1 and 2")
        axis = node.attrs["axis"] % max(len(x.shape), 1)
        n = add(g, node, "ReduceL1" if p == 1 else "ReduceL2", [x, _axes(g, [axis])],
                {"keepdims": 1})[0]
        # an all-zero slice has norm 0: onnxruntime writes 0 there (0 / 1), not NaN
        zero = add(g, node, "Equal", [n, _c(g, x, 0)])[0]
        n = add(g, node, "Where", [zero, _c(g, x, 1), n])[0]
        return [add(g, node, "Div", [x, n])[0]]


@register
class MeanVarianceNormalization(Composite):
    """ONNX's function body: (X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9) over axes."""
    inputs = ("X",)
    attrs = {"axes": (0, 2, 3)}
    attr_kinds = {"axes": list}
    since = 9

    def expand(self, g, node, ins, n_out):
        x = ins[0]
        ax = _axes(g, list(node.attrs["axes"]))
        mean = add(g, node, "ReduceMean", [x, ax], {"keepdims": 1}, tag="mean")[0]
        sq = add(g, node, "Mul", [x, x], tag="square")[0]
        msq = add(g, node, "ReduceMean", [sq, ax], {"keepdims": 1}, tag="mean_sq")[0]
        var = add(g, node, "Sub", [msq, add(g, node, "Mul", [mean, mean])[0]], tag="var")[0]
        std = add(g, node, "Add", [add(g, node, "Sqrt", [var])[0], _c(g, x, 1e-9)])[0]
        return [add(g, node, "Div", [add(g, node, "Sub", [x, mean])[0], std])[0]]


@register
class RMSNormalization(Composite):
    """ONNX 23: X / sqrt(mean(X^2 over axis..last) + epsilon) * scale."""
    inputs = ("X", "scale")
    attrs = {"axis": -1, "epsilon": 1e-5, "stash_type": 1}
    since = 23

    def expand(self, g, node, ins, n_out):
        x, scale = ins
        r = len(x.shape)
        axis = node.attrs["axis"] % max(r, 1)
        ax = _axes(g, list(range(axis, r)))
        sq = add(g, node, "Mul", [x, x], tag="square")[0]
        ms = add(g, node, "ReduceMean", [sq, ax], {"keepdims": 1})[0]
        ms = add(g, node, "Add", [ms, _c(g, x, node.attrs["epsilon"])])[0]
        y = add(g, node, "Div", [x, add(g, node, "Sqrt", [ms])[0]])[0]
        return [add(g, node, "Mul", [y, scale], tag="scale")[0]]
