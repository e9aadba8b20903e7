"""Softplus (ONNX semantics): y = log(1 + exp(x)), computed without overflow for large x.

Declared apart from the elementwise family because its kernel lives in its own emitter module;
it has no "elementwise" trait, so passes that fuse elementwise chains through
kernels/elementwise.scalar leave it alone."""
from __future__ import annotations

import numpy as np

from glowpy.errors import ModelError
from glowpy.ir.ops.registry import Op, register


@register
class Softplus(Op):
    inputs = ("X",)

    def infer(self, node):
        x = node.inputs[0]
        if x.dtype != np.float32:
            raise ModelError(f"node '{node.name}' (Softplus): type {x.dtype.name} is not supported "
                             "(float only)")
        return [(x.dtype, x.shape)]

    def reference(self, node, x):
        return [np.logaddexp(0.0, x.astype(np.float64)).astype(x.dtype)]
