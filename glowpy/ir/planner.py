"""Memory planning: offsets in the constant, mutable and activation regions.

Constants are laid out once and placeholders in their fixed order (DESIGN.md, Memory). The
activation region is planned over lifetimes:

  * Every activation storage (liveness.intervals) is a *member* of the *group* of its root
    buffer, at a fixed offset inside it (a Concat slice, a Split part, an in-place output);
    members of one group never conflict with each other, their placement did that already.
  * A group is placed at one 64-aligned offset, the lowest where none of its members overlaps
    a member of another group that is live at the same time -- except that a streaming window
    op's output may overlap its dying input by the allowance lowering recorded
    (Program.overlaps). That fit is first_fit.place.
  * Several group orders are tried (largest first, longest lifetime first, largest area
    first, earliest first, the peak's buffers first, then seeded shuffles of the best) and the
    smallest region wins.

All member ranges are widened to the 64-byte grid (offsets are 64-aligned), so `lower_bound` --
the largest over instructions of the bytes live at once, each group's live ranges counted
once and granted overlaps subtracted -- is a true lower bound of any plan on that grid."""
from __future__ import annotations

import random
from dataclasses import dataclass

from glowpy.ir import first_fit, liveness
from glowpy.ir.program import ACTIVATION, Buffer, Program, align, align_down


@dataclass(eq=False)
class Member:
    buf: Buffer
    group: int
    lo: int  # range inside the group, 64-grid (after normalization lo >= 0)
    hi: int
    start: int  # first and last instruction needing the bytes
    end: int

    @property
    def size(self) -> int:
        return self.hi - self.lo


def _rel(s: Buffer) -> int:
    off, b = 0, s
    while b.base is not None:
        off += b.view_offset
        b = b.base
    return off


def members(prog: Program, iv: dict | None = None):
    """(groups: [[Member]], roots: [Buffer], shift per group, pairs: {(id in, id out): D})."""
    iv = liveness.intervals(prog) if iv is None else iv
    index: dict = {}
    groups, roots = [], []
    for s, (a, b) in iv.items():
        r = s.root
        if r.region != ACTIVATION:
            continue
        if id(r) not in index:
            index[id(r)] = len(groups)
            groups.append([])
            roots.append(r)
        rel = _rel(s)
        groups[index[id(r)]].append(Member(s, index[id(r)], align_down(rel), align(rel + s.nbytes), a, b))
    shifts = []
    for g in groups:
        lo = min(m.lo for m in g)
        for m in g:
            m.lo -= lo
            m.hi -= lo
        shifts.append(-lo)
    by_buf = {id(m.buf): m for g in groups for m in g}
    pairs = {}
    for i, sin, sout, d in prog.overlaps:
        if id(sin) in by_buf and id(sout) in by_buf:
            pairs[(id(by_buf[id(sin)]), id(by_buf[id(sout)]))] = -align(-d)
    return groups, roots, shifts, pairs


def _extent(g) -> int:
    return max(m.hi for m in g)


def _union(ranges) -> int:
    """Bytes covered by sorted (lo, hi) ranges."""
    total, cur_lo, cur_hi = 0, None, None
    for lo, hi in ranges:
        if cur_hi is None or lo > cur_hi:
            total += 0 if cur_hi is None else cur_hi - cur_lo
            cur_lo, cur_hi = lo, hi
        else:
            cur_hi = max(cur_hi, hi)
    return total + (0 if cur_hi is None else cur_hi - cur_lo)


def live_profile(groups, pairs, n_instr: int) -> list[int]:
    """Bytes that must be live at each instruction (see module docstring)."""
    prof = [0] * max(n_instr, 1)
    by_group: dict = {}
    for g in groups:
        for m in g:
            by_group.setdefault(m.group, []).append(m)
    # every group adds the union of its live members' ranges over each stretch of instructions
    # where that set does not change: a difference array over the stretches, not one event per
    # member per instruction (an unrolled sequence model's Concat of hundreds of step outputs,
    # each live until the end, made this a quarter of its compile)
    diff = [0] * (len(prof) + 1)
    for ms in by_group.values():
        spans = [(max(m.start, 0), min(m.end, n_instr - 1), m.lo, m.hi) for m in ms]
        spans = [sp for sp in spans if sp[0] <= sp[1]]
        if len(spans) == 1:
            a, b, lo, hi = spans[0]
            diff[a] += hi - lo
            diff[b + 1] -= hi - lo
            continue
        cuts = sorted({sp[0] for sp in spans} | {sp[1] + 1 for sp in spans})
        for a, b in zip(cuts, cuts[1:]):
            total = _union(sorted((lo, hi) for s0, s1, lo, hi in spans if s0 <= a <= s1))
            diff[a] += total
            diff[b] -= total
    run = 0
    for t in range(len(prof)):
        run += diff[t]
        prof[t] += run
    mem = {id(m): m for g in groups for m in g}
    for (a, b), d in pairs.items():
        mi, mo = mem[a], mem[b]
        for t in range(max(mi.start, mo.start), min(mi.end, mo.end) + 1):
            prof[t] -= max(0, min(mo.size + d, mi.size))
    return prof


def lower_bound(groups, pairs, n_instr: int) -> int:
    return max(live_profile(groups, pairs, n_instr), default=0)


SEARCH_WORK = 200 * 64  # group placements the seeded swap search may spend per plan


def place(groups, order, pairs, mirror: bool = False) -> list[int]:
    """First fit of the groups in `order` (first_fit.place)."""
    return first_fit.place(groups, order, pairs, [_extent(g) for g in groups], mirror)


def _size(groups, offsets) -> int:
    return max((o + _extent(g) for g, o in zip(groups, offsets)), default=0)


def strategies(groups, pairs, n_instr):
    """Named group orders to try."""
    idx = list(range(len(groups)))
    span = [(min(m.start for m in g), max(m.end for m in g)) for g in groups]
    ext = [_extent(g) for g in groups]
    prof = live_profile(groups, pairs, n_instr)
    peak = max(range(len(prof)), key=lambda t: prof[t]) if prof else 0
    at_peak = [any(m.start <= peak <= m.end for m in g) for g in groups]
    yield "largest-first", sorted(idx, key=lambda i: (-ext[i], span[i][0]))
    yield "longest-lifetime-first", sorted(idx, key=lambda i: (span[i][0] - span[i][1], -ext[i]))
    yield "largest-area-first", sorted(idx, key=lambda i: (-ext[i] * (span[i][1] - span[i][0] + 1), span[i][0]))
    yield "earliest-first", sorted(idx, key=lambda i: (span[i][0], -ext[i]))
    yield "peak-first", sorted(idx, key=lambda i: (not at_peak[i], -ext[i], span[i][0]))


def assign_offsets(groups, pairs, n_instr, reuse=True, iterations=200, seed=0):
    """(offsets, size, strategy name, bound)."""
    if not reuse:
        offsets, acc = [], 0
        for g in groups:
            offsets.append(acc)
            acc += _extent(g)
        return offsets, acc, "no-reuse", lower_bound(groups, pairs, n_instr)
    bound = lower_bound(groups, pairs, n_instr)
    best = None
    for name, order in strategies(groups, pairs, n_instr):
        for mirror in (False, True):
            offs = place(groups, order, pairs, mirror)
            size = _size(groups, offs)
            if best is None or size < best[1]:
                best = (offs, size, name + ("/top-down" if mirror else ""), order, mirror)
            if size <= bound:
                break
        if best[1] <= bound:
            break
    if best[1] > bound and len(groups) > 1:
        rng = random.Random(seed)  # seeded and counted, never timed: plans are reproducible
        order = list(best[3])
        # each swap costs a placement of every group: the search gets SEARCH_WORK group
        # placements (the full count up to 64 groups), so its time stays linear in the model
        for _ in range(min(iterations, max(8, SEARCH_WORK // len(groups)))):
            cand = list(order)
            i, j = rng.randrange(len(cand)), rng.randrange(len(cand))
            cand[i], cand[j] = cand[j], cand[i]
            offs = place(groups, cand, pairs, best[4])
            size = _size(groups, offs)
            if size <= best[1]:
                if size < best[1]:
                    best = (offs, size, best[2].split("+")[0] + "+search", cand, best[4])
                order = cand
                if size <= bound:
                    break
    return best[0], best[1], best[2], bound


def plan(prog: Program, reuse: bool = True, iterations: int = 200) -> Program:
    off = 0
    for c in prog.constants:
        c.offset, off = off, align(off + c.nbytes)
    const_size = off
    off = 0
    for p in prog.placeholders:
        p.offset, off = off, align(off + p.nbytes)
    mutable_size = off
    iv = liveness.intervals(prog)
    groups, roots, shifts, pairs = members(prog, iv)
    n = len(prog.instrs)
    offsets, size, strategy, bound = assign_offsets(groups, pairs, n, reuse, iterations)
    for r, o, sh in zip(roots, offsets, shifts):
        r.offset = o + sh
    prog.activations = roots
    prog.sizes = {"constant": const_size, "mutable": mutable_size, "activation": align(size)}
    prof = live_profile(groups, pairs, n)
    peak_at = max(range(len(prof)), key=lambda t: prof[t]) if n else 0
    prog.plan_info = {"lower_bound": bound, "strategy": strategy, "intervals": iv,
                      "groups": groups, "pairs": pairs, "profile": prof, "peak_instr": peak_at,
                      "reuse": reuse}
    return prog


def lifetimes(prog: Program) -> dict:
    """Activation storage -> (first, last) instruction whose bytes it needs (kept for tools)."""
    return liveness.intervals(prog)


TRANSFORM_GROWTH = 0.25  # a post-lowering transform may grow the activations this much at most


def build(graph, optimize: bool = True, reuse: bool = True, transform=None,
          memory_first: bool = True) -> Program:
    """Lowers and plans `graph`; with `optimize`, with lowering's zero-copy and in-place choices,
    the backend's post-lowering `transform` (lower.lower) and the schedule search (which
    leaves the chosen order in graph.nodes). A transform that trades memory for speed (scratch
    buffers) is kept only if the activations grow by TRANSFORM_GROWTH at most, or if a forced
    kernel variant asked for it (Program.transform_forced).

    `memory_first` orders the two costs of an in-place kernel that is slower than the ordinary
    one (ConvPointwiseInPlace: the same multiply-adds plus a scratch round trip per tile of a
    few positions, which re-streams the weights; integer kernels overlapping their input,
    inplace.INT_STREAMING_OPS): True (microcontrollers, -activation-memory=
    min, and this function's default, docs/memory.md) minimizes bytes first and takes it back
    only where it saves none (_relax); False (hosts) minimizes time first, so the slow kernel
    is never taken, and bytes among equally fast plans (in-place elementwise outputs,
    accumulated residuals, float streaming overlaps cost no time and stay). Measured on Zen 3 (AVX2,
    three 1x1 + Relu layers, in place / out of place): 172 channels x 125 positions 308 / 234
    us, 64 x 3136 875 / 822 us, 256 x 196 917 / 843 us; DS-CNN at 172 channels 0.69 / 0.39 ms."""
    slow = None if memory_first else ALL_NODES
    if optimize and transform is not None:
        prog = _build(graph, True, reuse, transform, relax=False, slow=slow)
        if prog.transformed:
            order = list(graph.nodes)  # the search leaves its order in the graph
            base = _build(graph, True, reuse, None, relax=False, slow=slow)
            if prog.transform_forced or \
                    prog.sizes["activation"] <= base.sizes["activation"] * (1 + TRANSFORM_GROWTH):
                graph.nodes = order
            else:
                prog, transform = base, None
        if not memory_first:
            return prog
        # the winner alone is relaxed (each relaxation attempt is a full plan)
        name = prog.plan_info["schedule"]
        prog = _relax(graph, prog, reuse, transform)
        prog.plan_info["schedule"] = name
        return prog
    return _build(graph, optimize, reuse, None, relax=memory_first, slow=slow)


class _All:
    """Every node (lower.lower's `slow_in_place` on speed-first targets)."""

    def __contains__(self, name) -> bool:
        return True


ALL_NODES = _All()


def estimate(graph, reuse: bool = True, memory_first: bool = True) -> Program:
    """A quick plan of the graph in its own node order (no schedule search, no relaxation, a
    single placement pass): what patch-based execution compares its candidates by. The
    MobileNetV2 of benchmarks/build_models.py in 64 bands has ~4,000 nodes, and a full build
    per candidate made -max-activations take 317 s."""
    from glowpy.ir.lower import lower
    slow = None if memory_first else ALL_NODES
    return plan(lower(graph, optimize=True, reuse=reuse, slow_in_place=slow), reuse, iterations=0)


def _build(graph, optimize: bool, reuse: bool, transform, relax: bool = True,
           slow=None) -> Program:
    from glowpy.ir import schedule
    from glowpy.ir.lower import lower
    if not optimize:
        prog = plan(lower(graph, optimize=False, reuse=reuse), reuse)
        prog.plan_info["schedule"] = "model"
        return prog

    def evaluate(g):  # quick plans while comparing orders; the winner is planned again
        p = plan(lower(g, optimize=True, reuse=reuse, slow_in_place=slow, transform=transform),
                 reuse, iterations=0)
        return p.sizes["activation"], p

    prog, name = schedule.search(graph, evaluate)
    prog = plan(prog, reuse)
    if relax:
        prog = _relax(graph, prog, reuse, transform)
    prog.plan_info["schedule"] = name
    return prog


def _relax(graph, prog: Program, reuse: bool, transform=None) -> Program:
    """Gives back speed where it costs no memory: an in-place 1x1 convolution is slower than
    the ordinary kernel, and so is an integer kernel overlapping its input (inplace.
    INT_STREAMING_OPS), so each is kept only where the region would grow without it. Candidates
    are the instructions whose live bytes, with input and output apart, stay within the
    region, most headroom first; all are reverted at once if the plan allows, else the longest
    prefix that fits, found by bisection. A plan costs as much as a lowering, so the attempts
    are bounded by log2(candidates) + 1: trying the ~120 candidates of DenseNet-121 one at a
    time made 124 plans, 1,046 of 1,169 s of its compile."""
    from glowpy.ir.inplace import slow_overlap
    from glowpy.ir.lower import lower
    size = prog.sizes["activation"]
    prof = prog.plan_info["profile"]
    cands = []
    for i, ins in enumerate(prog.instrs):
        if ins.op != "ConvPointwiseInPlace":
            continue
        x, y, scratch = ins.inputs[0], ins.outputs[0], ins.outputs[1]
        need = prof[i] - align(scratch.nbytes) + min(align(x.nbytes), align(y.nbytes))
        if need <= size:
            cands.append((need, i, ins.node.name))
    for i, sin, sout, d in prog.overlaps:  # integer streaming overlaps (inplace.slow_overlap)
        if slow_overlap(prog.instrs[i]):
            granted = max(0, min(align(sout.nbytes) - align(-d), align(sin.nbytes)))
            if prof[i] + granted <= size:
                cands.append((prof[i] + granted, i, prog.instrs[i].node.name))
    if not cands:
        return prog
    names = [name for _, _, name in sorted(cands)]

    def attempt(k):
        p = plan(lower(graph, optimize=True, reuse=reuse, slow_in_place=set(names[:k]),
                       transform=transform), reuse, iterations=50)
        return p if p.sizes["activation"] <= size else None

    best = attempt(len(names))
    if best is not None:
        return best
    lo, hi, best = 0, len(names), prog  # attempt(lo) fits (0: the plan we have), hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        p = attempt(mid)
        if p is not None:
            lo, best = mid, p
        else:
            hi = mid
    return best
