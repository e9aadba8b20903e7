"""Liveness of activation storage: which instructions touch each storage buffer, and the
intervals the planner must keep each one's bytes for.

A storage buffer is a Buffer that is not a same-data view (see program.Buffer.relation). Its own
interval runs from its first to its last use (uses of its views count). Then data that flows
through placements stretches it: a Concat operand written into its slice ("slice") keeps its
bytes until the Concat output's last use; a Split/Slice part read in place ("part") holds its
bytes from the input's first write."""
from __future__ import annotations

from glowpy.ir.program import ACTIVATION, Buffer, Program


def uses(prog: Program) -> dict:
    """storage Buffer -> (first, last) instruction index, for activation-region storages."""
    live: dict = {}
    for i, ins in enumerate(prog.instrs):
        for b in list(ins.inputs) + list(ins.outputs):
            if b is None or b.root.region != ACTIVATION:
                continue
            s = b.storage
            first, last = live.get(s, (i, i))
            live[s] = (min(first, i), max(last, i))
    return live


def parent_storage(s: Buffer) -> Buffer | None:
    return s.base.storage if s.base is not None else None


def intervals(prog: Program, own: dict | None = None) -> dict:
    """storage Buffer -> (start, end): when its bytes must be kept, after placements. Only
    storages some instruction touches are listed (a Concat output read by nobody but through
    its slices holds no bytes of its own)."""
    own = uses(prog) if own is None else own
    ends: dict = {}
    starts: dict = {}

    def end(s):
        if s not in ends:
            e = own[s][1] if s in own else -1
            p = parent_storage(s)
            if p is not None and s.relation == "slice" and p.root.region == ACTIVATION:
                e = max(e, end(p))
            ends[s] = e
        return ends[s]

    def start(s):
        if s not in starts:
            st = own[s][0] if s in own else 1 << 62
            p = parent_storage(s)
            if p is not None and s.relation == "part" and p.root.region == ACTIVATION:
                st = min(st, start(p))
            starts[s] = st
        return starts[s]

    return {s: (start(s), end(s)) for s in own}
