"""Common-subexpression elimination: identical constants (same dtype, shape and bytes) become
one Value, then nodes with the same op, attributes and inputs are computed once. A node whose
output is a graph output is never dropped (its Value names a placeholder), but later duplicates
of it read its result."""
from __future__ import annotations

import numpy as np

from glowpy.ir.graph import Graph
from glowpy.ir.passes.util import replace_value


def _freeze(x):
    """A hashable, exact key for an attribute value."""
    if isinstance(x, np.ndarray):
        return ("nd", x.dtype.str, x.shape, x.tobytes())
    if isinstance(x, dict):
        return ("d",) + tuple(sorted((k, _freeze(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return ("l",) + tuple(_freeze(v) for v in x)
    if isinstance(x, float):
        return ("f", np.float64(x).tobytes())  # -0.0 != 0.0, nan == nan
    if isinstance(x, np.generic):
        return ("g", x.dtype.str, x.tobytes())
    return x


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    consts: dict = {}  # key -> canonical constant Value
    canon: dict = {}  # Value -> canonical Value

    def c(v):
        if v is None:
            return None
        if v in canon:
            return canon[v]
        if v.is_const:
            key = (v.dtype.str, v.shape, np.ascontiguousarray(v.const).tobytes())
            canon[v] = consts.setdefault(key, v)
            return canon[v]
        return v

    seen: dict = {}
    kept = []
    for n in graph.nodes:
        n.inputs = [c(v) for v in n.inputs]
        key = (n.op, len(n.outputs), _freeze({k: v for k, v in n.attrs.items()}),
               tuple(id(v) if v is not None else None for v in n.inputs))
        first = seen.get(key)
        if first is not None and not any(o in graph.outputs for o in n.outputs):
            for o, f in zip(n.outputs, first.outputs):
                canon[o] = f
            continue
        seen.setdefault(key, n)
        kept.append(n)
    graph.nodes = kept
    for old, new in canon.items():
        if old is not new and not old.is_const:
            replace_value(graph, old, new)
    # graph outputs that are duplicate constants keep their own Value (and name)
    return graph
