"""Dead-code removal: nodes none of whose outputs reach a graph output."""
from glowpy.ir.graph import Graph


def eliminate_dead_code(graph: Graph) -> Graph:
    live = set(graph.outputs)
    kept = []
    for n in reversed(graph.nodes):
        if any(o in live for o in n.outputs):
            kept.append(n)
            live.update(v for v in n.inputs if v is not None)
    graph.nodes = kept[::-1]
    return graph
