"""Multiplications and additions by constants folded into the weights of the Conv / Gemm /
MatMul that produces their input, when that is exact algebra (only float rounding changes):

    Conv:   (W*x + B) * s + t      = (W*s) * x + (B*s + t)        s, t per output channel
    Gemm:   (a*A@B + b*C) * s + t  = a*A@(B*s) + (b*C*s + t)      s, t per column
    MatMul: (A@B) * s + t          = A@(B*s)  [+ t: Gemm(A, B*s, t) when A is 2-D]

Sub and Div by a constant are Add and Mul by its negation and reciprocal. The producer must
have no other reader and no fused epilogue. New weights are computed in float64 and new
constants are made (weights may be shared). `fold_into` is also used by fold_batchnorm."""
from __future__ import annotations

import numpy as np

from glowpy.ir import epilogue
from glowpy.ir.graph import Graph, Node, Value
from glowpy.ir.passes.util import only_user, remove, take_output, users


def channel_axis(p: Node) -> int | None:
    """The output axis the foldable constants may vary along."""
    if p.op == "Conv":
        return 1
    if p.op == "Gemm":
        return 1
    if p.op == "MatMul" and len(p.inputs[1].shape) == 2:
        return len(p.outputs[0].shape) - 1
    return None


def per_channel(const: np.ndarray, out_shape: tuple, axis: int) -> np.ndarray | None:
    """const as a float64 vector along `axis` of out_shape, if it varies along no other axis
    and broadcasting it does not grow the output."""
    if const.ndim > len(out_shape):
        return None
    cs = (1,) * (len(out_shape) - const.ndim) + const.shape
    if any(d != 1 for i, d in enumerate(cs) if i != axis) or cs[axis] not in (1, out_shape[axis]):
        return None
    return np.broadcast_to(const.astype(np.float64).reshape(-1), (out_shape[axis],)).copy()


def _bshape(vec, rank, axis):
    return vec.reshape([-1 if i == axis else 1 for i in range(rank)])


def fold_into(graph: Graph, p: Node, scale=None, shift=None) -> bool:
    """Rewrites p so its output becomes out*scale + shift (per-channel float64 vectors)."""
    if epilogue.steps(p) or len(p.outputs) != 1 or p.outputs[0].dtype.kind != "f":
        return False
    dt = p.outputs[0].dtype
    name = p.name
    if p.op == "Conv":
        w, b = p.inputs[1], p.input(2)
        if not w.is_const or (b is not None and not b.is_const):
            return False
        m = w.shape[0]
        w64 = w.const.astype(np.float64)
        b64 = b.const.astype(np.float64) if b is not None else np.zeros(m)
        if scale is not None:
            w64 = w64 * _bshape(scale, w64.ndim, 0)
            b64 = b64 * scale
        if shift is not None:
            b64 = b64 + shift
        p.inputs = [p.inputs[0], graph.constant(w64.astype(dt), f"{name}_W"),
                    graph.constant(b64.astype(dt), f"{name}_B")]
        return True
    if p.op == "Gemm":
        bm, c = p.inputs[1], p.input(2)
        if not bm.is_const or (c is not None and not c.is_const):
            return False
        beta = float(p.attrs["beta"])
        b64 = bm.const.astype(np.float64)
        c64 = beta * c.const.astype(np.float64) if c is not None and beta != 0 else None
        if scale is not None:
            b64 = b64 * (_bshape(scale, 2, 0) if p.attrs["transB"] else _bshape(scale, 2, 1))
            c64 = c64 * scale if c64 is not None else None
        if shift is not None:
            c64 = shift if c64 is None else c64 + shift
        ins = [p.inputs[0], graph.constant(b64.astype(dt), f"{name}_B")]
        if c64 is not None:
            ins.append(graph.constant(np.asarray(c64).astype(dt), f"{name}_C"))
        p.inputs = ins
        p.attrs["beta"] = 1.0
        return True
    if p.op == "MatMul":
        a, bm = p.inputs
        if not bm.is_const or len(bm.shape) != 2:
            return False
        if shift is not None and len(a.shape) != 2:
            return False
        b64 = bm.const.astype(np.float64)
        if scale is not None:
            b64 = b64 * scale.reshape(1, -1)
        newb = graph.constant(b64.astype(dt), f"{name}_B")
        if shift is None:
            p.inputs = [a, newb]
            return True
        from glowpy.ir.ops import get_op
        p.op = "Gemm"
        p.attrs = get_op("Gemm").complete_attrs({}, name)
        p.inputs = [a, newb, graph.constant(shift.astype(dt), f"{name}_C")]
        return True
    return False


def _affine_of(n: Node, v: Value, c: Value, axis: int):
    """(scale, shift) vectors that `n` (v op c) applies, or None."""
    if n.op in ("Sub", "Div") and n.inputs[0] is not v:
        return None  # c - v and c / v are not affine maps of v with positive structure we fold
    vec = per_channel(c.const, v.shape, axis)
    if vec is None:
        return None
    if n.op == "Mul":
        return vec, None
    if n.op == "Div":
        return (None if np.any(vec == 0) else 1.0 / vec), None
    if n.op == "Add":
        return None, vec
    return None, -vec  # Sub


def fold_affine(graph: Graph) -> Graph:
    """One sweep in model order: a fold makes the producer write the folded node's output, so
    a following Mul/Add on it is met later in the same sweep; the readers index is kept up
    to date and the folded nodes are dropped at the end (restarting after every fold made
    the pass quadratic in the model)."""
    us = users(graph)
    folded = []
    for n in list(graph.nodes):
        if n.op not in ("Mul", "Add", "Sub", "Div"):
            continue
        for v, c in ((n.inputs[0], n.inputs[1]), (n.inputs[1], n.inputs[0])):
            if v.is_const or not c.is_const or n.outputs[0].shape != v.shape:
                continue
            p = v.producer
            if p is None or p.op not in epilogue.MATRIX_HOSTS or only_user(graph, v, us) is not n:
                continue
            axis = channel_axis(p)
            aff = _affine_of(n, v, c, axis) if axis is not None else None
            if aff is None or (aff[0] is None and aff[1] is None):
                continue
            if fold_into(graph, p, *aff):
                take_output(p, n)
                us.pop(v, None)
                folded.append(n)
                break
    remove(graph, *folded)
    return graph
