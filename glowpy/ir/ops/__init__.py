"""Op definitions, one module per op family. Importing this package registers them all."""
from glowpy.ir.ops.registry import REQUIRED, Op, all_ops, get_op, has_op, register  # noqa: F401
from glowpy.ir.ops import conv, elementwise, matmul, reduce, tensor  # noqa: F401
