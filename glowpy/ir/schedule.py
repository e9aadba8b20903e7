"""Schedule search: the node order decides which tensors are live together, so the planner tries
several valid topological orders and keeps the one whose plan is smallest.

Candidates: the model's order, memory-greedy list schedules (at each step the ready node that
grows the live set least, or frees the most), and depth-first orders that finish one branch
before starting the next. Each distinct candidate is lowered and planned for real (lowering's
in-place and zero-copy choices depend on the order); ties keep the earlier candidate, so the
model order wins unless another is strictly better."""
from __future__ import annotations

import heapq

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
    least minus what it frees; 'free' the one freeing the most; ties by model order.

    Linear in the graph's size up to a log factor (DenseNet-121 and 1,000 parallel outputs
    spent most of their compile time rescoring every ready node at every step): the ready
    nodes sit in a heap, and a node's score changes only when one of its storages drops to
    as few remaining readers as the node itself reads it, so only those readers are rescored."""
    preds, succs, producer = _deps(graph)
    pos = {id(n): i for i, n in enumerate(graph.nodes)}
    rep = _storage_value(graph, producer)
    cost: dict = {}  # value -> bytes (cached: Value.nbytes is a numpy product)
    remaining: dict = {}  # storage value -> readers left
    reads: dict = {}  # id(node) -> {storage: times it reads it}
    readers: dict = {}  # storage -> nodes reading it
    most: dict = {}  # storage -> the most times one node reads it
    for n in graph.nodes:
        counts = reads[id(n)] = {}
        for v in n.inputs:
            if v is not None and not v.is_const:
                s = rep.get(v, v)
                counts[s] = counts.get(s, 0) + 1
                remaining[s] = remaining.get(s, 0) + 1
        for s, c in counts.items():
            readers.setdefault(s, []).append(n)
            most[s] = max(most.get(s, 0), c)
    outputs = {rep.get(v, v) for v in graph.outputs}
    inputs = set(graph.inputs)

    def cost_of(v):
        c = cost.get(v)
        if c is None:
            c = cost[v] = _cost(v)
        return c

    def score(n):
        new = sum(cost_of(o) for o in n.outputs if rep.get(o, o) is o)
        freed = sum(cost_of(s) for s, c in reads[id(n)].items()
                    if remaining.get(s, 0) == c and s not in outputs and s not in inputs)
        if mode == "grow":
            return (new - freed, pos[id(n)])
        return (-freed, new, pos[id(n)])

    indeg = {id(n): len(preds[id(n)]) for n in graph.nodes}
    current: dict = {}  # id(ready node) -> its score in the heap
    heap: list = []

    def push(n):
        s = score(n)
        current[id(n)] = s
        heapq.heappush(heap, (s, pos[id(n)], n))

    for n in graph.nodes:
        if indeg[id(n)] == 0:
            push(n)
    order = []
    while heap:
        s, _, n = heapq.heappop(heap)
        if current.get(id(n)) != s:
            continue  # a stale entry: the node was rescored
        del current[id(n)]
        order.append(n)
        for st, c in reads[id(n)].items():
            remaining[st] -= c
            if remaining[st] <= most[st]:  # some reader's "frees it" may have changed
                for m in readers[st]:
                    if id(m) in current:
                        push(m)
        for m in succs[id(n)]:
            indeg[id(m)] -= 1
            if indeg[id(m)] == 0:
                push(m)
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
