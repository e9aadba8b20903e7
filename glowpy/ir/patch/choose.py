"""Patch-based execution: which stage to cut where, in how many bands.

Every candidate is planned for real (the planner's schedule search and in-place choices
included), so the figure compared is the activation region the bundle would get. Candidates:
every prefix of the planned node order that is a stage (rewrite.Stage.find), times band counts
from 2 up to the cut's height. They are tried in the order of a lower bound on what they can
reach (the bytes live after the stage in the untiled plan, and the cut itself), and the search
stops when no remaining stage can beat the best plan found.

The overhead of a candidate is the work the untiled bundle does not do, against the model's
multiply-adds: rows copied for the halos and the cut, COPY_WEIGHT per byte, and CALL_WEIGHT per
added kernel call: estimates for the Cortex-M7 (a byte copied, about a quarter of an int8
multiply-add's instructions; a call with its setup, a few hundred). With them the chosen plans
of VWW, ResNet-8 and the float VWW measured +2.5%, -1.1% and +2.4% instructions against the
estimated 3.3%, 1.3% and 5.2% (benchmarks/patch_m7.py, docs/memory.md)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from glowpy.errors import ModelError
from glowpy.ir.macs import node_macs
from glowpy.ir.patch.rewrite import Stage, rewrite

COPY_WEIGHT = 0.25
CALL_WEIGHT = 300
MAX_PLANS = 48  # candidate plans at most: each is a full schedule search and placement


@dataclass
class Choice:
    graph: object
    activation: int
    overhead: float
    info: dict


MAX_BANDS = 64  # past this the bands' kernel calls cost more than the rows they save
MAX_BAND_NODES = 3000  # nodes a rewritten stage may have (bands x nodes: planning time)


def _band_counts(h: int, nodes: int) -> list[int]:
    top = min(h, MAX_BANDS, max(2, MAX_BAND_NODES // max(1, nodes)))
    out, n = [], 2
    while n < top:
        out.append(n)
        n = n * 3 // 2 if n >= 4 else n + 1
    return out + [top]


def _lower_bounds(graph, prog) -> dict:
    """{prefix end: bytes any patched plan of that stage needs at least}: the largest live
    bytes of the untiled plan at an instruction of a node after the stage."""
    prof = prog.plan_info.get("profile", [])
    where = {id(n): i for i, n in enumerate(graph.nodes)}
    after = [0] * (len(graph.nodes) + 1)
    for i, ins in enumerate(prog.instrs):
        k = where.get(id(ins.node))
        if k is not None and i < len(prof):
            after[k] = max(after[k], prof[i])
    for k in range(len(graph.nodes) - 1, -1, -1):
        after[k] = max(after[k], after[k + 1])
    return after


def _restore(graph):
    for n in graph.nodes:
        for v in n.outputs:
            v.producer = n


def choose(graph, plan, overhead_limit: float | None = 0.10, budget: int | None = None):
    """(graph to compile, info for the memory report). `plan(graph)` plans a graph and returns
    the Program. Without a budget: the smallest activations within `overhead_limit` (a
    fraction of the model's multiply-adds), if smaller than the untiled plan. With a budget
    (bytes): the least overhead whose activations fit it; a ModelError with the smallest
    achievable figure when none does."""
    base_prog = plan(graph)
    base = base_prog.sizes["activation"]
    info = {"before": base, "after": base, "applied": False}
    if budget is not None and base <= budget:
        return graph, info | {"budget": budget}
    macs = max(1, sum(node_macs(n) for n in graph.nodes))
    bounds = _lower_bounds(graph, base_prog)
    stages = []
    for end in range(1, len(graph.nodes)):
        st = Stage.find(graph, end)
        if st is not None:
            stages.append((max(bounds[end], st.cut.nbytes), end, st))
    stages.sort(key=lambda t: (t[0], -t[1]))
    best: Choice | None = None
    smallest: Choice | None = None
    plans = 0

    def candidate(st, end, n, g, what, over):
        nonlocal plans, smallest
        plans += 1
        act = plan(g).sizes["activation"]
        c = Choice(g, act, over, what | {"cut": st.cut.name, "cut_shape": list(st.cut.shape),
                                         "stage_end": end})
        if smallest is None or (act, over) < (smallest.activation, smallest.overhead):
            smallest = c
        return c

    for bound, end, st in stages:
        target = best.activation if best else (base if budget is None else budget + 1)
        if plans >= MAX_PLANS or (bound >= target and budget is None) or (
                budget is not None and smallest is not None and bound >= smallest.activation
                and best is not None):
            break
        counts = _band_counts(st.height(), len(st.nodes))
        made: dict = {}

        def option(i):
            """(band count, graph, what, overhead) of counts[i]; more bands: fewer bytes live
            per band, more rows copied and kernels called (the overhead grows with i)."""
            if i not in made:
                g, what = rewrite(st, counts[i])
                over = (what["copied_bytes"] * COPY_WEIGHT
                        + (len(g.nodes) - len(graph.nodes)) * CALL_WEIGHT) / macs
                made[i] = (counts[i], g, what, over)
            return made[i]

        top = len(counts) - 1
        if budget is None and overhead_limit is not None:
            lo, hi = 0, top  # the most bands within the limit, by bisection
            if option(0)[3] > overhead_limit:
                continue
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if option(mid)[3] <= overhead_limit else (lo, mid - 1)
            top = lo
        if budget is None:
            c = candidate(st, end, *option(top))
            if c.activation < target:
                best = c
            continue
        # the most bands first (the least memory); then the fewest that still fit
        c = candidate(st, end, *option(top))
        if c.activation > budget:
            continue
        fit, lo, hi = c, 0, top
        while lo < hi:
            mid = (lo + hi) // 2
            m = candidate(st, end, *option(mid))
            if m.activation <= budget:
                fit, hi = m, mid
            else:
                lo = mid + 1
        if best is None or (fit.overhead, fit.activation) < (best.overhead, best.activation):
            best = fit
    if budget is not None and best is None:
        least = min(base, smallest.activation) if smallest else base
        _restore(graph)
        raise ModelError(f"-max-activations={budget}: the smallest activation region this model "
                         f"reaches is {least} bytes (untiled: {base}"
                         + (f"; patch-based over {smallest.info['nodes']} nodes up to "
                            f"'{smallest.info['cut']}' in {smallest.info['bands']} bands"
                            if smallest else "; no stage of it streams by rows")
                         + "); raise the budget")
    if best is None:
        _restore(graph)
        return graph, info | {"candidates": plans}
    _restore(best.graph)
    return best.graph, info | best.info | {
        "after": best.activation, "applied": True, "overhead": round(best.overhead, 4),
        "candidates": plans, **({"budget": budget} if budget is not None else {})}
