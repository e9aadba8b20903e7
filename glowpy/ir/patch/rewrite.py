"""Patch-based execution of a graph's first stage: the rewrite.

A *stage* is a prefix of the node order whose only value used after it is the *cut* (a 4-D
NCHW tensor, batch 1) and whose nodes are all streamable (rows.py). The rewrite computes the
stage band by band: band k of the cut is rows [e(k-1), e(k)); going backwards, every node of
the stage computes in band k the rows its consumers need that it has not computed yet
(rows.needs), so every row of every intermediate is computed exactly once: no recomputation.
A consumer whose input rows reach back into an earlier band (the halo of a 3x3 window) reads
them through a Slice of the earlier piece joined to the new one by a Concat; the planner frees
each piece once the last band that reads it ran. Only the pieces of about two bands are live
at any time, plus the cut, which a Concat of its bands assembles.

Why not MCUNetV2's overlapping patches: those recompute the halos, and through eight layers
of 3x3 windows with strides 2 the halo of a row band of VWW's 12x12 cut is 19 input rows per
band: 75% more multiply-adds for 4 bands. Here the halo costs a copy of its rows instead
(on the Cortex-M7 a byte copied costs about a quarter of a multiply-add's instructions).

The band nodes are ordinary nodes (the planner, the schedule search and every kernel see
Conv over a [1, C, rows, W] tensor); the result is bit-exact for integer graphs and equal up
to the kernels' summation order for float ones."""
from __future__ import annotations

import numpy as np

from glowpy.ir import epilogue
from glowpy.ir.graph import Graph, Node, Value
from glowpy.ir.macs import node_macs
from glowpy.ir.patch import rows


class Stage:
    """The analysed prefix nodes[:end] of a graph cut at value `cut`: each value's row axis,
    and for `bands` the rows each node computes in each band."""

    def __init__(self, graph: Graph, end: int, cut: Value):
        self.graph, self.end, self.cut = graph, end, cut
        self.nodes = graph.nodes[:end]
        self.axis: dict = {cut: 2}

    @staticmethod
    def find(graph: Graph, end: int) -> "Stage | None":
        """The stage nodes[:end] if it has a single cut and streams; None otherwise."""
        nodes = graph.nodes[:end]
        inside = {v for n in nodes for v in n.outputs}
        later = {v for n in graph.nodes[end:] for v in n.inputs if v is not None}
        frontier = [v for v in inside if v in later or v in graph.outputs]
        if len(frontier) != 1:
            return None
        cut = frontier[0]
        if len(cut.shape) != 4 or cut.shape[0] != 1 or cut.shape[2] < 2:
            return None
        st = Stage(graph, end, cut)
        return st if st._assign_axes() and st.sources() and st.height() >= 2 else None

    def _assign_axes(self) -> bool:
        """Row axis of every value of the stage, backwards from the cut; False when a node does
        not stream or a value would be cut along two axes."""
        inputs = set(self.graph.inputs)
        for n in reversed(self.nodes):
            out = n.outputs[0]
            if out not in self.axis:
                return False  # computed for nothing the cut needs (or several outputs)
            ax = self.axis[out]
            probe = rows.needs(n, ax, 0, out.shape[ax])
            if probe is None:
                return False
            for v, need in zip(n.inputs, probe):
                if v is None or v.is_const or need.axis is None:
                    if v is not None and not v.is_const and (v.producer in self.nodes or v in inputs):
                        return False  # a stage value read whole: not streamable
                    continue
                if v.producer not in self.nodes and v not in inputs:
                    return False
                if self.axis.setdefault(v, need.axis) != need.axis:
                    return False
        return True

    def sources(self) -> list:
        """The graph inputs the stage reads by rows."""
        return [v for v in self.graph.inputs if v in self.axis]

    def height(self) -> int:
        """Rows of the tallest input: the most bands the stage can run in."""
        return max(v.shape[self.axis[v]] for v in self.sources())

    def bands(self, n_bands: int) -> dict:
        """{value: [rows computed up to, after band k] for k in 0..n_bands-1}: band k reads
        the inputs' rows up to (k + 1) / n_bands of their height, and every node computes the
        rows it can from what its inputs have computed (a line-buffer pipeline driven by the
        input: the high-resolution first layers, where the bytes are, advance by a few rows
        per band; the cut by a row every few bands)."""
        upto = {v: [round((k + 1) * v.shape[self.axis[v]] / n_bands) for k in range(n_bands)]
                for v in self.sources()}
        for n in self.nodes:
            out = n.outputs[0]
            ax, h = self.axis[out], out.shape[self.axis[out]]
            ends, b = [], 0
            for k in range(n_bands):
                while b < h and self._ready(n, ax, b + 1, upto, k):
                    b += 1
                ends.append(b)
            upto[out] = ends
        if upto[self.cut][-1] != self.cut.shape[2]:
            raise AssertionError(f"the bands leave rows of {self.cut.name} uncomputed")
        return upto

    def _ready(self, n: Node, ax: int, b: int, upto: dict, k: int) -> bool:
        """Can n compute output rows up to b once band k of its inputs is computed?"""
        for v, need in zip(n.inputs, rows.needs(n, ax, 0, b)):
            if need.axis is not None and v is not None and not v.is_const and \
                    need.hi > upto[v][k]:
                return False
        return True


class _Pieces:
    """The bands of one value computed so far: [(first row, end row, piece value)]."""

    def __init__(self, graph: Graph, value: Value, axis: int, source: bool):
        self.graph, self.value, self.axis = graph, value, axis
        self.parts: list = [(0, value.shape[axis], value)] if source else []

    def keep_from(self, first: int | None, name: str):
        """Only rows from `first` on are read again (None: no row): drop the pieces below it
        and cut the one it falls in to its needed rows (the halo), so that the piece itself
        dies at its last reader in this band and only the halo rows live on to the next."""
        if self.value in self.graph.outputs:
            return
        if first is None:
            self.parts = []
            return
        parts = []
        for s, e, v in self.parts:
            if e <= first:
                continue
            if s < first:
                v = self.rows(first, e, name)
                s = first
            parts.append((s, e, v))
        self.parts = parts

    def rows(self, lo: int, hi: int, name: str) -> Value:
        """Rows [lo, hi): a piece itself, or Slices of pieces joined by a Concat."""
        got = []
        for s, e, v in self.parts:
            a, b = max(s, lo), min(e, hi)
            if a >= b:
                continue
            if (a, b) == (s, e):
                got.append(v)
            else:
                c = self.graph.constant
                got.append(self.graph.add("Slice", [
                    v, c(np.array([a - s], np.int64), "starts"), c(np.array([b - s], np.int64), "ends"),
                    c(np.array([self.axis], np.int64), "axes")], name=f"{name}_rows{a}_{b}")[0])
        if sum(v.shape[self.axis] for v in got) != hi - lo:
            raise AssertionError(f"rows {lo}..{hi} of {self.value.name} not computed")
        if len(got) == 1:
            return got[0]
        return self.graph.add("Concat", got, {"axis": self.axis}, name=f"{name}_halo")[0]


def _add_band_node(g: Graph, n: Node, ins: list, attrs: dict, name: str, out_name: str) -> Value:
    """The band's node; a fused epilogue's operands follow the base inputs as in the node
    (epilogue.py: the host's own op is inferred on its base inputs alone)."""
    base = epilogue.base_count(n)
    own = {k: v for k, v in attrs.items() if k not in ("_epilogue", "_base_inputs")}
    own["_band_of"] = n.name  # the bands of one layer share its packed weights (pack_constant)
    out = g.add(n.op, ins[:base], own, name=name, out_names=[out_name])[0]
    if len(ins) > base or "_epilogue" in attrs:
        node = out.producer
        node.inputs = list(ins)
        node.attrs.update({k: attrs[k] for k in ("_epilogue", "_base_inputs") if k in attrs})
    return out


def _next_read(stage: Stage, upto: dict, done: dict, v: Value, k: int) -> int | None:
    """The first row of `v` any band after k reads (None: none reads it again)."""
    first = None
    for n in stage.nodes:
        if v not in n.inputs:
            continue
        out = n.outputs[0]
        a = done[n]
        for b in upto[out][k + 1:]:
            if b > a:
                for x, need in zip(n.inputs, rows.needs(n, stage.axis[out], a, b)):
                    if x is v and need.axis is not None:
                        first = need.lo if first is None else min(first, need.lo)
                break
    return first


def rewrite(stage: Stage, n_bands: int) -> tuple[Graph, dict]:
    """A new graph computing the stage band by band (the input graph is left as it was), and
    what it did: {"bands", "nodes", "copied_bytes"}."""
    g0 = stage.graph
    upto = stage.bands(n_bands)
    g = Graph(g0.name)
    g.inputs, g.outputs = list(g0.inputs), list(g0.outputs)
    g._names = set(g0._names)
    g.fold, g.max_tensor_bytes = False, g0.max_tensor_bytes
    for attr in ("quant_rounding", "quant_profile", "quant_options"):
        if hasattr(g0, attr):
            setattr(g, attr, getattr(g0, attr))
    pieces = {v: _Pieces(g, v, stage.axis[v], source=True)
              for v in g0.inputs if v in stage.axis}
    for n in stage.nodes:
        pieces[n.outputs[0]] = _Pieces(g, n.outputs[0], stage.axis[n.outputs[0]], False)
    done = {n: 0 for n in stage.nodes}
    last_reader = {}
    for n in stage.nodes:
        for v in n.inputs:
            if v in pieces:
                last_reader[v] = n
    for k in range(n_bands):
        for n in stage.nodes:
            out = n.outputs[0]
            ax, a, b = stage.axis[out], done[n], upto[out][k]
            if b > a:
                ins = []
                for v, need in zip(n.inputs, rows.needs(n, ax, a, b)):
                    if v is None or v.is_const or need.axis is None:
                        ins.append(v)
                    else:
                        ins.append(pieces[v].rows(need.lo, need.hi, f"{n.name}_b{k}"))
                piece = _add_band_node(g, n, ins, rows.band_attrs(n, a, b), f"{n.name}_b{k}",
                                       f"{out.name}_r{a}_{b}")
                pieces[out].parts.append((a, b, piece))
                done[n] = b
            for v in set(n.inputs):
                if v in pieces and last_reader[v] is n and v not in stage.graph.inputs:
                    pieces[v].keep_from(_next_read(stage, upto, done, v, k), f"{v.name}_b{k}")
    cut = pieces[stage.cut].rows(0, stage.cut.shape[2], f"{stage.cut.name}_cut")
    band_nodes = list(g.nodes)
    # the cut keeps its name: it may be a graph output, and dumps and reports name it
    g._names.discard(cut.name)
    cut.name = stage.cut.name
    for n in g0.nodes[stage.end:]:
        copy = Node(n.op, n.name, [cut if v is stage.cut else v for v in n.inputs], n.outputs,
                    dict(n.attrs))
        g.nodes.append(copy)
    g.outputs = [cut if v is stage.cut else v for v in g.outputs]
    copied = sum(m.outputs[0].nbytes for m in band_nodes if m.op in ("Slice", "Concat"))
    # multiply-adds the bands do past the untiled stage's (none: every row is computed once)
    extra = sum(node_macs(m) for m in band_nodes) - sum(node_macs(m) for m in stage.nodes)
    return g, {"bands": n_bands, "nodes": len(stage.nodes), "copied_bytes": int(copied),
               "recomputed_macs": int(extra)}
