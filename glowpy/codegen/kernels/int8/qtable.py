"""QTable (y = T[x - min], any unary op of an 8-bit value as 256 entries) on x86 vectors.

* permute (AVX512-VBMI): vpermi2b picks 64 bytes out of two 64-byte vectors by the low 7 bits
  of each index, so the table is four vectors loaded once, two vpermi2b give the lower and
  the upper half's entry of every index and the index's top bit chooses between them: four
  instructions per 64 elements where the scalar loop takes two loads and a store per element.
  EfficientNet-B0 quantized by onnxruntime has 65 QTables (SiLU's sigmoid x times x, composed
  into one table) that took 1.89 of its 6.4 ms on a Zen 4 (after: docs/performance.md).
* nibbles (AVX2): pshufb looks 32 bytes up in a 16-entry table (per 128-bit half): the 16
  entries of every high nibble looked up by the low nibble, then a tree of 15 blends by the
  high nibble's bits (each shifted into the sign bit that vpblendvb reads): about 35
  instructions per 32 elements (EfficientNet-B0 int8 on AVX2 code, Zen 4: its tables 1.78 ms
  one by one, 0.84; a compare and a blend per high nibble took 0.85: both do 15 blends,
  which one pipe runs).

Other targets keep the scalar loop (quant.emit_table): on AMD's cores a gather is no faster
than the loads it replaces."""
from __future__ import annotations

import math

from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.int8.quant import I32, emit_table
from glowpy.codegen.kernels.vectors import declare
from glowpy.codegen.registry import variant

W = 64  # bytes a vpermi2b looks up
I8 = ir.IntType(8)


def _plan(k, w: int = W):
    """Tables of 8-bit entries, a vector of `w` elements or more."""
    y = k.out_buf()
    return None if y.dtype.itemsize != 1 or math.prod(y.shape) < w else {}


def _permute_plan(k):
    return _plan(k) if k.caps.byte_permute else None


def _nibbles_plan(k):
    """AVX2's integer instructions (TargetCaps.pair_madd 8: 32-byte pshufb)."""
    return _plan(k, 32) if k.caps.pair_madd >= 8 else None


@variant("QTable", "permute", rank=10, plan=_permute_plan)
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


@variant("QTable", "nibbles", rank=5, plan=_nibbles_plan)
def emit_nibbles(k, params):
    b = k.b
    x, y = k.in_buf(0), k.out_buf()
    n, w = math.prod(y.shape), 32
    vt = ir.VectorType(I8, w)
    fn = declare(b.module, "llvm.x86.avx2.pshuf.b", ir.FunctionType(vt, [vt, vt]))
    # the 16 entries of each high nibble in both 128-bit halves
    rows = [b.load(cg.gep(b, k.inp(1), k.c(16 * h), I8), typ=ir.VectorType(I8, 16), align=1)
            for h in range(16)]
    both = ir.Constant(ir.VectorType(I32, w), list(range(16)) * 2)
    rows = [b.shuffle_vector(r, r, both) for r in rows]
    flip = cg.is_signed(x.dtype)
    with k.for_range(n // w, name="v") as v:
        at = b.mul(v, k.c(w))
        idx = b.load(cg.gep(b, k.inp(0), at, I8), typ=vt, align=1)
        idx = b.xor(idx, cg.const(vt, -128)) if flip else idx
        low = b.and_(idx, cg.const(vt, 15))
        vals = [b.call(fn, [r, low]) for r in rows]
        for bit in range(4, 8):  # a tree of selects by the high nibble's bits, low one first
            top = b.shl(idx, cg.const(vt, 7 - bit)) if bit < 7 else idx
            odd = b.icmp_signed("<", top, cg.const(vt, 0))  # that bit set (in the sign bit)
            vals = [b.select(odd, vals[i + 1], vals[i]) for i in range(0, len(vals), 2)]
        b.store(vals[0], cg.gep(b, k.out(), at, I8), align=1)
    if n % w:
        emit_table(k, n - n % w)
