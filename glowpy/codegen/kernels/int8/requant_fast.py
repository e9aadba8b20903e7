"""Requantization of the convolution sums in four instructions where rounding ties cannot occur.

qmath.requantize's "even" mode rounds p = acc * q by 2**n, n = 31 - shift, half to even. With
shift <= -2 (n = 32 + m, m >= 1) the high word hi = p >> 32 (SMMUL) suffices for the half-up
rounding, (hi + 2**(m-1)) >> m; only a tie (p mod 2**n == 2**(n-1)) would need the low word
and a correction. A tie needs v2(p) = v2(acc) + v2(q) = n - 1, i.e. |acc| to be an odd
multiple of 2**(31 + m - v2(q)). The sums are bounded at compile time by
|bias| + max|x - x_zp| * sum|w| per channel, so where that bound is below 2**(31 + m - v2(q))
for every channel no tie can occur and the short form is exact. Channels with q == 0 give 0
whatever their shift (their shift is replaced by -2 in a table of their own).

The general form (quant.requantize, wide) costs about 14 instructions per output on the
Cortex-M7 (SMULL, then the tie test on both words); this one SMMUL, ADD, ASR plus the
zero point and the clamp."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from glowpy.codegen.kernels.int8.quant import I32, I64, clamp_store


def plan(k, w: np.ndarray | None, bias, x_dtype, x_zp: int):
    """The shift table to use (numpy int32) when the short form is exact for every channel;
    None otherwise. w: the constant weights (M, ...)."""
    q, s = k.const(3), k.const(4)
    if k.attrs["mode"] != "even" or w is None or bias is None or q is None or s is None:
        return None
    m_ = w.shape[0]
    q = np.broadcast_to(np.asarray(q, np.int64).reshape(-1), (m_,))
    s = np.broadcast_to(np.asarray(s, np.int64).reshape(-1), (m_,)).copy()
    info = np.iinfo(x_dtype)
    xmax = max(abs(info.min - x_zp), abs(info.max - x_zp))
    bound = np.abs(np.asarray(bias, np.int64).reshape(-1)) + \
        xmax * np.abs(w.reshape(m_, -1).astype(np.int64)).sum(axis=1)
    for ch in range(m_):
        if q[ch] == 0:
            s[ch] = -2
            continue
        e = (int(q[ch]) & -int(q[ch])).bit_length() - 1
        m = -1 - int(s[ch])
        if m < 1 or 31 + m - e <= 62 and (1 << (31 + m - e)) <= int(bound[ch]):
            return None
    return s.astype(np.int32)


def tie_free(sums: np.ndarray, q: int, s: int) -> bool:
    """Whether the short form is exact for every value in `sums` (all the accumulators an
    instruction can produce) with multiplier q and shift s."""
    if s > -2:
        return False
    n = 31 - s
    p = np.asarray(sums, np.int64) * q  # |sums| < 2**31, q < 2**31: no overflow
    return not bool(np.any((p & ((1 << n) - 1)) == 1 << (n - 1)))


def finish(k, acc, q, s, ptr, off, dtype, m=None):
    """requantize(acc) + y_zp, clamped and stored: q and s per channel (i32 values or ints),
    or instead of s, m = -1 - s (an i32 value: a table of m saves a per-channel instruction)."""
    b = k.b
    q64 = ir.Constant(I64, q) if isinstance(q, int) else b.sext(q, I64)
    hi = b.trunc(b.ashr(b.mul(b.sext(acc, I64), q64), ir.Constant(I64, 32)), I32)  # SMMUL
    if isinstance(s, int):
        m, half = ir.Constant(I32, -1 - s), ir.Constant(I32, 1 << (-2 - s))
    else:
        m = b.sub(ir.Constant(I32, -1), s) if m is None else m
        half = b.shl(ir.Constant(I32, 1), b.sub(m, ir.Constant(I32, 1)))
    clamp_store(k, b.ashr(b.add(hi, half), m), k.attrs, ptr, off, dtype)
