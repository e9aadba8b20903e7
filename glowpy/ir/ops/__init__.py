"""Op definitions, one module per op family. Importing this package registers them all."""
from glowpy.ir.ops.registry import REQUIRED, Op, all_ops, get_op, has_op, register  # noqa: F401
from glowpy.ir.ops import conv, elementwise, matmul, reduce, resize, tensor  # noqa: F401
from glowpy.ir.ops import convtranspose, norm, softplus  # noqa: E402,F401
from glowpy.ir.ops import einsum, generate, index, layout, logical  # noqa: E402,F401
from glowpy.ir.ops import quant, qops  # noqa: E402,F401  (int8: ONNX ops, integer kernels)
from glowpy.ir.ops import control, integer, scatter  # noqa: E402,F401
from glowpy.ir.ops import contrib, contrib_attention, contrib_quant  # noqa: E402,F401  (com.microsoft)
from glowpy.ir.ops import composite_std, composite_signal  # noqa: E402,F401  (compositions)
from glowpy.ir.ops import recurrent  # noqa: E402,F401  (LSTM, GRU, RNN, RecurrentCell)
from glowpy.ir.ops import grid, spectral  # noqa: E402,F401  (GridSample, AffineGrid; DFT, STFT)
from glowpy.ir.ops import deform  # noqa: E402,F401  (DeformConv: GridSample and MatMul)
from glowpy.ir.ops import attention  # noqa: E402,F401  (ONNX Attention, RotaryEmbedding)
from glowpy.ir.ops import decode_state  # noqa: E402,F401  (CausalConvWithState, TensorScatter)
