"""LSTM, GRU and RNN become, per direction, one Gemm computing the input projections of every
time step at once ([seq*batch, input] x W^T + biases: the bulk of the arithmetic, in the
register-blocked matrix kernel) and a RecurrentCell that runs the recurrence over them (the
hidden-state product and the fused gates, step after step). Direction slices of W, R, B and
the initial states are Gather/Slice nodes (folded when they are initializers); the outputs are
re-assembled with views, Concat and, for layout 1, Transpose. The projections are ordinary
values, so the memory planner places them like any other activation.

When Y is read only through Gathers of time steps (a classifier's `output[-1]`) and the final
states are not read, each direction runs only the steps up to the last one read: forward from
the first step to the latest read one, reverse from the last step down to the earliest read one
(a 2-layer biLSTM classifier's second reverse direction: one step instead of 64, its
projections one time row; benchmarks/zoo lstm_classifier on an AVX2 Zen 3: 4.3 -> 3.2 ms,
onnxruntime 5.0)."""
from __future__ import annotations

import numpy as np

from glowpy.ir.graph import Graph
from glowpy.ir.ops.recurrent import spec

RECURRENT_OPS = ("LSTM", "GRU", "RNN")


def lower_recurrent(graph: Graph) -> Graph:
    kept = graph.nodes
    used = set(graph.outputs) | {v for n in kept for v in n.inputs if v is not None}
    users = graph.consumers()
    nodes = []
    for n in kept:
        if n.op not in RECURRENT_OPS:
            nodes.append(n)
            continue
        graph.nodes = []  # graph.add appends the replacement here
        s = spec(n)
        _lower(graph, n, s, n.outputs[0] in used, _window(graph, n, s, used, users))
        nodes += graph.nodes
    graph.nodes = nodes
    return graph


def _window(graph: Graph, n, s, used, users):
    """(first, last + 1, the views between Y and the Gathers, the Gathers) of the time steps
    that Y's readers take, when they are Gathers along time of constant steps, through
    Transposes and Reshapes that keep time the first axis (torch's stacked export: Transpose
    (0, 2, 1, 3), Reshape (0, 0, -1)), and nothing reads the final states or Y itself; else
    None."""
    v = n.outputs[0]
    if s.layout or s.lens is not None or any(o in used for o in n.outputs[1:]):
        return None
    views = []
    while len(users.get(v, ())) == 1 and v not in graph.outputs:
        u = users[v][0]
        out = u.outputs[0]
        if not (u.op == "Transpose" and u.attrs["perm"] and u.attrs["perm"][0] == 0 or
                u.op == "Reshape" and out.shape[:1] == (s.seq,)) or u.inputs[0] is not v:
            break
        views.append(u)
        v = out
    if v in graph.outputs or not users.get(v):
        return None
    steps = []
    for u in users[v]:
        if u.op != "Gather" or u.inputs[0] is not v or u.attrs["axis"] not in (0, -len(v.shape)) \
                or u.inputs[1].const is None:
            return None
        idx = np.asarray(u.inputs[1].const).reshape(-1)
        if idx.size == 0 or (idx < -s.seq).any() or (idx >= s.seq).any():
            return None  # (Gather's own check names the bad index)
        steps += [int(i) % s.seq for i in idx]
    lo, hi = min(steps), max(steps) + 1
    return None if (lo, hi) == (0, s.seq) else (lo, hi, views, users[v])


def _lower(graph: Graph, n, s, y_used: bool, window):
    """n's replacement; without readers of Y the cells keep only the state (their Y output
    shrinks to one step that is never written: seq x batch x H floats less to plan). With a
    window (_window), each direction's steps end at the window's far edge, and the Gathers read
    a Y of the window's steps."""
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
    ys, hs, cs = [], [], []
    for d in range(s.ndir):
        reverse = s.reverse(n.attrs["direction"], d)
        t0, t1 = (0, s.seq) if window is None else (window[0], s.seq) if reverse else \
            (0, window[1])
        xd = x if (t0, t1) == (0, s.seq) else sl(x, t0, t1)
        x2 = add("Reshape", [xd, ints([(t1 - t0) * s.batch, s.isz])])[0]
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
        proj = add("Reshape", [proj, ints([t1 - t0, s.batch, gh])])[0]
        rt = add("Transpose", [take(r, d)], {"perm": [1, 0]})[0]
        axis = 1 if s.layout else 0
        attrs = {"kind": s.kind, "acts": s.acts[d], "clip": s.clip, "lens": s.lens,
                 "reverse": int(reverse), "lbr": s.lbr,
                 "input_forget": s.input_forget, "y": int(y_used)}
        outs = add("RecurrentCell", [proj, rt, take(h0, d, axis), take(c0, d, axis),
                                     take(p, d), rbh], attrs, what=f"cell{d}")
        if y_used:
            yd = outs[0]
            if window is not None and (window[0] - t0, window[1] - t0) != (0, t1 - t0):
                yd = sl(yd, window[0] - t0, window[1] - t0)
            steps = s.seq if window is None else window[1] - window[0]
            ys.append(add("Reshape", [yd, ints([steps, 1, s.batch, hid])])[0])
        hs.append(add("Reshape", [outs[1], ints([1, s.batch, hid])])[0])
        if s.kind == "LSTM":
            cs.append(add("Reshape", [outs[2], ints([1, s.batch, hid])])[0])
    results = [_join(add, ys, 1, s.layout, [2, 0, 1, 3]) if ys else None,
               _join(add, hs, 0, s.layout, [1, 0, 2])]
    if cs:
        results.append(_join(add, cs, 0, s.layout, [1, 0, 2]))
    if window is not None:
        _read_window(graph, results[0], s.seq, *window)
        results[0] = None
    for old, new in zip(n.outputs, results):
        if new is not None:
            _rebind(new, old)


def _read_window(graph, y, seq, lo, hi, views, gathers):
    """The views and Gathers after Y read `y`, Y's steps lo..hi-1: the views' outputs shrink
    to the window's steps along time, the Gathers take their steps less lo."""
    for u in views:
        out = u.outputs[0]
        out.shape = (hi - lo,) + out.shape[1:]
        u.inputs[0] = y
        if u.op == "Reshape":
            u.inputs[1] = graph.constant(np.asarray(out.shape, np.int64), f"{u.name}_shape")
        y = out
    for u in gathers:
        steps = np.asarray(u.inputs[1].const).astype(np.int64) % seq - lo
        u.inputs[:2] = [y, graph.constant(steps, f"{u.name}_steps")]


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
