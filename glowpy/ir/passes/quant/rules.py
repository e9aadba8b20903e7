"""Which ops the quantization passes treat how: the one table the QDQ fold (fold.py,
patterns.py) and profile-guided quantization (profile.py) share.

  VIEWS        the registry's "view" ops (Reshape, Flatten, Squeeze, Unsqueeze, Identity): same
               values under another shape.
  MOVES        VIEWS, Transpose, Slice, the gathers (Gather, GatherElements, GatherND),
               DepthToSpace, SpaceToDepth, Tile and Expand: ops that only move, select or
               repeat values, so an int8 tensor passes through them unchanged, on its own
               grid. They are no "view" in the registry's sense (they need a kernel that
               permutes or gathers the data, where a view is a free reinterpretation) but for
               quantization only the values matter. (Split, several outputs, is folded output
               by output as Slices: patterns.Folder.fold_Split.) onnxruntime's quantizer puts
               QDQ pairs around each of them; left in float, an embedding table read by
               Gather was stored dequantized (DLRM's 26 tables: 27.8 -> 7.9 MB of weights).
  ACTS         activations a requantization absorbs as its clamp [lo, hi] (act_bounds).
  HOSTS        ops whose result such an activation may clamp before the QuantizeLinear.
  SAME_GRID    ops whose output keeps its input's (scale, zero point): MaxPool selects values.
  QUANTIZABLE  the op types -load-profile quantizes.
  QUANT_OPS    the ONNX ops that make a graph quantized (the QDQ pass has work to do)."""
from __future__ import annotations

from glowpy.ir.graph import Graph, Node
from glowpy.ir.ops import all_ops
from glowpy.ir.ops.elementwise import UNARY
from glowpy.ir.passes.util import only_user

VIEWS = frozenset(name for name, op in all_ops().items() if "view" in op.traits)
MOVES = VIEWS | {"Transpose", "Slice", "Gather", "GatherElements", "GatherND", "DepthToSpace",
                 "SpaceToDepth", "Tile", "Expand"}
ACTS = frozenset({"Relu", "Clip"})
HOSTS = frozenset({"Conv", "MatMul", "Gemm", "Add", "Mul", "AveragePool", "GlobalAveragePool",
                   "MaxPool", "Concat"}) | MOVES | (set(UNARY) - ACTS)
SAME_GRID = frozenset({"MaxPool"}) | MOVES
QUANTIZABLE = frozenset({"Conv", "MatMul", "Gemm", "Add", "Mul", "AveragePool",
                         "GlobalAveragePool", "MaxPool", "Concat", "Softmax", "Sigmoid",
                         "Tanh"}) | ACTS | MOVES
QUANT_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul",
                       "ConvInteger", "MatMulInteger"})


def act_bounds(act: Node | None):
    """(lo, hi) in real values of an ACTS node (None for an open side); (None, None) without
    an activation; None when a Clip bound is not a constant (it cannot be folded)."""
    if act is None:
        return (None, None)
    if act.op == "Relu":
        return (0.0, None)
    if any(v is not None and not v.is_const for v in act.inputs[1:]):
        return None
    lo, hi = act.opdef.bounds(act)
    return (None if lo is None else float(lo), None if hi is None else float(hi))


def clamped_host(graph: Graph, act: Node, users: dict) -> Node | None:
    """The HOSTS node whose result `act` clamps when the two may become one integer op: `act`
    is an ACTS node with constant bounds, the host's only reader."""
    if act.op not in ACTS or act_bounds(act) is None:
        return None
    host = act.inputs[0].producer
    if host is None or host.op not in HOSTS or only_user(graph, act.inputs[0], users) is not act:
        return None
    return host
