"""Softplus kernel: one loop over the elements with mathfn.softplus (branch-free, no libm)."""
from __future__ import annotations

from glowpy.codegen import cgutils as cg
from glowpy.codegen import mathfn
from glowpy.codegen.kernels.elementwise.arith import interleave_for
from glowpy.codegen.registry import emits


@emits("Softplus")
def emit_softplus(k):
    x = k.in_buf(0)
    with k.strided_loop(x.shape, [cg.contiguous_strides(x.shape)] * 2,
                        interleave=interleave_for(k, ["Softplus"], False)) as (i, o):
        k.store(mathfn.softplus(k.b, k.load(k.inp(0), i, x.dtype)), k.out(), o)
