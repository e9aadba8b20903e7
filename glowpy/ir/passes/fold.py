"""Constant folding: a node whose inputs are all constants is replaced by its value, computed
with the op's numpy reference. (The graph builder folds as it imports; this pass catches what
other rewrites make constant.)"""
from glowpy.ir.graph import Graph


def fold_constants(graph: Graph) -> Graph:
    kept = []
    for n in graph.nodes:
        types = [(o.dtype, o.shape) for o in n.outputs]
        folded = n.opdef.try_fold(n, types)
        if folded is None:
            kept.append(n)
            continue
        for o, a in zip(n.outputs, folded):
            graph.replace_uses(o, graph.constant(a.astype(o.dtype, copy=False).reshape(o.shape), o.name))
    graph.nodes = kept
    return graph
