"""Transposes: a pair that cancels disappears, two in a row become one, and a transpose that
keeps the order of all dims larger than 1 is a reshape (a view: no copy, no buffer).
Transposes of constants are folded by constant folding (fold.py)."""
from __future__ import annotations

import numpy as np

from glowpy.ir.graph import Graph, Node
from glowpy.ir.passes.dce import eliminate_dead_code
from glowpy.ir.passes.util import remove, replace_value


def _moves_only_unit_dims(shape, perm) -> bool:
    order = [p for p in perm if shape[p] != 1]
    return order == sorted(order)


def simplify_transposes(graph: Graph) -> Graph:
    changed = True
    while changed:
        changed = False
        for n in list(graph.nodes):
            if n.op != "Transpose" or n not in graph.nodes:
                continue
            x, y = n.inputs[0], n.outputs[0]
            perm = n.opdef.perm(n)
            p = x.producer
            if p is not None and p.op == "Transpose" and p in graph.nodes:
                inner = p.opdef.perm(p)
                perm = [inner[q] for q in perm]  # y[i] = x[perm[i]] = src[inner[perm[i]]]
                src = p.inputs[0]
                if perm == list(range(len(perm))) and replace_value(graph, y, src):
                    remove(graph, n)
                else:
                    n.inputs = [src]
                    n.attrs["perm"] = perm
                changed = True
                break
            if _moves_only_unit_dims(x.shape, perm):
                shape = graph.constant(np.asarray(y.shape, np.int64), f"{n.name}_shape")
                r = Node("Reshape", n.name, [x, shape], [y], {"allowzero": 0})
                y.producer = r
                graph.nodes[graph.nodes.index(n)] = r
                changed = True
                break
    return eliminate_dead_code(graph)  # transposes whose readers were redirected
