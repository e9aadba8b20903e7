"""QTable (y = T[x - min], any unary op of an 8-bit value as 256 entries) on AVX512-VBMI:
vpermi2b picks 64 bytes out of two 64-byte vectors by the low 7 bits of each index, so the
table is four vectors loaded once, two vpermi2b give the lower and the upper half's entry of
every index and the index's top bit chooses between them: four instructions per 64 elements
where the scalar loop takes two loads and a store per element. EfficientNet-B0 quantized by
onnxruntime has 65 QTables (SiLU's sigmoid x times x, composed into one table) that took
1.89 of its 6.4 ms on a Zen 4 (after: docs/performance.md). Other targets keep the scalar
loop (quant.emit_table): on AMD's cores a gather is no faster than the loads it replaces."""
from __future__ import annotations

import math

from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.int8.quant import emit_table
from glowpy.codegen.kernels.vectors import declare
from glowpy.codegen.registry import variant

W = 64  # bytes a vpermi2b looks up
I8 = ir.IntType(8)


def _plan(k):
    """Targets with the byte permute, tables of 8-bit entries, a vector of elements or more."""
    y = k.out_buf()
    if not k.caps.byte_permute or y.dtype.itemsize != 1 or math.prod(y.shape) < W:
        return None
    return {}


@variant("QTable", "permute", rank=10, plan=_plan)
def emit(k, params):
    b = k.b
    x, y = k.in_buf(0), k.out_buf()
    n = math.prod(y.shape)
    vt = ir.VectorType(I8, W)
    fn = declare(b.module, "llvm.x86.avx512.vpermi2var.qi.512", ir.FunctionType(vt, [vt] * 3))
    quarters = [b.load(cg.gep(b, k.inp(1), k.c(q * W), I8), typ=vt, align=1) for q in range(4)]
    flip = cg.is_signed(x.dtype)  # x - (-128): the sign bit flipped
    with k.for_range(n // W, name="v") as v:
        at = b.mul(v, k.c(W))
        idx = b.load(cg.gep(b, k.inp(0), at, I8), typ=vt, align=1)
        idx = b.xor(idx, cg.const(vt, -128)) if flip else idx
        low = b.call(fn, [quarters[0], idx, quarters[1]])
        high = b.call(fn, [quarters[2], idx, quarters[3]])
        upper = b.icmp_signed("<", idx, cg.const(vt, 0))  # index 128 or more
        b.store(b.select(upper, high, low), cg.gep(b, k.out(), at, I8), align=1)
    if n % W:
        emit_table(k, n - n % W)
