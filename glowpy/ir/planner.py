"""Memory planning: offsets for the three regions, activations shared by liveness."""
from __future__ import annotations

from glowpy.ir.lower import ACTIVATION, Program

ALIGN = 64


def align(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


def lifetimes(prog: Program) -> dict:
    """Activation storage -> (first, last) instruction index touching it."""
    live: dict = {}
    for i, ins in enumerate(prog.instrs):
        for b in ins.inputs + ins.outputs:
            if b is not None and b.root.region == ACTIVATION:
                r = b.root
                first, last = live.get(r, (i, i))
                live[r] = (min(first, i), max(last, i))
    return live


def lower_bound(intervals: dict, sizes: dict) -> int:
    """The largest sum of simultaneously live (aligned) sizes: no plan can be smaller."""
    events = sorted({t for a, b in intervals.values() for t in (a, b)})
    return max((sum(sizes[k] for k, (a, b) in intervals.items() if a <= t <= b) for t in events),
               default=0)


def greedy_by_size(intervals: dict, sizes: dict) -> dict:
    """Largest first, each at the lowest offset free of every placed buffer it overlaps in time."""
    offsets: dict = {}
    for k in sorted(intervals, key=lambda k: (-sizes[k], intervals[k][0])):
        a, b = intervals[k]
        busy = sorted((offsets[j], offsets[j] + sizes[j]) for j in offsets
                      if intervals[j][0] <= b and a <= intervals[j][1])
        off = 0
        for lo, hi in busy:
            if off + sizes[k] <= lo:
                break
            off = max(off, hi)
        offsets[k] = off
    return offsets


def plan(prog: Program, reuse: bool = True) -> Program:
    off = 0
    for c in prog.constants:
        c.offset, off = off, align(off + c.nbytes)
    const_size = off
    off = 0
    for p in prog.placeholders:
        p.offset, off = off, align(off + p.nbytes)
    mutable_size = off
    live = lifetimes(prog)
    sizes = {b: align(b.nbytes) for b in live}
    if reuse:
        offsets = greedy_by_size(live, sizes)
    else:
        offsets, acc = {}, 0
        for b in live:
            offsets[b], acc = acc, acc + sizes[b]
    for b, o in offsets.items():
        b.offset = o
    act_size = max((o + sizes[b] for b, o in offsets.items()), default=0)
    prog.sizes = {"constant": const_size, "mutable": mutable_size, "activation": act_size}
    prog.plan_info = {"lower_bound": lower_bound(live, sizes), "lifetimes": live}
    return prog
