"""The graph pass pipeline: one ordered list. Each pass takes a graph and returns a graph.

The order matters where one pass makes work for the next:
  * canonicalizing (fold, views, transposes) comes first so CSE sees equal things as equal;
  * BatchNormalization is folded into weights before the leftovers are lowered to Mul+Add,
    and those Mul/Add are then offered to fold_affine like any other;
  * weight folding (fold_affine) must precede activation fusion: a Mul after a Relu is not a
    Mul of the Conv's result;
  * activations are fused before general elementwise chains, so Conv+Relu is preferred over
    fusing the Relu into some other elementwise host;
  * dead-code removal runs last to drop what the rewrites disconnected."""
from glowpy.ir.passes.batchnorm import lower_batchnorm
from glowpy.ir.passes.conv_taps import trim_conv_taps
from glowpy.ir.passes.convtranspose import as_conv
from glowpy.ir.passes.cse import eliminate_common_subexpressions
from glowpy.ir.passes.dce import eliminate_dead_code
from glowpy.ir.passes.decompose import decompose
from glowpy.ir.passes.einsum import einsum_as_matmul
from glowpy.ir.passes.fold import fold_constants
from glowpy.ir.passes.fold_affine import fold_affine
from glowpy.ir.passes.fold_batchnorm import fold_batchnorm
from glowpy.ir.passes.fuse_activation import fuse_activations
from glowpy.ir.passes.fuse_elementwise import fuse_elementwise
from glowpy.ir.passes.gelu import recognize_gelu
from glowpy.ir.passes.integer_resize import integer_resize
from glowpy.ir.passes.merge_pad import merge_pad
from glowpy.ir.passes.patchify import patchify_to_pointwise
from glowpy.ir.passes.quant.fold import fold_quantization
from glowpy.ir.passes.quant.tables import compose_tables
from glowpy.ir.passes.quant.profile import quantize_from_profile
from glowpy.ir.passes.quant.qlinear import lower_qlinear
from glowpy.ir.passes.recurrent import lower_recurrent
from glowpy.ir.passes.transpose import simplify_transposes
from glowpy.ir.passes.views import simplify_views
from glowpy.ir.passes.window3d import windows3d_as_2d

PIPELINE = [
    # contrib ops and DynamicQuantizeLinear as the ordinary ops they expand to (no kernels)
    decompose,
    # linear Resize of int8/uint8 data (QOperator models) interpolated in float, truncated back
    integer_resize,
    # two-operand float Einsum as Transpose/Reshape + MatMul (before folding: the transposes of
    # constant operands fold away)
    einsum_as_matmul,
    # values that became computable at compile time (the importer already folds as it goes)
    fold_constants,
    # LSTM/GRU/RNN -> per direction one Gemm of all input projections + a RecurrentCell
    # (before the transpose and view passes: torch exports wrap the outputs in Transpose/Squeeze)
    lower_recurrent,
    # transpose pairs cancel, transposes of unit dims become reshapes (views)
    simplify_transposes,
    # Identity/Dropout vanish, Reshape chains collapse (views cost nothing in lowering anyway)
    simplify_views,
    # identical constants and identical nodes computed once
    eliminate_common_subexpressions,
    # Conv taps that read only padding cut from the kernel (an atrous 3x3 at dilation 36 on a
    # 28x28 map is a 1x1): before the quantization folds, which see the cut weights' QDQ pair
    trim_conv_taps,
    # QLinearConv, QLinearMatMul, ConvInteger, MatMulInteger as integer ops (or float forms)
    lower_qlinear,
    # DequantizeLinear -> op -> QuantizeLinear as integer kernels, before any float rewrite
    # (activation fusion would hide the Relu the integer op clamps with)
    fold_quantization,
    # stride-1 ConvTranspose as the Conv it equals (before BatchNormalization folds into it)
    as_conv,
    # BatchNormalization into the preceding Conv/Gemm/MatMul weights where it can go
    fold_batchnorm,
    # the remaining BatchNormalization -> per-channel Mul + Add (no kernel of its own)
    lower_batchnorm,
    # Mul/Add/Sub/Div by per-channel constants into the preceding Conv/Gemm/MatMul weights
    fold_affine,
    # zero Pad into the Conv/pooling window's own padding
    merge_pad,
    # 3-D Convs as one 2-D Conv over the output depths, 3-D pools of depth 1 as 2-D pools (after
    # the folds into the Convs' weights and merge_pad; the 2-D kernels take it from there)
    windows3d_as_2d,
    # -load-profile: float ops on profiled ranges become integer ops (the profiler's graph is
    # the graph as it is here: everything above runs before model-profiler records a range)
    quantize_from_profile,
    # an int8 QMul/QAdd of x and a table of x (SiLU, hard-swish) as one table (after both
    # quantization passes have written their QTables)
    compose_tables,
    # kernel == stride Convs as SpaceToDepth + 1x1 Conv (after merge_pad: a merged pad keeps
    # the window; after profiling: QConv is not rewritten)
    patchify_to_pointwise,
    # the Erf GELU chain as one Gelu node (after profiling: model-profiler's ranges name the
    # chain's values; before fusion, which would take the chain apart)
    recognize_gelu,
    # Relu/Clip/LeakyRelu/Sigmoid/HardSwish/Swish/Tanh as epilogues of their producer
    fuse_activations,
    # elementwise chains (and residual adds into Conv/Gemm) as one loop
    fuse_elementwise,
    # drop whatever no output needs (shape-computing chains, unused branches, folded weights)
    eliminate_dead_code,
]

# passes needed for correctness even at -O0 (lowering has no BatchNormalization, LSTM, GRU,
# RNN, composite, QLinearConv-like or integer-interpolating kernel; kernels take only trimmed
# windows)
REQUIRED = {decompose, integer_resize, lower_batchnorm, lower_recurrent, trim_conv_taps,
            lower_qlinear, eliminate_dead_code}


def optimize(graph, level: int = 1, passes=None):
    """Runs the pipeline (`passes`: an explicit subset, in pipeline order, for tests)."""
    for p in PIPELINE:
        if (passes is not None and p in passes) or (passes is None and (level > 0 or p in REQUIRED)):
            graph = p(graph)
    return graph
