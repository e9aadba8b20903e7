"""Two-operand float Einsum as the matrix product it is: each operand transposed to (batch
labels, its own labels, contracted labels) and reshaped to 3-D (2-D where no label is in both
operands and the output: a layer's weights), one MatMul, the result reshaped to the
batch, first-operand and second-operand labels and transposed to the equation's output order.

Why: the Einsum kernel (codegen/kernels/gemm/einsum.py) is one scalar loop nest for any
equation; the MatMul kernels are register-tiled. Zen 4, AVX2 code, 'bhqd,hdk->bhqk' on
(1, 12, 128, 64) x (12, 64, 128): 7.8 ms as an Einsum, 0.38 ms for onnxruntime (which does the
same rewrite). The transposes of constant operands fold away (fold_constants runs next) and the
others cancel or become views where they can (simplify_transposes, simplify_views).

Left to the kernel: one operand or more than two, repeated labels (diagonals), labels summed
within one operand only, broadcast (size-1) dims, an ellipsis, and integer types."""
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


def einsum_as_matmul(graph: Graph) -> Graph:
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
