"""LSTM, GRU and RNN become, per direction, one Gemm computing the input projections of every
time step at once ([seq*batch, input] x W^T + biases: the bulk of the arithmetic, in the
register-blocked matrix kernel) and a RecurrentCell that runs the recurrence over them (the
hidden-state product and the fused gates, step after step). Direction slices of W, R, B and
the initial states are Gather/Slice nodes (folded when they are initializers); the outputs are
re-assembled with views, Concat and, for layout 1, Transpose. The projections are ordinary
values, so the memory planner places them like any other activation."""
from __future__ import annotations

import numpy as np

from glowpy.ir.graph import Graph
from glowpy.ir.ops.recurrent import spec

RECURRENT_OPS = ("LSTM", "GRU", "RNN")


def lower_recurrent(graph: Graph) -> Graph:
    kept = graph.nodes
    used = set(graph.outputs) | {v for n in kept for v in n.inputs if v is not None}
    nodes = []
    for n in kept:
        if n.op not in RECURRENT_OPS:
            nodes.append(n)
            continue
        graph.nodes = []  # graph.add appends the replacement here
        _lower(graph, n, n.outputs[0] in used)
        nodes += graph.nodes
    graph.nodes = nodes
    return graph


def _lower(graph: Graph, n, y_used: bool):
    """n's replacement; without readers of Y the cells keep only the state (their Y output
    shrinks to one step that is never written: seq x batch x H floats less to plan)."""
    s = spec(n)
    x, w, r, b, _, h0, c0, p = (list(n.inputs) + [None] * 8)[:8]
    hid, gh = s.hidden, s.gates * s.hidden

    def add(op, ins, attrs=None, what="", num_outputs=None):
        return graph.add(op, ins, attrs, name=f"{n.name}_{what or op.lower()}",
                         num_outputs=num_outputs)

    def ints(v):
        return graph.constant(np.asarray(v, np.int64), f"{n.name}_i")

    def sl(v, lo, hi):
        return add("Slice", [v, ints([lo]), ints([hi])])[0]

    def take(v, d, axis=0):
        return None if v is None else add("Gather", [v, ints(d)], {"axis": axis})[0]

    if s.layout:  # batch-major: the projections and the cell run time-major
        x = add("Transpose", [x], {"perm": [1, 0, 2]})[0]
    x2 = add("Reshape", [x, ints([s.seq * s.batch, s.isz])])[0]
    ys, hs, cs = [], [], []
    for d in range(s.ndir):
        rbh, gemm_in = None, [x2, take(w, d)]
        if b is not None:
            bd = take(b, d)
            wb, rb = sl(bd, 0, gh), sl(bd, gh, 2 * gh)
            if s.kind == "GRU" and s.lbr:  # the h gate's Rb stays inside r * (h Rh^T + Rbh)
                rbh = sl(rb, 2 * hid, 3 * hid)
                rb = add("Concat", [sl(rb, 0, 2 * hid), graph.constant(np.zeros(hid, np.float32))],
                         {"axis": 0})[0]
            gemm_in.append(add("Add", [wb, rb], what="bias")[0])
        proj = add("Gemm", gemm_in, {"transB": 1}, what="projection")[0]
        proj = add("Reshape", [proj, ints([s.seq, s.batch, gh])])[0]
        rt = add("Transpose", [take(r, d)], {"perm": [1, 0]})[0]
        axis = 1 if s.layout else 0
        attrs = {"kind": s.kind, "acts": s.acts[d], "clip": s.clip, "lens": s.lens,
                 "reverse": int(s.reverse(n.attrs["direction"], d)), "lbr": s.lbr,
                 "input_forget": s.input_forget, "y": int(y_used)}
        outs = add("RecurrentCell", [proj, rt, take(h0, d, axis), take(c0, d, axis),
                                     take(p, d), rbh], attrs, what=f"cell{d}")
        if y_used:
            ys.append(add("Reshape", [outs[0], ints([s.seq, 1, s.batch, hid])])[0])
        hs.append(add("Reshape", [outs[1], ints([1, s.batch, hid])])[0])
        if s.kind == "LSTM":
            cs.append(add("Reshape", [outs[2], ints([1, s.batch, hid])])[0])
    results = [_join(add, ys, 1, s.layout, [2, 0, 1, 3]) if ys else None,
               _join(add, hs, 0, s.layout, [1, 0, 2])]
    if cs:
        results.append(_join(add, cs, 0, s.layout, [1, 0, 2]))
    for old, new in zip(n.outputs, results):
        if new is not None:
            _rebind(new, old)


def _join(add, parts, axis, layout, perm):
    v = parts[0] if len(parts) == 1 else add("Concat", parts, {"axis": axis})[0]
    if layout:
        v = add("Transpose", [v], {"perm": perm})[0]
    return v


def _rebind(new, old):
    """The node that produced `new` writes the layer's original output Value instead (graph
    outputs keep their Values: their names are the bundle's placeholders)."""
    prod = new.producer
    prod.outputs[prod.outputs.index(new)] = old
    old.producer = prod
