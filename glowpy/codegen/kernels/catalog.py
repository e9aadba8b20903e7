"""Every kernel family, imported so that its variants are registered (glowpy.codegen.registry);
the driver (codegen/module.py) and the tools that list what has a kernel import this module.
Order does not matter: variants of one op are ranked, not ordered by import."""
from glowpy.codegen.kernels.conv import channel, channel_last, depthwise, depthwise_phase, direct, pixel  # noqa: F401,E501
from glowpy.codegen.kernels.conv import pointwise_inplace, pointwise_packed, pointwise_strided, transpose, winograd  # noqa: F401,E501
from glowpy.codegen.kernels.elementwise import arith, fused, integer, logical, softplus  # noqa: F401,E501
from glowpy.codegen.kernels.gemm import direct as gemm_direct, einsum  # noqa: F401
from glowpy.codegen.kernels.gemm import vector as gemm_vector  # noqa: F401
from glowpy.codegen.kernels.int8 import column_scratch, conv as int8_conv  # noqa: F401
from glowpy.codegen.kernels.int8 import depthwise as int8_depthwise  # noqa: F401
from glowpy.codegen.kernels.int8 import matmul, matmul_dsp, qadd_table, quant  # noqa: F401
from glowpy.codegen.kernels.pool import direct as pool_direct, vector as pool_vector  # noqa: F401
from glowpy.codegen.kernels.reduce import norm, reductions, softmax  # noqa: F401
from glowpy.codegen.kernels.recurrent import cell  # noqa: F401
from glowpy.codegen.kernels.tensor import index, layout, movement, resize, scatter  # noqa: F401


def post_planning(target):
    """The backend's step between planning and codegen: scratch in the activation region's
    gaps for the kernels that can use it (int8 convolution columns, the strided 1x1's gathered
    input, the channel-vectorized rows' channels-last input)."""
    def step(prog):
        column_scratch.place(prog, target.caps)
        pointwise_strided.place(prog, target.caps)
        channel_last.place(prog, target.caps, channel.plan, channel.RANK)
    return step


def post_lowering(target):
    """The backend's step between lowering and planning (lower.lower's `transform`): the
    convolution algorithm the target runs best."""
    return lambda prog: winograd.select(prog, target.caps)
