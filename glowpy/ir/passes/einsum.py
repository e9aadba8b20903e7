"""Two-operand float Einsum as the matrix product it is: each operand transposed to (batch
labels, its own labels, contracted labels) and reshaped to 3-D (2-D where no label is in both
operands and the output: a layer's weights), one MatMul, the result reshaped to the
batch, first-operand and second-operand labels and transposed to the equation's output order.

Why: the Einsum kernel (codegen/kernels/gemm/einsum.py) is one scalar loop nest for any
equation; the MatMul kernels are register-tiled. Zen 4, AVX2 code, 'bhqd,hdk->bhqk' on
(1, 12, 128, 64) x (12, 64, 128): 7.8 ms as an Einsum, 0.38 ms for onnxruntime (which does the
same rewrite). The transposes of constant operands fold away (fold_constants runs next) and the
others cancel or become views where they can (simplify_transposes, simplify_views).

Other float equations are first split into those (`_split`): a label summed within one
operand only is summed there first (ReduceSum), one operand alone is that sum and a
Transpose, and three or more operands are contracted two at a time, left to right, each
intermediate keeping the labels a later operand or the output still needs. 'ij,jk,kl->il' on
64x128, 128x96, 96x80 took 51 ms in the scalar loop nest over all four labels (onnxruntime
33 us), 'bij->bj' on 8x256x64 83 us (onnxruntime 12).

Left to the kernel: repeated labels (diagonals), broadcast (size-1) dims, an ellipsis, and
integer types."""
from __future__ import annotations

import math

import numpy as np

from glowpy.ir.graph import Graph
from glowpy.ir.passes.util import make_node, take_output


def _labels(n):
    """(labels of A, labels of B, output labels, size per label), or None where this pass does
    not apply."""
    eq = n.attrs.get("equation", "").replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if not arrow or "." in eq or len(terms) != 2 or len(n.inputs) != 2:
        return None
    (a, b), (xa, xb) = terms, n.inputs
    if len(a) != len(xa.shape) or len(b) != len(xb.shape) or \
            any(len(set(t)) != len(t) for t in (a, b, rhs)) or not set(rhs) <= set(a + b):
        return None
    if any(lab not in rhs and (lab not in a or lab not in b) for lab in a + b):
        return None  # a label summed within one operand
    sizes = {}
    for t, x in ((a, xa), (b, xb)):
        for lab, d in zip(t, x.shape):
            if sizes.setdefault(lab, d) != d:
                return None  # broadcasting
    return a, b, rhs, sizes


def _chain(graph, n, x, perm, shape):
    """x transposed by perm (unless identity) and reshaped to shape (unless already it)."""
    nodes = []
    if perm != sorted(perm):
        t = make_node(graph, "Transpose", [x], {"perm": perm}, f"{n.name}_t")
        nodes.append(t)
        x = t.outputs[0]
    if tuple(x.shape) != tuple(shape):
        r = make_node(graph, "Reshape", [x, graph.constant(np.array(shape, np.int64), f"{n.name}_shape")],
                      {}, f"{n.name}_r")
        nodes.append(r)
        x = r.outputs[0]
    return x, nodes


def _terms(n):
    """(operand labels, output labels, size per label) of a float Einsum without an ellipsis,
    repeated labels or broadcasting, or None."""
    eq = n.attrs.get("equation", "").replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if not arrow or "." in eq or len(terms) != len(n.inputs) or \
            any(x.dtype != np.float32 for x in n.inputs):
        return None
    sizes = {}
    for t, x in zip(terms, n.inputs):
        if len(t) != len(x.shape) or len(set(t)) != len(t):
            return None
        for lab, d in zip(t, x.shape):
            if sizes.setdefault(lab, d) != d:
                return None
    if len(set(rhs)) != len(rhs) or not set(rhs) <= set(sizes):
        return None
    return terms, rhs, sizes


def _split(graph: Graph, n) -> list:
    """The Einsum as ReduceSums of labels summed within one operand, pairwise two-operand
    Einsums (left to right) and a last Transpose for one operand: nodes, the last writing
    n's output; None where the equation is already two operands with nothing to pre-sum."""
    found = _terms(n)
    if found is None:
        return None
    terms, rhs, _ = found
    everywhere = "".join(terms) + rhs
    lonely = [[lab for lab in t if everywhere.count(lab) == 1] for t in terms]
    if len(terms) == 2 and not any(lonely):
        return None
    nodes, ops = [], []
    for t, x, drop in zip(terms, n.inputs, lonely):
        if drop:
            axes = graph.constant(np.array([t.index(lab) for lab in drop], np.int64), f"{n.name}_axes")
            r = make_node(graph, "ReduceSum", [x, axes], {"keepdims": 0}, f"{n.name}_sum")
            nodes.append(r)
            t, x = "".join(lab for lab in t if lab not in drop), r.outputs[0]
        ops.append((t, x))
    while len(ops) > 2:
        (ta, xa), (tb, xb) = ops[:2]
        later = "".join(t for t, _ in ops[2:]) + rhs
        keep = "".join(lab for lab in dict.fromkeys(ta + tb) if lab in later)
        e = make_node(graph, "Einsum", [xa, xb], {"equation": f"{ta},{tb}->{keep}"}, f"{n.name}_pair")
        nodes.append(e)
        ops[:2] = [(keep, e.outputs[0])]
    if len(ops) == 2:
        (ta, xa), (tb, xb) = ops
        last = make_node(graph, "Einsum", [xa, xb], {"equation": f"{ta},{tb}->{rhs}"}, f"{n.name}_pair")
    else:
        (t, x), = ops
        if t == rhs and nodes:  # (only sums: the last ReduceSum writes the output)
            take_output(nodes[-1], n)
            return nodes
        last = make_node(graph, "Transpose", [x], {"perm": [t.index(lab) for lab in rhs]},
                         f"{n.name}_t")  # (the identity permutation for 'ij->ij')
    take_output(last, n)
    return nodes + [last]


def einsum_as_matmul(graph: Graph) -> Graph:
    split = []
    for n in graph.nodes:
        parts = _split(graph, n) if n.op == "Einsum" else None
        split += parts if parts is not None else [n]
    graph.nodes = split
    nodes = []
    for n in graph.nodes:
        found = n.op == "Einsum" and all(x.dtype == np.float32 for x in n.inputs) and _labels(n)
        if not found:
            nodes.append(n)
            continue
        a, b, out, sizes = found
        batch = [lab for lab in out if lab in a and lab in b]
        m = [lab for lab in out if lab in a and lab not in b]
        nn = [lab for lab in out if lab in b and lab not in a]
        k = [lab for lab in a if lab in b and lab not in out]
        size = lambda labs: math.prod(sizes[lab] for lab in labs)  # noqa: E731
        lead = [size(batch)] if batch else []
        xa, na = _chain(graph, n, n.inputs[0], [a.index(lab) for lab in batch + m + k],
                        lead + [size(m), size(k)])
        xb, nb = _chain(graph, n, n.inputs[1], [b.index(lab) for lab in batch + k + nn],
                        lead + [size(k), size(nn)])
        mm = make_node(graph, "MatMul", [xa, xb], {}, f"{n.name}_matmul")
        y, tail = mm.outputs[0], []
        order = batch + m + nn
        if len(order) != len(y.shape) or any(sizes[lab] != d for lab, d in zip(order, y.shape)):
            r = make_node(graph, "Reshape", [y, graph.constant(
                np.array([sizes[lab] for lab in order], np.int64), f"{n.name}_shape")], {}, f"{n.name}_r")
            tail.append(r)
            y = r.outputs[0]
        perm = [order.index(lab) for lab in out]
        last = tail[-1] if tail else mm
        if perm != sorted(perm):
            last = make_node(graph, "Transpose", [y], {"perm": perm}, f"{n.name}_t")
            tail.append(last)
        take_output(last, n)  # the Einsum's own output value (it may be a graph output)
        nodes += na + nb + [mm] + tail
    graph.nodes = nodes
    return graph
