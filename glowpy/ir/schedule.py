"""Schedule search: the node order decides which tensors are live together, so the planner tries
several valid topological orders and keeps the one whose plan is smallest.

Candidates: the model's order, memory-greedy list schedules (at each step the ready node that
grows the live set least, or frees the most), and depth-first orders that finish one branch
before starting the next. Each distinct candidate is lowered and planned for real (lowering's
in-place and zero-copy choices depend on the order); ties keep the earlier candidate, so the
model order wins unless another is strictly better."""
from __future__ import annotations

from glowpy.ir.graph import Graph, Node
from glowpy.ir.program import align


def _deps(graph: Graph):
    """Per node: the nodes it reads from (within the graph), and the reverse."""
    producer = {}
    for n in graph.nodes:
        for o in n.outputs:
            producer[o] = n
    preds = {id(n): [] for n in graph.nodes}
    succs = {id(n): [] for n in graph.nodes}
    for n in graph.nodes:
        for v in n.inputs:
            p = producer.get(v) if v is not None else None
            if p is not None and p not in preds[id(n)]:
                preds[id(n)].append(p)
                succs[id(p)].append(n)
    return preds, succs, producer


def _cost(v) -> int:
    return 0 if v.is_const else align(v.nbytes)


def _storage_value(graph: Graph, producer: dict):
    """value -> the value whose storage it shares (view nodes alias their input)."""
    rep = {}
    for n in graph.nodes:
        if "view" in n.opdef.traits and not n.inputs[0].is_const:
            rep[n.outputs[0]] = rep.get(n.inputs[0], n.inputs[0])
    return rep


def greedy(graph: Graph, mode: str) -> list[Node]:
    """List scheduling by estimated memory: 'grow' picks the ready node whose outputs cost the
    least minus what it frees; 'free' the one freeing the most; ties by model order."""
    preds, succs, producer = _deps(graph)
    pos = {id(n): i for i, n in enumerate(graph.nodes)}
    rep = _storage_value(graph, producer)
    remaining: dict = {}  # storage value -> readers left
    for n in graph.nodes:
        for v in n.inputs:
            if v is not None and not v.is_const:
                s = rep.get(v, v)
                remaining[s] = remaining.get(s, 0) + 1
    outputs = {rep.get(v, v) for v in graph.outputs}
    indeg = {id(n): len(preds[id(n)]) for n in graph.nodes}
    ready = [n for n in graph.nodes if indeg[id(n)] == 0]
    order = []
    while ready:
        def score(n):
            new = sum(_cost(o) for o in n.outputs if rep.get(o, o) is o)
            freed = 0
            counts: dict = {}
            for v in n.inputs:
                if v is not None and not v.is_const:
                    s = rep.get(v, v)
                    counts[s] = counts.get(s, 0) + 1
            for s, c in counts.items():
                if remaining.get(s, 0) == c and s not in outputs and s not in graph.inputs:
                    freed += _cost(s)
            if mode == "grow":
                return (new - freed, pos[id(n)])
            return (-freed, new, pos[id(n)])
        n = min(ready, key=score)
        ready.remove(n)
        order.append(n)
        for v in n.inputs:
            if v is not None and not v.is_const:
                s = rep.get(v, v)
                remaining[s] -= 1
        for s in succs[id(n)]:
            indeg[id(s)] -= 1
            if indeg[id(s)] == 0:
                ready.append(s)
    return order


def depth_first(graph: Graph, reverse_inputs: bool = False) -> list[Node]:
    """Post-order from the outputs: each node right after the last of its inputs' subtrees;
    subtrees visited largest-first (so small side branches run just before their use)."""
    preds, succs, producer = _deps(graph)
    size_memo: dict = {}

    def weight(n):
        if id(n) not in size_memo:
            size_memo[id(n)] = sum(_cost(o) for o in n.outputs)
        return size_memo[id(n)]

    done, order = set(), []

    def visit(n):
        stack = [(n, False)]
        while stack:
            m, expanded = stack.pop()
            if id(m) in done:
                continue
            if expanded:
                done.add(id(m))
                order.append(m)
                continue
            stack.append((m, True))
            ps = [p for p in preds[id(m)] if id(p) not in done]
            ps.sort(key=weight, reverse=not reverse_inputs)
            for p in reversed(ps):
                stack.append((p, False))

    for v in graph.outputs:
        p = producer.get(v)
        if p is not None:
            visit(p)
    for n in graph.nodes:  # nodes no output needs (kept by the caller's choice)
        if id(n) not in done:
            visit(n)
    return order


def candidates(graph: Graph):
    yield "model", list(graph.nodes)
    yield "greedy-grow", greedy(graph, "grow")
    yield "greedy-free", greedy(graph, "free")
    yield "depth-first", depth_first(graph)
    yield "depth-first-small", depth_first(graph, reverse_inputs=True)


def search(graph: Graph, evaluate):
    """Tries the candidate orders with `evaluate(graph) -> (size, result)` and leaves the best
    order in graph.nodes. Returns (result, schedule name)."""
    original = list(graph.nodes)
    best, seen = None, set()
    for name, order in candidates(graph):
        key = tuple(id(n) for n in order)
        if key in seen or len(order) != len(original):
            continue
        seen.add(key)
        graph.nodes = order
        size, result = evaluate(graph)
        if best is None or size < best[0]:
            best = (size, result, order, name)
    graph.nodes = best[2]
    return best[1], best[3]
