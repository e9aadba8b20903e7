"""Kernel emitters, one module per op family. `emits` registers an emitter for op names;
lowering's instruction op names (plus "Copy") are the keys."""
from glowpy.errors import ModelError

_EMITTERS = {}


def emits(*ops):
    def deco(fn):
        for op in ops:
            _EMITTERS[op] = fn
        return fn
    return deco


def get_emitter(op: str):
    if op not in _EMITTERS:
        raise ModelError(f"op {op} has no code generator for this target")
    return _EMITTERS[op]


def has_emitter(op: str) -> bool:
    return op in _EMITTERS


from glowpy.codegen.kernels import conv, elementwise, matmul, reduce, resize, tensor  # noqa: E402,F401
from glowpy.codegen.kernels import convtranspose, norm, softplus  # noqa: E402,F401
from glowpy.codegen.kernels import einsum, index, layout, logical  # noqa: E402,F401
from glowpy.codegen.kernels import fused  # noqa: E402,F401  (epilogues, in-place kernels)
from glowpy.codegen.kernels import conv_inplace  # noqa: E402,F401  (fast ConvPointwiseInPlace, after fused)
from glowpy.codegen.kernels import quant, qconv, qmatmul  # noqa: E402,F401  (int8)
from glowpy.codegen.kernels import winograd  # noqa: E402  (ConvWinograd)


def post_lowering(target):
    """The backend's step between lowering and planning (lower.lower's `transform`): the
    convolution algorithm the target runs best."""
    return lambda prog: winograd.select(prog, target)
