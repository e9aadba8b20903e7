"""GELU as exported before opset 20 (torch's nn.GELU(), BERT's gelu): x * 0.5 * (1 + erf(x /
sqrt(2))), written as Div (or Mul by 1/sqrt(2)) -> Erf -> Add 1 -> Mul by x -> Mul by 0.5 (or
x * 0.5 first), becomes the one Gelu node (opset 20) it computes.

Why: the chain reads x twice, so fusion made it one loop with the Div as its host: a vector
division per element before the Erf, and x loaded twice. Gelu multiplies by 1/sqrt(2) instead
(within one rounding of x / sqrt(2)). AVX2 Zen 3, the chain on (1,128,1024) (benchmarks/
op_probe.py gelu_erf, two runs): 149-153 -> 137-144 us (onnxruntime 141-145); ConvNeXt-T's 18
GELU loops, with erf's exp_scaled too: 32.8 -> 27.1 Mcycles (best of 3 alternating runs)."""
from __future__ import annotations

import math

import numpy as np

from glowpy.ir.graph import Graph, Node
from glowpy.ir.passes.util import only_user, users

RSQRT2 = 1 / math.sqrt(2)


def _scalar(v, want: float) -> bool:
    """v is a one-element float constant within float32 rounding of `want`."""
    return v is not None and v.is_const and v.const.size == 1 and \
        np.isclose(float(v.const.reshape(-1)[0]), want, rtol=1e-6, atol=0)


def _other(node: Node, v):
    """The other input of a two-input node that reads v once, else None."""
    if len(node.inputs) != 2 or sum(x is v for x in node.inputs) != 1:
        return None
    return node.inputs[1] if node.inputs[0] is v else node.inputs[0]


def _match(graph: Graph, erf: Node, us: dict):
    """(x, the nodes of the chain, its last node) for an Erf that starts a GELU, else None."""
    d = erf.inputs[0].producer
    if d is None or d.op not in ("Div", "Mul") or len(d.inputs) != 2 or \
            only_user(graph, erf.inputs[0], us) is not erf:
        return None
    x = d.inputs[0]
    if not (_scalar(d.inputs[1], math.sqrt(2)) if d.op == "Div" else _scalar(d.inputs[1], RSQRT2)):
        if d.op == "Div" or not _scalar(x, RSQRT2):
            return None
        x = d.inputs[1]  # Mul(1/sqrt(2), x)
    add = only_user(graph, erf.outputs[0], us)
    if add is None or add.op != "Add" or not _scalar(_other(add, erf.outputs[0]), 1.0):
        return None
    m1 = only_user(graph, add.outputs[0], us)
    if m1 is None or m1.op != "Mul":
        return None
    y = _other(m1, add.outputs[0])
    if y is x:  # (x * (1 + erf)) * 0.5
        half = only_user(graph, m1.outputs[0], us)
        if half is None or half.op != "Mul" or not _scalar(_other(half, m1.outputs[0]), 0.5):
            return None
        return x, [d, erf, add, m1, half], half
    h = y.producer if y is not None else None  # (x * 0.5) * (1 + erf)
    if h is None or h.op != "Mul" or only_user(graph, y, us) is not m1 or \
            not _scalar(_other(h, x), 0.5):
        return None
    return x, [d, erf, add, h, m1], m1


def recognize_gelu(graph: Graph) -> Graph:
    """One pass in model order; the readers index is kept current (x's readers)."""
    us = users(graph)
    gone = set()
    for n in graph.nodes:
        if n.op != "Erf" or id(n) in gone:
            continue
        m = _match(graph, n, us)
        if m is None:
            continue
        x, chain, last = m
        out = last.outputs[0]
        if x.dtype != np.float32 or out.shape != x.shape or \
                any(id(c) in gone for c in chain):
            continue
        gelu = Node("Gelu", last.name, [x], [out], {"approximate": "none"})
        out.producer = gelu
        gone.update(id(c) for c in chain if c is not last)
        graph.nodes[graph.nodes.index(last)] = gelu  # the chain's place: its readers follow
        us[x] = [u for u in us.get(x, []) if u not in chain] + [gelu]
    if gone:
        graph.nodes = [n for n in graph.nodes if id(n) not in gone]
    return graph
