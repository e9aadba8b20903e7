"""Default-domain ONNX ops that are compositions of ops glowpy has kernels for, written as
`Composite`s (ops/contrib.py): the `decompose` pass expands them first in the pipeline, so
activation fusion and every existing kernel serve them, and inference/folding run the same
expansion. Each follows its ONNX function body (onnx/defs), so results match onnxruntime to
the kernels' rounding; tests/test_composite_std.py checks them against onnxruntime."""
from __future__ import annotations

import numpy as np

from glowpy.errors import ModelError, show
from glowpy.ir.ops.contrib import Composite, add, const_scalar
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
class SwiGLU(Composite):
    """Swish_alpha(A) * B (opset 28: a Llama MLP's gate_proj and up_proj outputs), A and B of
    one shape."""
    inputs = ("A", "B")
    attrs = {"alpha": 1.0}
    since = 28

    def expand(self, g, node, ins, n_out):
        a, b = ins
        if a.shape != b.shape or a.dtype != b.dtype:
            raise ModelError(f"node '{show(node.name)}' (SwiGLU): A {a.dtype.name}"
                             f"{list(a.shape)} and B {b.dtype.name}{list(b.shape)} must have one "
                             "shape and type (SwiGLU does not broadcast)")
        gate = add(g, node, "Swish", [a], {"alpha": node.attrs["alpha"]}, tag="swish")[0]
        return [add(g, node, "Mul", [gate, b])[0]]


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


@register
class GroupNormalization(Composite):
    """ONNX 18/21: X (N, C, ...) normalized over each group of C / num_groups channels (and the
    spatial dims), then scale and bias. Opset 21's scale/bias hold one value per channel,
    opset 18's one per group: a per-group one is repeated over the group's channels (when
    num_groups == C the two forms coincide). The variance is centered (E[(x - mean)^2]),
    as onnxruntime computes it."""
    inputs = ("X", "scale", "bias")
    attrs = {"epsilon": 1e-5, "num_groups": None, "stash_type": 1}
    attr_kinds = {"num_groups": int}
    since = 18

    def expand(self, g, node, ins, n_out):
        x, scale, bias = ins
        groups, shape = node.attrs["num_groups"], tuple(x.shape)
        if groups is None or len(shape) < 2 or groups <= 0 or shape[1] % groups:
            raise ModelError(f"node '{show(node.name)}' (GroupNormalization): num_groups="
                             f"{groups} must divide the channel count of input "
                             f"'{show(x.name)}' {list(shape)}")
        c = shape[1]
        xr = add(g, node, "Reshape", [x, _axes(g, [shape[0], groups, -1])], tag="group")[0]
        ax = _axes(g, [2])
        mean = add(g, node, "ReduceMean", [xr, ax], {"keepdims": 1}, tag="mean")[0]
        xc = add(g, node, "Sub", [xr, mean])[0]
        var = add(g, node, "ReduceMean", [add(g, node, "Mul", [xc, xc])[0], ax], {"keepdims": 1},
                  tag="var")[0]
        var = add(g, node, "Add", [var, _c(g, x, node.attrs["epsilon"])])[0]
        std = add(g, node, "Sqrt", [var])[0]
        y = add(g, node, "Reshape", [add(g, node, "Div", [xc, std])[0], _axes(g, shape)],
                tag="ungroup")[0]
        per_channel = []
        for v, tag in ((scale, "scale"), (bias, "bias")):
            n = int(np.prod(v.shape))
            if n not in (c, groups):
                raise ModelError(f"node '{show(node.name)}' (GroupNormalization): {tag} "
                                 f"'{show(v.name)}' has {n} values; needs {c} (one per channel) "
                                 f"or {groups} (one per group, opset 18)")
            if n != c:  # opset 18: one value per group, repeated over its channels
                v = add(g, node, "Reshape", [v, _axes(g, [groups, 1])], tag=f"{tag}_groups")[0]
                v = add(g, node, "Tile", [v, _axes(g, [1, c // groups])], tag=f"{tag}_tile")[0]
            per_channel.append(add(g, node, "Reshape", [v, _axes(g, [c] + [1] * (len(shape) - 2))],
                                   tag=f"{tag}_channels")[0])
        y = add(g, node, "Mul", [y, per_channel[0]], tag="scale")[0]
        return [add(g, node, "Add", [y, per_channel[1]], tag="bias")[0]]


@register
class Sinh(Composite):
    """(exp(x) - exp(-x)) / 2; below |x| = 0.5, where the difference cancels, its Taylor series
    to x^7 (truncation < 1e-8 relative there)."""
    inputs = ("input",)
    since = 9

    def expand(self, g, node, ins, n_out):
        x = ins[0]
        e = add(g, node, "Sub", [add(g, node, "Exp", [x])[0],
                                 add(g, node, "Exp", [add(g, node, "Neg", [x])[0]])[0]])[0]
        big = add(g, node, "Mul", [e, _c(g, x, 0.5)])[0]
        x2 = add(g, node, "Mul", [x, x])[0]
        p = _c(g, x, 1.0 / 5040)
        for k in (1.0 / 120, 1.0 / 6, 1.0):  # Horner: ((x2/5040 + 1/120) x2 + 1/6) x2 + 1
            p = add(g, node, "Add", [add(g, node, "Mul", [p, x2])[0], _c(g, x, k)])[0]
        small = add(g, node, "Mul", [p, x])[0]
        near0 = add(g, node, "Less", [add(g, node, "Abs", [x])[0], _c(g, x, 0.5)])[0]
        return [add(g, node, "Where", [near0, small, big])[0]]


@register
class Cosh(Composite):
    """(exp(x) + exp(-x)) / 2 (a sum of positives: no cancellation)."""
    inputs = ("input",)
    since = 9

    def expand(self, g, node, ins, n_out):
        x = ins[0]
        s = add(g, node, "Add", [add(g, node, "Exp", [x])[0],
                                 add(g, node, "Exp", [add(g, node, "Neg", [x])[0]])[0]])[0]
        return [add(g, node, "Mul", [s, _c(g, x, 0.5)])[0]]


@register
class Tan(Composite):
    """Sin(x) / Cos(x): each within a few ulp, so the quotient is too (away from the poles)."""
    inputs = ("input",)
    since = 7

    def expand(self, g, node, ins, n_out):
        x = ins[0]
        return [add(g, node, "Div", [add(g, node, "Sin", [x])[0], add(g, node, "Cos", [x])[0]])[0]]


@register
class ReverseSequence(Composite):
    """Each batch entry's first sequence_lens[b] steps reversed (sequence_lens known at run
    time): a GatherElements along time_axis with the index lens[b] - 1 - t below the length
    and t from it on (an index outside the axis reads 0, so no length reads out of bounds)."""
    inputs = ("input", "sequence_lens")
    attrs = {"batch_axis": 1, "time_axis": 0}
    since = 10

    def expand(self, g, node, ins, n_out):
        x, lens = ins
        ba, ta = node.attrs["batch_axis"], node.attrs["time_axis"]
        if len(x.shape) < 2 or {ba, ta} != {0, 1} or lens.shape != (x.shape[ba],):
            raise ModelError(f"node '{show(node.name)}' (ReverseSequence): batch_axis {ba}, "
                             f"time_axis {ta}, input {list(x.shape)}, sequence_lens "
                             f"{list(lens.shape)}: the axes must be 0 and 1 and sequence_lens "
                             "one length per batch entry")
        steps, batch = x.shape[ta], x.shape[ba]
        grid = [steps, 1] if ta == 0 else [1, steps]
        t = g.constant(np.arange(steps, dtype=np.int64).reshape(grid), "steps")
        n = lens if lens.dtype == np.int64 else \
            add(g, node, "Cast", [lens], {"to": np.dtype(np.int64)}, tag="lens64")[0]
        n = add(g, node, "Reshape", [n, g.constant(np.array([1, batch] if ta == 0 else
                                                            [batch, 1], np.int64))],
                tag="lens")[0]
        back = add(g, node, "Sub", [add(g, node, "Sub", [n, g.constant(np.int64(1))],
                                        tag="last")[0], t], tag="reversed")[0]
        idx = add(g, node, "Where", [add(g, node, "Less", [t, n], tag="inside")[0], back, t],
                  tag="index")[0]
        rest = [1] * (len(x.shape) - 2)
        idx = add(g, node, "Reshape", [idx, g.constant(np.array(list(idx.shape) + rest,
                                                                  np.int64))], tag="index_nd")[0]
        idx = add(g, node, "Expand", [idx, g.constant(np.array(x.shape, np.int64))],
                  tag="index_full")[0]
        return [add(g, node, "GatherElements", [x, idx], {"axis": ta})[0]]


@register
class CenterCropPad(Composite):
    """Each named axis cropped or zero-padded to `shape`, centred: a Slice from (n - s) // 2,
    then a Pad of (s - n) // 2 before and the rest after."""
    inputs = ("input_data", "shape")
    attrs = {"axes": None}
    attr_kinds = {"axes": list}
    const_inputs = (1,)
    since = 18

    def expand(self, g, node, ins, n_out):
        x, shape = ins
        r = len(x.shape)
        axes = node.attrs["axes"]
        axes = list(range(r)) if axes is None else [a + r if a < 0 else a for a in axes]
        want = [int(v) for v in np.asarray(const_scalar(node, shape, "shape")).reshape(-1)]
        if len(want) != len(axes) or any(not 0 <= a < r for a in axes) or min(want, default=1) < 0:
            raise ModelError(f"node '{show(node.name)}' (CenterCropPad): shape {want} for axes "
                             f"{axes} of a rank-{r} input")
        starts, ends, crop_axes = [], [], []
        pads = [0] * (2 * r)
        for a, s in zip(axes, want):
            n = x.shape[a]
            if s < n:
                starts.append((n - s) // 2)
                ends.append((n - s) // 2 + s)
                crop_axes.append(a)
            elif s > n:
                pads[a], pads[r + a] = (s - n) // 2, s - n - (s - n) // 2
        y = x
        if crop_axes:
            y = add(g, node, "Slice", [y, g.constant(np.array(starts, np.int64)),
                                       g.constant(np.array(ends, np.int64)),
                                       g.constant(np.array(crop_axes, np.int64))], tag="crop")[0]
        if any(pads):
            y = add(g, node, "Pad", [y, g.constant(np.array(pads, np.int64))], tag="pad")[0]
        return [y if y is not x else add(g, node, "Identity", [x])[0]]
