"""Views: Identity and inference Dropout disappear (readers read their input), and chains of
Reshape / Flatten / Squeeze / Unsqueeze collapse into one Reshape from the chain's start (or
nothing, when the chain ends at the shape it began with). Lowering gives the views that remain
no buffer and no copy; this pass only makes the graph say so plainly."""
from __future__ import annotations

import numpy as np

from glowpy.ir.graph import Graph, Node
from glowpy.ir.passes.dce import eliminate_dead_code
from glowpy.ir.passes.util import users

RESHAPES = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}


def _is_pure_view(n: Node, users_: dict) -> bool:
    """A view node whose only live output is the reshaped data (Dropout's mask unused)."""
    if n.op not in RESHAPES or n.inputs[0] is None:
        return False
    return all(not users_.get(o) for o in n.outputs[1:])


def simplify_views(graph: Graph) -> Graph:
    """One sweep with the readers index, the live nodes and the replacements kept up to date
    and the node list rebuilt once (rebuilt per rewrite, with a scan of every node per
    replaced value, models full of Identity/Dropout were quadratic)."""
    us = users(graph)
    live = {id(n) for n in graph.nodes}
    swap: dict = {}  # id(view) -> the Reshape that replaces it
    outputs = set(graph.outputs)
    for n in list(graph.nodes):
        if not _is_pure_view(n, us) or any(o in outputs for o in n.outputs[1:]):
            continue
        x, y = n.inputs[0], n.outputs[0]
        src = x
        p = x.producer
        if p is not None and id(p) in live and _is_pure_view(p, us) and p.outputs[0] is x:
            src = p.inputs[0]  # already collapsed: p reads the chain's start
        if src.shape == y.shape and src.dtype == y.dtype and y not in outputs:
            readers = us.pop(y, [])
            for u in readers:
                u.inputs = [src if v is y else v for v in u.inputs]
            us[x] = [u for u in us.get(x, []) if u is not n]
            us[src] = us.get(src, []) + readers
            live.discard(id(n))
            continue
        if src is not x or n.op in ("Identity", "Dropout"):
            shape = graph.constant(np.asarray(y.shape, np.int64), f"{n.name}_shape")
            r = Node("Reshape", n.name, [src, shape], [y], {"allowzero": 0})
            y.producer = r
            swap[id(n)] = r
            live.discard(id(n))
            live.add(id(r))
            us[x] = [u for u in us.get(x, []) if u is not n]
            us.setdefault(src, []).append(r)
    graph.nodes = [swap.get(id(n), n) for n in graph.nodes
                   if id(n) in live or id(n) in swap]
    return eliminate_dead_code(graph)  # the collapsed chains' first links
