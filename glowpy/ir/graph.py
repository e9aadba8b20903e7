"""The graph IR: values with static types, nodes naming an op from the registry.

A Value is a tensor with a fixed dtype and shape. Constants are Values with `const` set and no
producer. Nodes are kept in topological order in `Graph.nodes`. Shape and type inference run as
nodes are added, and a node whose inputs are all known at compile time is folded on the spot
(shape-computing chains such as Shape -> Gather -> Concat -> Reshape need the values to infer the
next shape)."""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from glowpy.errors import ModelError
from glowpy.ir.validate import check_fold, check_output_sizes


class Value:
    __slots__ = ("name", "dtype", "shape", "const", "producer", "qparams")

    def __init__(self, name: str, dtype, shape, const: np.ndarray | None = None, producer=None):
        self.name = name
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(d) for d in shape)
        self.const = const
        self.producer = producer
        self.qparams = None  # (scale, offset) for quantized values

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def is_const(self) -> bool:
        return self.const is not None

    def __repr__(self):
        kind = "const " if self.is_const else ""
        return f"%{self.name}: {kind}{self.dtype.name}{list(self.shape)}"


@dataclass(eq=False)
class Node:
    op: str
    name: str
    inputs: list  # list[Value | None]; None for an omitted optional input
    outputs: list  # list[Value]
    attrs: dict = field(default_factory=dict)

    @property
    def opdef(self):
        from glowpy.ir.ops import get_op
        return get_op(self.op)

    def input(self, i: int):
        return self.inputs[i] if i < len(self.inputs) else None

    def const_input(self, i: int, what: str = "") -> np.ndarray | None:
        v = self.input(i)
        if v is None:
            return None
        if v.const is None:
            raise ModelError(
                f"node '{self.name}' ({self.op}): input {i} '{v.name}'{' (' + what + ')' if what else ''} "
                f"must be known at compile time; make it an initializer or a Constant, or "
                f"compile the model up to the tensors before it with -model-outputs=<names>")
        return v.const

    def __repr__(self):
        ins = ", ".join("_" if v is None else "%" + v.name for v in self.inputs)
        outs = ", ".join("%" + v.name for v in self.outputs)
        return f"{outs} = {self.op}[{self.name}]({ins}) {self.attrs}"


class Graph:
    def __init__(self, name: str = "network"):
        self.name = name
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.nodes: list[Node] = []
        self._names: set[str] = set()
        self._counter = itertools.count()
        self.fold = True  # fold nodes with constant inputs as they are added
        self.max_tensor_bytes: int | None = None  # size limit (validate.py), set by the loader

    # -- naming -------------------------------------------------------------------------------
    def unique_name(self, base: str) -> str:
        name = base or "t"
        while name in self._names:
            name = f"{base}__{next(self._counter)}"
        self._names.add(name)
        return name

    # -- building -----------------------------------------------------------------------------
    def add_input(self, name: str, dtype, shape) -> Value:
        v = Value(self.unique_name(name), dtype, shape)
        self.inputs.append(v)
        return v

    def constant(self, array, name: str = "const") -> Value:
        array = np.asarray(array, order="C")  # (ascontiguousarray would make scalars 1-D)
        return Value(self.unique_name(name), array.dtype, array.shape, const=array)

    def add(self, op: str, inputs, attrs: dict | None = None, name: str = "", out_names=None,
            num_outputs: int | None = None) -> list[Value]:
        """Adds a node (or folds it), infers its outputs' types, and returns its outputs."""
        from glowpy.ir.ops import get_op
        opdef = get_op(op)
        node = Node(op, name or f"{op}_{next(self._counter)}", list(inputs),
                    [], opdef.complete_attrs(attrs or {}, name or op))
        types = opdef.infer_node(node, num_outputs)
        check_output_sizes(self, node, types)  # before folding allocates anything that size
        out_names = list(out_names or [])
        out_names += [f"{node.name}_out{i}" for i in range(len(out_names), len(types))]
        if self.fold and "nofold" not in opdef.traits:
            check_fold(node, types)
        folded = opdef.try_fold(node, types) if self.fold else None
        if folded is not None:
            return [self.constant(a.astype(t[0], copy=False).reshape(t[1]), n)
                    for a, t, n in zip(folded, types, out_names)]
        node.outputs = [Value(self.unique_name(n), t[0], t[1], producer=node)
                        for n, t in zip(out_names, types)]
        self.nodes.append(node)
        return node.outputs

    # -- queries ------------------------------------------------------------------------------
    def consumers(self) -> dict[Value, list[Node]]:
        users: dict[Value, list[Node]] = {}
        for n in self.nodes:
            for v in n.inputs:
                if v is not None:
                    users.setdefault(v, []).append(n)
        return users

    def replace_uses(self, old: Value, new: Value):
        for n in self.nodes:
            n.inputs = [new if v is old else v for v in n.inputs]
        self.outputs = [new if v is old else v for v in self.outputs]

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op] = counts.get(n.op, 0) + 1
        return counts

    def dump(self) -> str:
        lines = [f"graph {self.name}("
                 + ", ".join(repr(v) for v in self.inputs) + ")"]
        lines += ["  " + repr(n) for n in self.nodes]
        lines.append("  return " + ", ".join("%" + v.name for v in self.outputs))
        return "\n".join(lines)
