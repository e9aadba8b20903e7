"""Lowering: the optimized graph becomes an instruction list over buffers.

Every tensor gets a Buffer in one of three regions: constants, mutable (placeholders: graph
inputs then outputs) and activations. View ops (Reshape, Flatten, Squeeze, Unsqueeze, Identity,
Dropout) get no instruction: their output is the same storage under another shape. When a view
chain links two placeholders (an output that is a reshaped input, or the same tensor returned
twice), a Copy instruction keeps them apart."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from glowpy.ir.graph import Graph, Node, Value

CONSTANT, MUTABLE, ACTIVATION = "constant", "mutable", "activation"


@dataclass(eq=False)
class Buffer:
    name: str
    dtype: np.dtype
    shape: tuple
    region: str
    data: np.ndarray | None = None  # constants only
    base: "Buffer | None" = None  # views: storage they alias
    offset: int | None = None  # byte offset in the region (storage buffers)
    value: Value | None = None

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    @property
    def root(self) -> "Buffer":
        b = self
        while b.base is not None:
            b = b.base
        return b

    @property
    def address(self) -> tuple[str, int]:
        r = self.root
        return r.region, r.offset


@dataclass(eq=False)
class Instr:
    op: str
    node: Node | None  # the graph node (op semantics); None for inserted copies
    inputs: list  # list[Buffer | None]
    outputs: list  # list[Buffer]

    @property
    def name(self):
        return self.node.name if self.node is not None else f"copy_{self.outputs[0].name}"


@dataclass
class Program:
    name: str
    instrs: list
    inputs: list  # placeholder Buffers, model order
    outputs: list
    constants: list  # storage Buffers in the constant region
    activations: list  # storage Buffers in the activation region
    graph: Graph | None = None
    sizes: dict = field(default_factory=dict)  # region -> bytes, set by the planner
    plan_info: dict = field(default_factory=dict)

    @property
    def placeholders(self) -> list:
        """Mutable-region order: inputs, then outputs that are not also inputs."""
        return self.inputs + [o for o in self.outputs if o not in self.inputs]


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


def lower(graph: Graph) -> Program:
    inputs = [Buffer(v.name, v.dtype, v.shape, "mutable", value=v) for v in graph.inputs]
    buf: dict = {v: b for v, b in zip(graph.inputs, inputs)}
    outputs, out_of = [], {}
    seen = set()
    for v in graph.outputs:
        # an output that is an input, a constant or listed twice gets a placeholder of its own
        if v in seen or v in buf or v.is_const or v.producer is None:
            b = Buffer(v.name + ("_out" if v in seen or v in buf else ""), v.dtype, v.shape, "mutable", value=v)
            outputs.append(b)
            out_of.setdefault(v, []).append(b)
        else:
            b = Buffer(v.name, v.dtype, v.shape, "mutable", value=v)
            outputs.append(b)
            buf[v] = b
        seen.add(v)
    classes = _view_classes(graph, set(graph.inputs) | set(buf))
    storage = {}  # class root value -> storage Buffer
    for v, b in buf.items():
        storage.setdefault(classes.get(v, v), b)

    constants: dict = {}

    def buffer_of(v: Value) -> Buffer:
        if v in buf:
            return buf[v]
        if v.is_const:
            if v not in constants:
                constants[v] = Buffer(v.name, v.dtype, v.shape, "constant", data=v.const, value=v)
            return constants[v]
        root = classes.get(v, v)
        if root not in storage:
            storage[root] = Buffer(root.name, root.dtype, root.shape, "activation", value=root)
        s = storage[root]
        b = s if (s.value is v) else Buffer(v.name, v.dtype, v.shape, s.region, base=s, value=v)
        buf[v] = b
        return b

    instrs = []
    for n in graph.nodes:
        if "view" in n.opdef.traits and not n.attrs.get("_copy") and not n.inputs[0].is_const:
            buffer_of(n.inputs[0])
            for o in n.outputs[:1]:
                buffer_of(o)
            continue
        ins = [None if v is None else buffer_of(v) for v in n.inputs]
        outs = [buffer_of(o) for o in n.outputs]
        op = "Copy" if "view" in n.opdef.traits else n.op
        instrs.append(Instr(op, n, ins[:1] if op == "Copy" else ins, outs[:1] if op == "Copy" else outs))
    for v, bs in out_of.items():
        for b in bs:
            instrs.append(Instr("Copy", None, [buffer_of(v)], [b]))
    acts = list(dict.fromkeys(b.root for i in instrs for b in i.inputs + i.outputs
                              if b is not None and b.root.region == ACTIVATION))
    return Program(graph.name, instrs, inputs, outputs, list(constants.values()), acts, graph)
