"""The op registry: every op is declared once, by a subclass of `Op`.

An op declares its inputs ("X", "B?" optional, "inputs*" variadic), its attributes with their
ONNX defaults, output type inference, a numpy reference (used for constant folding and as a test
oracle), traits, and how older ONNX opsets map onto its current form (`upgrade`). Frontends,
passes, lowering and codegen all read this one definition."""
from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from glowpy.errors import ModelError, show

REQUIRED = object()  # attribute default meaning "must be given"

_REGISTRY: dict[str, "Op"] = {}


def register(cls):
    inst = cls()
    names = cls.names or (cls.__name__,)
    for n in names:
        _REGISTRY[n] = inst
    return cls


def get_op(name: str) -> "Op":
    return _REGISTRY[name]


def has_op(name: str) -> bool:
    return name in _REGISTRY


def all_ops() -> dict[str, "Op"]:
    return dict(_REGISTRY)


class Op:
    names: ClassVar[tuple[str, ...]] = ()  # registered names (default: the class name)
    inputs: ClassVar[tuple[str, ...]] = ()
    num_outputs: ClassVar[int] = 1
    attrs: ClassVar[dict[str, Any]] = {}
    traits: ClassVar[frozenset] = frozenset()  # "elementwise", "view", "internal"
    since: ClassVar[int] = 1  # first ONNX opset supporting this op; "internal" ops have none
    # ONNX inputs that hold shape-determining operands (must be compile-time constants)
    const_inputs: ClassVar[tuple[int, ...]] = ()

    # -- attributes ---------------------------------------------------------------------------
    def complete_attrs(self, attrs: dict, where: str) -> dict:
        full = {}
        for k, default in self.attrs.items():
            if k in attrs:
                full[k] = attrs[k]
            elif default is REQUIRED:
                raise ModelError(f"node '{where}' ({self.names[0] if self.names else type(self).__name__}):"
                                 f" missing required attribute '{k}'")
            else:
                full[k] = default
        for k, v in attrs.items():  # private attributes set by passes (e.g. fused activations)
            if k.startswith("_"):
                full[k] = v
        return full

    def upgrade(self, node_op: str, attrs: dict, inputs: list, opset: int, graph) -> tuple[dict, list]:
        """Maps an older opset's form (attributes that became inputs, changed semantics) onto
        the current one. `inputs` are Values; new constant inputs come from graph.constant."""
        return attrs, inputs

    # -- inference ----------------------------------------------------------------------------
    def infer(self, node) -> list[tuple]:
        """Returns [(dtype, shape), ...] for the outputs."""
        raise NotImplementedError

    def infer_node(self, node, num_outputs=None):
        n_req = sum(1 for s in self.inputs if not s.endswith(("?", "*")))
        present = len(node.inputs)
        if present < n_req or (not any(s.endswith("*") for s in self.inputs)
                               and present > len(self.inputs)):
            raise ModelError(f"node '{node.name}' ({node.op}): expects "
                             f"{n_req}..{len(self.inputs)} inputs, got {present}")
        for i, s in enumerate(self.inputs):
            if not s.endswith(("?", "*")) and node.input(i) is None:
                raise ModelError(f"node '{node.name}' ({node.op}): required input '{s}' is missing")
        node._num_outputs = num_outputs
        types = self.infer(node)
        for dt, shape in types:
            for d in shape:
                if d < 0:
                    raise ModelError(f"node '{node.name}' ({node.op}): inferred a negative dimension "
                                     f"{list(shape)}; check its inputs and attributes")
        return [(np.dtype(dt), tuple(int(d) for d in shape)) for dt, shape in types]

    # -- evaluation ---------------------------------------------------------------------------
    def reference(self, node, *inputs: np.ndarray | None) -> list[np.ndarray]:
        """numpy implementation with the node's attributes; returns the outputs."""
        raise NotImplementedError

    def try_fold(self, node, types) -> list[np.ndarray] | None:
        if "nofold" in self.traits:
            return None
        if all(v is None or v.is_const for v in node.inputs):
            return self.reference(node, *[None if v is None else v.const for v in node.inputs])
        return None


# -- helpers shared by op definitions ---------------------------------------------------------

def norm_axis(axis: int, rank: int, node) -> int:
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < max(rank, 1):
        raise ModelError(f"node '{node.name}' ({node.op}): axis {axis} is out of range for rank {rank}")
    return a


def broadcast_shapes(node, *shapes) -> tuple:
    from glowpy.ir.validate import check_rank  # (numpy broadcasts at most 32 dims)
    check_rank(max(map(len, shapes), default=0), f"node '{show(node.name)}' ({node.op}): output 0")
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ModelError(f"node '{node.name}' ({node.op}): input shapes "
                         f"{' and '.join(str(list(s)) for s in shapes)} do not broadcast") from None


def ints(v) -> list[int]:
    return [int(x) for x in np.asarray(v).reshape(-1)]
