"""Runs a graph on numpy arrays with the op references (epilogues included): the oracle the pass
tests compare optimized graphs against, and a debugging aid."""
from __future__ import annotations

import numpy as np

from glowpy.ir import epilogue
from glowpy.ir.graph import Graph


def evaluate(graph: Graph, feeds: dict) -> list[np.ndarray]:
    """feeds: {input name or Value: array}; returns the graph outputs in order."""
    env = {}
    for v in graph.inputs:
        a = feeds[v] if v in feeds else feeds[v.name]
        env[v] = np.asarray(a, v.dtype).reshape(v.shape)

    def get(v):
        if v is None:
            return None
        return v.const if v.is_const else env[v]

    for n in graph.nodes:
        outs = epilogue.reference(n, *[get(v) for v in n.inputs])
        for o, a in zip(n.outputs, outs):
            env[o] = np.asarray(a).astype(o.dtype, copy=False).reshape(o.shape)
    return [get(v) for v in graph.outputs]
