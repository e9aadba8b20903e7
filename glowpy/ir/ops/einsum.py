"""Einsum: any equation numpy.einsum accepts over static shapes (explicit or implicit output,
`...` broadcasting, repeated labels for diagonals, sums over labels not in the output).

`EinsumPlan` turns the equation and the input shapes into a loop description: output labels
(the outer loops) and summed labels (the inner loops), each with a size and every operand's
element stride (0 where an operand lacks or broadcasts the label, the sum of two strides where
a label repeats in one operand)."""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from glowpy.errors import ModelError
from glowpy.ir.ops.layout import contiguous
from glowpy.ir.ops.registry import Op, register


@dataclass
class EinsumPlan:
    out_sizes: list  # per output label
    sum_sizes: list  # per summed label
    out_strides: list  # per input: element stride per output label
    sum_strides: list  # per input: element stride per summed label
    out_shape: tuple


def _terms(node, equation: str):
    eq = equation.replace(" ", "")
    if not re.fullmatch(r"[A-Za-z.,]*(->[A-Za-z.]*)?", eq):
        raise ModelError(f"node '{node.name}' (Einsum): cannot parse equation '{equation}'")
    lhs, arrow, rhs = eq.partition("->")
    return lhs.split(","), (rhs if arrow else None)


def _labels(node, term: str, rank: int | None, ell_rank: int):
    """A term as a list of labels; the dims of `...` become ('.', k), right-aligned to
    ell_rank (numpy broadcasting)."""
    if term.count("...") > 1 or term.replace("...", "").count("."):
        raise ModelError(f"node '{node.name}' (Einsum): bad ellipsis in term '{term}'")
    head, ell, tail = term.partition("...")
    if not ell:
        if rank is not None and len(term) != rank:
            raise ModelError(f"node '{node.name}' (Einsum): term '{term}' has {len(term)} labels "
                             f"for an input of rank {rank}")
        return list(term)
    e = ell_rank if rank is None else rank - len(head) - len(tail)
    if e < 0:
        raise ModelError(f"node '{node.name}' (Einsum): term '{term}' has more labels than the "
                         f"input's rank {rank}")
    return list(head) + [(".", ell_rank - e + t) for t in range(e)] + list(tail)


def plan(node) -> EinsumPlan:
    xs = node.inputs
    terms, rhs = _terms(node, node.attrs["equation"])
    if len(terms) != len(xs):
        raise ModelError(f"node '{node.name}' (Einsum): equation '{node.attrs['equation']}' has "
                         f"{len(terms)} operands, the node {len(xs)} inputs")
    ell_rank = max((len(x.shape) - len(t.replace("...", "")) for t, x in zip(terms, xs)
                    if "..." in t), default=0)
    in_labels = [_labels(node, t, len(x.shape), ell_rank) for t, x in zip(terms, xs)]
    sizes: dict = {}
    for labels, x in zip(in_labels, xs):
        for lab, d in zip(labels, x.shape):
            if lab in sizes and sizes[lab] != d and 1 not in (sizes[lab], d):
                raise ModelError(f"node '{node.name}' (Einsum): label '{lab if isinstance(lab, str) else '...'}'"
                                 f" has sizes {sizes[lab]} and {d}")
            sizes[lab] = max(sizes.get(lab, d), d)
    ell = [(".", k) for k in range(ell_rank)]
    if rhs is None:
        counts = {}
        for labels in in_labels:
            for lab in labels:
                counts[lab] = counts.get(lab, 0) + 1
        out = ell + sorted(lab for lab, c in counts.items() if isinstance(lab, str) and c == 1)
    else:
        out = _labels(node, rhs, None, ell_rank)
        if len(set(out)) != len(out) or any(lab not in sizes for lab in out if isinstance(lab, str)):
            raise ModelError(f"node '{node.name}' (Einsum): output '{rhs}' repeats a label or uses "
                             "one no input has")
    summed = [lab for lab in dict.fromkeys(l for ls in in_labels for l in ls) if lab not in out]

    def strides(labels, shape):
        st = {}
        for lab, d, s in zip(labels, shape, contiguous(shape)):
            if d == 1 and sizes[lab] != 1:
                continue  # broadcast
            st[lab] = st.get(lab, 0) + s
        return st

    per_input = [strides(ls, x.shape) for ls, x in zip(in_labels, xs)]
    out_sizes = [sizes.get(lab, 1) for lab in out]
    return EinsumPlan(out_sizes, [sizes[lab] for lab in summed],
                      [[st.get(lab, 0) for lab in out] for st in per_input],
                      [[st.get(lab, 0) for lab in summed] for st in per_input], tuple(out_sizes))


@register
class Einsum(Op):
    inputs = ("Inputs*",)
    attrs = {"equation": None}
    since = 12

    def infer(self, node):
        xs = node.inputs
        if not xs or any(v is None for v in xs):
            raise ModelError(f"node '{node.name}' (Einsum): needs at least one input")
        if node.attrs["equation"] is None:
            raise ModelError(f"node '{node.name}' (Einsum): missing required attribute 'equation'")
        if len({v.dtype for v in xs}) != 1 or xs[0].dtype == np.bool_:
            raise ModelError(f"node '{node.name}' (Einsum): inputs must share one numeric type, "
                             f"got {[v.dtype.name for v in xs]}")
        return [(xs[0].dtype, plan(node).out_shape)]

    def reference(self, node, *xs):
        acc = np.float64 if xs[0].dtype.kind == "f" else xs[0].dtype
        y = np.einsum(node.attrs["equation"].replace(" ", ""), *[x.astype(acc) for x in xs])
        return [np.asarray(y).astype(xs[0].dtype)]
