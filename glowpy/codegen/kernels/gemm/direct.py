"""Matrix-product kernels: Gemm and batched MatMul, written as row updates
Y[m, :] += A[m, k] * B[k, :] so the inner loop runs over contiguous output columns."""
from __future__ import annotations

import numpy as np

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.epilogue import apply_at
from glowpy.codegen.registry import variant
from glowpy.errors import ModelError

CONTRACT = ("contract",)


def matmul_rows(k, a, a_off, a_st, bm, b_off, b_st, y_off, mkn, dtype, finish=None):
    """Y[m, n] = sum_k A[a_off + m*a_st[0] + k*a_st[1]] * B[b_off + k*b_st[0] + n*b_st[1]];
    `finish(m, n, acc)` maps the sum before it is stored (bias, alpha, beta*C)."""
    b = k.b
    m_, k_, n_ = mkn
    if not cg.is_float(dtype):
        raise ModelError(f"node '{k.node.name}' ({k.node.op}): {np.dtype(dtype).name} inputs are "
                         "not supported (only floating point)")
    f = cg.llvm_type(dtype)
    with k.for_range(m_, name="m") as m:
        y_row = b.add(y_off, b.mul(m, k.c(n_)))
        with k.for_range(n_, name="z") as z:
            k.store(cg.const(f, 0), k.out(), b.add(y_row, z))
        a_row = b.add(a_off, b.mul(m, k.c(a_st[0])))
        with k.for_range(k_, name="k") as kk:
            av = k.load(a, b.add(a_row, b.mul(kk, k.c(a_st[1]))), dtype)
            b_row = b.add(b_off, b.mul(kk, k.c(b_st[0])))
            with k.for_range(n_, name="n") as n:
                bv = k.load(bm, b.add(b_row, n if b_st[1] == 1 else b.mul(n, k.c(b_st[1]))), dtype)
                yi = b.add(y_row, n)
                acc = k.load(k.out(), yi, dtype)
                k.store(b.fadd(acc, b.fmul(av, bv, flags=CONTRACT), flags=CONTRACT), k.out(), yi)
        if finish is not None:
            with k.for_range(n_, name="n") as n:
                yi = b.add(y_row, n)
                k.store(finish(m, n, k.load(k.out(), yi, dtype)), k.out(), yi)


@variant("Gemm", "direct", rank=0)
def emit_gemm(k, params=None):
    b = k.b
    node = k.node
    a, bb, y = k.in_buf(0), k.in_buf(1), k.out_buf()
    m_, k_, n_ = node.opdef.dims(node)
    a_st = (1, a.shape[1]) if node.attrs["transA"] else (a.shape[1], 1)
    b_st = (1, bb.shape[1]) if node.attrs["transB"] else (bb.shape[1], 1)
    f = cg.llvm_type(y.dtype)
    alpha, beta = float(node.attrs["alpha"]), float(node.attrs["beta"])
    c = k.in_buf(2)
    c_st = cg.broadcast_strides(c.shape, (m_, n_)) if c is not None else None

    def finish(m, n, acc):
        if alpha != 1.0:
            acc = b.fmul(acc, cg.const(f, alpha))
        if c is not None and beta != 0.0:
            cv = k.load(k.inp(2), cg.linear(b, [m, n], c_st, 0, k.intp), c.dtype)
            acc = b.fadd(acc, cv if beta == 1.0 else b.fmul(cv, cg.const(f, beta)))
        return apply_at(k, acc, [m, n])  # the fused epilogue, if any

    needs = alpha != 1.0 or (c is not None and beta != 0.0) or bool(k.attrs.get("_epilogue"))
    matmul_rows(k, k.inp(0), k.c(0), a_st, k.inp(1), k.c(0), b_st, k.c(0), (m_, k_, n_), y.dtype,
                finish if needs else None)


@variant("MatMul", "direct", rank=0)
def emit_matmul(k, params=None):
    node = k.node
    a, bb, y = k.in_buf(0), k.in_buf(1), k.out_buf()
    batch, m_, k_, n_ = node.opdef.shapes(node)
    a_shape = (1,) + a.shape if len(a.shape) == 1 else a.shape
    b_shape = bb.shape + (1,) if len(bb.shape) == 1 else bb.shape
    a_bst = cg.broadcast_strides(a_shape[:-2], batch) if batch else []
    b_bst = cg.broadcast_strides(b_shape[:-2], batch) if batch else []
    # broadcast strides count in matrices; scale to elements
    a_bst = [s * m_ * k_ for s in a_bst]
    b_bst = [s * k_ * n_ for s in b_bst]
    y_bst = [s * m_ * n_ for s in cg.contiguous_strides(batch)] if batch else []
    with k.strided_loop(batch or (1,), [a_bst or [0], b_bst or [0], y_bst or [0]], name="bt") as offs:
        a_off, b_off, y_off = offs
        matmul_rows(k, k.inp(0), a_off, (k_, 1), k.inp(1), b_off, (n_, 1), y_off,
                    (m_, k_, n_), y.dtype)
