"""Composite ops (ops/contrib.py: onnxruntime's contrib ops, DynamicQuantizeLinear) replaced by
their expansion into ops glowpy has kernels for. First in the pipeline and required at -O0
(composites have no kernels), so every later pass sees only ordinary ops: a FusedConv's Relu is
fused like any Conv's, a QLinearAdd's DequantizeLinear/Add/QuantizeLinear becomes QAdd."""
from __future__ import annotations

from glowpy.ir.graph import Graph, Node


def decompose(graph: Graph) -> Graph:
    if not any("composite" in n.opdef.traits for n in graph.nodes):
        return graph
    old, graph.nodes = graph.nodes, []
    renamed = {}  # composite output -> the Value that now carries it (graph outputs excepted)
    for n in old:
        n.inputs = [renamed.get(v, v) for v in n.inputs]
        if "composite" not in n.opdef.traits:
            graph.nodes.append(n)
            continue
        start = len(graph.nodes)
        outs = n.opdef.expand_named(graph, n, list(n.inputs), len(n.outputs))
        added = graph.nodes[start:]
        claimed = set()
        for o, new in zip(n.outputs, outs):
            p = new.producer
            if p is not None and any(p is m for m in added) and id(new) not in claimed:
                # the expansion's node writes the composite's own output Value (its name, and
                # its place among the graph outputs)
                claimed.add(id(new))
                p.outputs[p.outputs.index(new)] = o
                o.producer = p
                for m in added:
                    m.inputs = [o if v is new else v for v in m.inputs]
                renamed = {k: (o if v is new else v) for k, v in renamed.items()}
            elif o in graph.outputs:  # a constant or an input: copied into the output
                graph.nodes.append(Node("Identity", n.name, [new], [o]))
                o.producer = graph.nodes[-1]
            else:
                renamed[o] = new
    for n in graph.nodes:
        n.inputs = [renamed.get(v, v) for v in n.inputs]
    return graph
