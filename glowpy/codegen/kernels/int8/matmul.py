"""Integer matrix product (QMatMul): A [..., K] int8/uint8 times the constant B [N, K]^T with
int32 accumulation and per-column requantization. B is stored one row per output column, so
every dot product reads both operands contiguously (and the accumulator stays in a register)."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.registry import emits
from glowpy.codegen.kernels.int8 import requant_fast
from glowpy.codegen.kernels.int8.taps import channel_params
from glowpy.codegen.kernels.int8.quant import I32, finish, widen


@emits("QMatMul")
def emit_qmatmul(k):
    b = k.b
    t = k.attrs
    a, w, y = k.in_buf(0), k.in_buf(1), k.out_buf()
    n_, k_ = w.shape
    rows = int(np.prod(a.shape[:-1]))
    requant = t["out_dtype"] != "int32"
    q_c, s_c = (channel_params(k, 3), channel_params(k, 4)) if requant else (0, 0)
    short = requant_fast.plan(k, requant_fast.sum_bound(k, a.dtype, t["a_zp"])) \
        if requant else None
    if short is not None:
        short.prepare(k)
    acc_p = cg.alloca_in_entry(b, I32, "acc")
    zp = ir.Constant(I32, t["a_zp"])
    with k.for_range(rows, name="r") as r:
        a_row = b.mul(r, k.c(k_))
        with k.for_range(n_, name="n") as n:
            b.store(k.load(k.inp(2), n, np.int32), acc_p)
            w_row = b.mul(n, k.c(k_))
            with k.for_range(k_, name="k") as kk:
                av = widen(b, k.load(k.inp(0), b.add(a_row, kk), a.dtype), a.dtype)
                if t["a_zp"]:
                    av = b.sub(av, zp)
                wv = widen(b, k.load(k.inp(1), b.add(w_row, kk), w.dtype), w.dtype)
                b.store(b.add(b.load(acc_p), b.mul(av, wv)), acc_p)
            yi = b.add(b.mul(r, k.c(n_)), n)
            if short is not None:
                short.store(k, b.load(acc_p), short.channel(k, n), k.out(), yi, y.dtype)
            elif requant:
                q = q_c if q_c is not None else k.load(k.inp(3), n, np.int32)
                s = s_c if s_c is not None else k.load(k.inp(4), n, np.int32)
                finish(k, b.load(acc_p), q, s, k.out(), yi, y.dtype)
            else:
                k.store(b.load(acc_p), k.out(), yi)
