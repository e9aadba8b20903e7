"""Lowering: the optimized graph becomes an instruction list over buffers (program.py: the
regions, and what a Buffer's `base` and `relation` mean). Views get no instruction at all.

When a view chain links two placeholders (an output that is a reshaped input, or the same tensor
returned twice), a Copy instruction keeps them apart. With `optimize`, Concat operands are
written into their slices (a Copy only for operands that cannot be), Split/Slice outputs that are
contiguous become parts of their input; with `reuse` as well, elementwise ops, 1x1 convolutions
and accumulating convolutions write over an input that dies there, and window ops that stream
plane by plane (depthwise Conv, pooling) are allowed to overlap their input (`Program.overlaps`,
used by the planner)."""
from __future__ import annotations

import numpy as np

from glowpy.ir import epilogue
from glowpy.ir.graph import Graph, Node, Value
from glowpy.ir.program import ACTIVATION, CONSTANT, MUTABLE, Buffer, Instr, Program


def _view_classes(graph: Graph, placeholder_values: set) -> dict:
    """Union-find over values joined by view nodes, refusing merges that would put two
    placeholders in one storage. Returns {value: class root value}; view nodes left unmerged
    become copies."""
    parent: dict = {}

    def find(v):
        while parent.get(v, v) is not v:
            v = parent[v]
        return v

    has_ph: dict = {v: True for v in placeholder_values}
    for n in graph.nodes:
        if "view" not in n.opdef.traits or n.inputs[0].is_const:
            continue
        a, b = find(n.inputs[0]), find(n.outputs[0])
        if has_ph.get(a) and has_ph.get(b):
            n.attrs["_copy"] = True
            continue
        parent[b] = a
        has_ph[a] = has_ph.get(a) or has_ph.get(b)
        n.attrs.pop("_copy", None)
    return {v: find(v) for n in graph.nodes for v in n.outputs} | {v: find(v) for v in graph.inputs}


# inputs the op's kernel never reads (it takes them from the node at compile time): no bytes
# in the constant region. A patch-based VWW has 283 Slices, whose starts/ends/axes took 18 KB
# of flash, most of it the 64-byte alignment of each.
SHAPE_OPERANDS = {"Slice": (1, 2, 3, 4)}


def _operands(n: Node) -> list:
    """n's inputs as its instruction sees them (None for SHAPE_OPERANDS)."""
    skip = SHAPE_OPERANDS.get(n.op, ())
    return [None if i in skip else v for i, v in enumerate(n.inputs)]


def _is_view_node(n: Node) -> bool:
    return "view" in n.opdef.traits and not n.attrs.get("_copy") and not n.inputs[0].is_const


class _Lowering:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.inputs = [Buffer(v.name, v.dtype, v.shape, MUTABLE, value=v) for v in graph.inputs]
        self.buf: dict = dict(zip(graph.inputs, self.inputs))
        self.outputs, self.out_of, seen = [], {}, set()
        for v in graph.outputs:
            # an output that is an input, a constant or listed twice gets a placeholder of its own
            if v in seen or v in self.buf or v.is_const or v.producer is None:
                b = Buffer(v.name + ("_out" if v in seen or v in self.buf else ""), v.dtype, v.shape,
                           MUTABLE, value=v)
                self.out_of.setdefault(v, []).append(b)
            else:
                b = Buffer(v.name, v.dtype, v.shape, MUTABLE, value=v)
                self.buf[v] = b
            self.outputs.append(b)
            seen.add(v)
        self.classes = _view_classes(graph, set(graph.inputs) | set(self.buf))
        self.storage: dict = {}
        for v, b in self.buf.items():
            self.storage.setdefault(self.classes.get(v, v), b)
        self.constants: dict = {}
        self.skip: set = set()  # nodes that need no instruction (placed Concat/Split/Slice)
        self.copies: dict = {}  # node -> [(src Buffer, dst Buffer)] replacing its instruction
        self.containers: set = set()  # ids of storages that hold Concat slices

    def buffer_of(self, v: Value) -> Buffer:
        if v in self.buf:
            return self.buf[v]
        if v.is_const:
            if v not in self.constants:
                self.constants[v] = Buffer(v.name, v.dtype, v.shape, CONSTANT, data=v.const, value=v)
            return self.constants[v]
        root = self.classes.get(v, v)
        if root not in self.storage:
            self.storage[root] = Buffer(root.name, root.dtype, root.shape, ACTIVATION, value=root)
        s = self.storage[root]
        b = s if s.value is v else Buffer(v.name, v.dtype, v.shape, s.region, base=s, value=v)
        self.buf[v] = b
        return b

    # -- zero-copy Concat / Split / Slice ---------------------------------------------------
    @staticmethod
    def _movable(b: Buffer) -> Buffer | None:
        """The storage behind b if it may be placed inside another buffer: a fresh activation
        buffer that b covers entirely (b is it or a same-size view of it)."""
        s = b.storage
        if s.region != ACTIVATION or s.base is not None or s.nbytes != b.nbytes:
            return None
        return s

    def place_concat(self, n: Node):
        y = n.outputs[0]
        ax = n.attrs["axis"]
        if int(np.prod(y.shape[:ax])) != 1:
            return  # the slices are strided: the Concat kernel copies
        ybuf = self.buffer_of(y)
        ancestors, b = set(), ybuf
        while b is not None:
            ancestors.add(id(b.storage))
            b = b.storage.base
        row = int(np.prod(y.shape[ax + 1:])) * y.dtype.itemsize
        pos, used, copies = 0, set(), []
        for x in n.inputs:
            if x is None:
                continue
            off = pos * row
            pos += x.shape[ax]
            xb = self.buffer_of(x)
            s = None if x.is_const else self._movable(xb)
            if s is not None and id(s) not in used and id(s) not in ancestors:
                s.base, s.view_offset, s.relation = ybuf, off, "slice"
                used.add(id(s))
                continue
            dst = Buffer(f"{y.name}_slot{len(copies)}", x.dtype, x.shape, ybuf.region, base=ybuf,
                         value=None, view_offset=off, relation="slice")
            copies.append((xb, dst))
        self.skip.add(n)
        self.copies[n] = copies
        self.containers.add(id(ybuf.storage))

    def place_parts(self, n: Node):
        """Split (leading dims 1) and contiguous Slice outputs become parts of the input."""
        x = n.inputs[0]
        if x.is_const:
            return
        xb = self.buffer_of(x)
        if id(xb.storage) in self.containers:
            return  # parts of slices: keep liveness simple, copy
        item = x.dtype.itemsize
        if n.op == "Split":
            ax, sizes = n.opdef.sizes(n)
            if int(np.prod(x.shape[:ax])) != 1:
                return
            row = int(np.prod(x.shape[ax + 1:])) * item
            offs = list(np.cumsum([0] + sizes[:-1]) * row)
        else:
            region = n.opdef.region(n)
            off = _contiguous_slice(x.shape, region)
            if off is None:
                return
            offs = [off * item]
        copies = []
        for y, off in zip(n.outputs, offs):
            yb = self.buffer_of(y)
            s = self._movable(yb)
            if s is not None and s is not xb.storage and y not in self.graph.outputs:
                s.base, s.view_offset, s.relation = xb, int(off), "part"
                continue
            src = Buffer(f"{x.name}_part{len(copies)}", y.dtype, y.shape, xb.region, base=xb,
                         view_offset=int(off), relation="part")
            copies.append((src, yb))
        self.skip.add(n)
        self.copies[n] = copies

    # -- instructions -------------------------------------------------------------------------
    def instructions(self, optimize: bool) -> list:
        g = self.graph
        for n in g.nodes:  # every value gets its buffer in node order (deterministic names)
            for v in _operands(n) + list(n.outputs):
                if v is not None and not (_is_view_node(n) and v in n.outputs[1:]):
                    self.buffer_of(v)
        if optimize:
            for n in g.nodes:
                if n.op == "Concat" and not epilogue.steps(n):
                    self.place_concat(n)
                elif n.op in ("Split", "Slice") and not epilogue.steps(n):
                    self.place_parts(n)
        instrs = []
        for n in g.nodes:
            if _is_view_node(n):
                continue
            if n in self.skip:
                instrs += [Instr("Copy", None, [s], [d]) for s, d in self.copies[n]]
                continue
            ins = [None if v is None else self.buffer_of(v) for v in _operands(n)]
            outs = [self.buffer_of(o) for o in n.outputs]
            if "view" in n.opdef.traits:
                instrs.append(Instr("Copy", n, ins[:1], outs[:1]))
                continue
            op = n.op
            if epilogue.steps(n) and n.op in epilogue.ELEMENTWISE:
                op = "FusedElementwise"
            instrs.append(Instr(op, n, ins, outs))
        for v, bs in self.out_of.items():
            for b in bs:
                instrs.append(Instr("Copy", None, [self.buffer_of(v)], [b]))
        return instrs


def _contiguous_slice(shape, region) -> int | None:
    """Element offset of a Slice region if its elements are one contiguous run of the input:
    count 1 in every dim before the first dim k with more, step 1 in dim k, full dims after."""
    if not shape or any(c == 0 for _, _, c in region):
        return None
    k = next((d for d, (_, _, c) in enumerate(region) if c != 1), len(shape) - 1)
    for d, (start, step, count) in enumerate(region):
        if d == k and count != 1 and step != 1:
            return None
        if d > k and not (start == 0 and step == 1 and count == shape[d]):
            return None
    strides, acc = [], 1
    for dim in reversed(shape):
        strides.append(acc)
        acc *= dim
    return int(sum(s * st for (s, _, _), st in zip(region, strides[::-1])))


def lower(graph: Graph, optimize: bool = True, reuse: bool = True, slow_in_place=None,
          transform=None) -> Program:
    """`slow_in_place`: names of nodes that must not use an in-place kernel slower than the
    ordinary one (ConvPointwiseInPlace, integer streaming overlaps), a container (planner.ALL_NODES: every node, the
    speed-first plans); None allows all (the planner relaxes afterwards).
    `transform(prog)`: the backend's post-lowering step (with `optimize`), e.g. the target's
    choice of convolution algorithm, which may swap constants and add scratch outputs."""
    L = _Lowering(graph)
    instrs = L.instructions(optimize)
    prog = Program(graph.name, instrs, L.inputs, L.outputs, list(L.constants.values()), [], graph)
    if optimize and reuse:
        from glowpy.ir.inplace import assign_in_place
        assign_in_place(prog, slow_in_place if slow_in_place is not None else frozenset())
    if optimize and transform is not None:
        prog = transform(prog)
    prog.activations = list(dict.fromkeys(
        b.root for i in prog.instrs for b in i.inputs + i.outputs
        if b is not None and b.root.region == ACTIVATION))
    return prog
