"""The program lowering produces and the planner and code generator consume: an instruction
list (Instr) over Buffers, grouped by the memory region each buffer lives in.

Every tensor gets a Buffer in one of three regions: constants, mutable (placeholders: graph
inputs then outputs) and activations. A Buffer with a `base` lives inside another's storage, at
`view_offset` bytes from the base's start; `relation` says what that means for liveness:

  view   same data under another shape (Reshape, Flatten, Squeeze, Unsqueeze, Identity,
         Dropout): no instruction at all.
  slice  its data is a part of the base's data (a Concat operand written straight into the
         Concat's output): the bytes stay live until the base's last use.
  part   a contiguous part of the base's data (a Split/Slice output read in place): the bytes
         are live from the base's first write.
  reuse  new data in the storage of a buffer that died at the instruction writing it
         (in-place elementwise ops, in-place 1x1 convolution)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from glowpy.ir.graph import Graph, Node, Value

CONSTANT, MUTABLE, ACTIVATION = "constant", "mutable", "activation"
ALIGN = 64  # bytes: every region and every tensor offset in it (the bundle contract)


def align(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


def align_down(n: int, a: int = ALIGN) -> int:
    return n // a * a


@dataclass(eq=False)
class Buffer:
    name: str
    dtype: np.dtype
    shape: tuple
    region: str
    data: np.ndarray | None = None  # constants only
    base: "Buffer | None" = None  # storage this buffer lives in
    offset: int | None = None  # byte offset in the region (root buffers; set by the planner)
    value: Value | None = None
    view_offset: int = 0  # bytes from the base's start
    relation: str = "view"  # view | slice | part | reuse (meaningful when base is set)
    # constants whose bytes are not the model's: {"layout": how they are stored, "for": the
    # instruction that reads them} (packed panels, Winograd-transformed weights, kernel
    # tables); the manifest records it for bundle-info
    layout: dict | None = None

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
        off, b = 0, self
        while b.base is not None:
            off += b.view_offset
            b = b.base
        return b.region, (b.offset or 0) + off

    @property
    def storage(self) -> "Buffer":
        """The buffer whose bytes this one names (skipping same-data views)."""
        b = self
        while b.base is not None and b.relation == "view":
            b = b.base
        return b


@dataclass(eq=False)
class Instr:
    op: str
    node: Node | None  # the graph node (op semantics); None for inserted copies
    inputs: list  # list[Buffer | None]
    outputs: list  # list[Buffer]
    attrs: dict = field(default_factory=dict)  # lowering decisions (e.g. "accumulate", "tile")

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
    activations: list  # root Buffers in the activation region
    graph: Graph | None = None
    sizes: dict = field(default_factory=dict)  # region -> bytes, set by the planner
    plan_info: dict = field(default_factory=dict)
    overlaps: list = field(default_factory=list)  # (instr index, in storage, out storage, D)
    transformed: bool = False  # the backend's post-lowering transform changed something
    # ... as a variant forced on the command line asked: kept whatever the activations grow
    transform_forced: bool = False
    kernels: list = field(default_factory=list)  # per instruction: its kernel function's name
    # kernel tables by content -> offset: equal tables are stored once (Kernel.add_table)
    tables: dict = field(default_factory=dict)
    # indexes over the instructions that codegen helpers build once and many kernels read
    memo: dict = field(default_factory=dict)

    @property
    def placeholders(self) -> list:
        """Mutable-region order: inputs, then outputs that are not also inputs."""
        return self.inputs + [o for o in self.outputs if o not in self.inputs]
