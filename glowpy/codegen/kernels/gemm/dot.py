"""Gemm with transB=1 on a B computed at run time, for few rows of A: each output a dot
product of a row of A with a row of B (N x K, both rows contiguous along K), read in place.

The register-blocked kernel (vector.py) reads a run-time B row-major, so such a Gemm first
gets a Transpose of B (glowpy/ir/passes/gemm_operands.py): for a few rows of A that copy of B
costs more than the product, since the product reads B once while the Transpose reads and
writes it. Here a block of up to 8 rows of B (LANES) accumulates one vector per row over K,
against the same vector of the A row; the block's accumulators become one output vector by
Vec.lane_sums, then alpha, beta * C and the fused epilogue as in vector.py. The blocks of B
are outermost and the rows of A inside them, so B streams once and A (a few rows) stays in
cache. A step loads width + 1 vectors for width multiply-adds: bound by loads, not FMAs, the
right trade only while the rows of A are few (DOT_MAX_M).

AVX2 code (-mcpu znver3) against onnxruntime's AVX2 kernels on the Zen 4, A and B graph
inputs, best of 4 alternating rounds, the Transpose and the vector kernel -> here:
(1 x 2048) x (1000 x 2048)^T 948 -> 102 us (onnxruntime 117); 4 rows 1053 -> 374 (onnxruntime
520); (16 x 1024) x (1024 x 1024)^T 825 -> 475 (498); 32 rows 1132 -> 916 (820); 64 rows stay
with the Transpose (1.21x onnxruntime's time; here they would be slower still). The blocks
take 8 rows of B on AVX-512 too (LANES): 16-lane blocks ran 1.4x slower at one row, 2.2x at
16 (16 streams of B; a block of 16 rows of 4 KB past the 32 KB L1)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.gemm.vector import gemm_finish
from glowpy.codegen.kernels.vector_epilogue import Finisher
from glowpy.codegen.kernels.vectors import Simd, Vec
from glowpy.codegen.registry import variant
from glowpy.codegen.mathfn.core import intrinsic

DOT_MAX_M = 32  # rows of A up to which dot products beat the Transpose and the tiled product
LANES = 8  # lanes per vector at most: rows of B per block


def takes(caps, node) -> bool:
    """The Gemm node runs here (its B is not transposed first): float32, transB, a B computed at
    run time, at most DOT_MAX_M rows of A laid along K (transA=0, or a single row), on a vector
    target."""
    if node.op != "Gemm" or not node.attrs.get("transB") or Simd.of(caps).width == 1:
        return False
    ins = [x for x in node.inputs if x is not None] + list(node.outputs)
    if any(np.dtype(x.dtype) != np.float32 for x in ins) or node.inputs[1].is_const:
        return False
    m = node.opdef.dims(node)[0]
    return m <= DOT_MAX_M and (m == 1 or not node.attrs.get("transA"))


def plan(k):
    return {} if takes(k.caps, k.node) else None


@variant("Gemm", "dot", rank=5, plan=plan)
def emit(k, params):
    b, node = k.b, k.node
    m, kk, n = node.opdef.dims(node)
    simd = Simd.of(k.caps)
    vec = Vec(k, replace(simd, width=min(simd.width, LANES)))
    w = vec.w
    fin = Finisher(k, vec, k.out_buf().shape[-1:])
    finish = gemm_finish(k, vec, m, n)
    fma = intrinsic(b, "llvm.fmuladd", vec.zero(), 3)
    full, rem = divmod(kk, w)

    def sums(rows, arow, nt):
        """The dot products of the A row at `arow` with the block's B rows, as one vector."""
        def step(off, mask, accs):
            av = vec.load(k.inp(0), b.add(arow, off), mask)
            return [b.call(fma, [av, vec.load(k.inp(1), b.add(r, off), mask), acc])
                    for r, acc in zip(rows, accs)]
        with cg.for_range_carry(b, full, [vec.zero()] * nt, intp=k.intp, name="k") as lp:
            lp.carry(step(b.mul(lp.index, k.c(w)), None, lp.values))
        accs = lp.results
        if rem:
            accs = step(k.c(full * w), tuple(lane < rem for lane in range(w)), accs)
        return vec.lane_sums(list(accs) + [vec.zero()] * (w - nt))

    def block(n0, nt):
        rows = [b.mul(b.add(n0, k.c(j)), k.c(kk)) for j in range(nt)]
        mask = None if nt == w else tuple(lane < nt for lane in range(w))
        with k.for_range(m, name="m") as row:
            val = finish(row, n0, sums(rows, b.mul(row, k.c(kk)), nt), mask)
            fin.finish(val, [row], n0, b.add(b.mul(row, k.c(n)), n0), mask)
    cg.for_runs(b, n, w, block, k.intp, "nb")
