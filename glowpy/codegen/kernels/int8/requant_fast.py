"""The short requantization: SMMLA + ASR (+ SSAT/USAT and the store) where no rounding tie can
occur. Every int8 kernel whose sums are bounded at compile time uses it (QConv im2col,
pointwise_dsp, depthwise_dsp and direct, QMatMul dsp and direct, QAdd tables); the general
form (quant.requantize) stays for the rest.

qmath.requantize's "even" mode rounds p = acc * q by 2**n, n = 31 - shift, half to even. With
shift <= -2 (n = 32 + m, m = -1 - shift >= 1) the high word hi = p >> 32 (SMMUL) suffices for
the half-up rounding, (hi + 2**(m-1)) >> m; only a tie would need the low word and the
correction, and qmath.ties_possible proves from the bound of |acc| that none can occur. The
output zero point joins the rounding addend, (hi + (1 + 2 * y_zp) << (m-1)) >> m (exact: the
added y_zp * 2**m is a multiple of 2**m), so SMMLA adds both to the high word at once.
Channels with q == 0 give y_zp whatever their shift (m = 1 in their place).

Measured on the Cortex-M7 per output, beside the clamp and the store: the general wide form
with its tie test about 14 instructions; SMMUL + ADD + ASR + ADD y_zp (qconv's first form) 4;
this one 2 (SMMLA, ASR). Per channel: LDR q, LDR m (m = -1 - shift replaces the shift table),
SUB + LSL for the addend. A third table of addends instead cost more on the M7 (one more
pointer live through the blocks of im2col: spills; keyword spotting's 1x1 layers +1,900
instructions each) and 4 bytes of flash per channel."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.accumulators import pack_constant
from glowpy.codegen.kernels.int8.quant import I32, I64, clamp_store
from glowpy.ir import qmath

LIMIT = 1 << 31


def sum_bound(k, x_dtype, zp: int) -> np.ndarray | None:
    """Per output channel, the largest |bias + sum w * (x - zp)| over every input of type
    x_dtype (qmath.sum_bound), for a kernel whose inputs 1 and 2 are the constant weights (one
    row per output channel) and bias; None when they are not constant."""
    w, bias = k.const(1), k.const(2)
    if w is None or bias is None:
        return None
    return qmath.sum_bound(w, bias, x_dtype, zp)


@dataclass
class Short:
    """The plan of one instruction: per channel q and m (numpy int64), and the odd factor of
    the addend, k_odd = 1 + 2 * y_zp (addend = k_odd << (m - 1)), or 1 where y_zp * 2**m does
    not fit and y_zp is added after the shift (`post`)."""
    q: np.ndarray
    m: np.ndarray
    k_odd: int
    post: bool
    ptrs: tuple | None = None

    def prepare(self, k, q_input: int = 3, s_input: int = 4):
        """Emits the per-channel tables (call once, before the loops): q is input q_input, m
        replaces the shifts (input s_input) where this instruction is their only reader (else
        it is a table of its own); a value shared by every channel stays a constant."""
        def table(arr, ptr):
            return int(arr[0]) if _uniform(arr) else ptr()

        m = self.m.astype(np.int32)
        self.ptrs = (table(self.q, lambda: k.inp(q_input)),
                     table(self.m, lambda: pack_constant(k, s_input, m, "requant_m")))

    def channel(self, k, ch):
        """(q, m, addend) of channel `ch` (an IR index): ints, or i32 values loaded / computed
        once per channel (addend: SUB + LSL, as cheap as a third table and no flash)."""
        q, m = (v if isinstance(v, int) else k.load(v, ch, np.int32) for v in self.ptrs)
        if isinstance(m, int):
            return q, m, self.k_odd << (m - 1)
        b = k.b
        return q, m, b.shl(ir.Constant(I32, self.k_odd), b.sub(m, ir.Constant(I32, 1)))

    def store(self, k, acc, prm, ptr, off, dtype):
        """requantize(acc) + y_zp, clamped and stored; prm: channel()'s triple."""
        b = k.b
        q, m, addend = (ir.Constant(I32, v) if isinstance(v, int) else v for v in prm)
        hi = b.trunc(b.ashr(b.mul(b.sext(acc, I64), b.sext(q, I64)), ir.Constant(I64, 32)), I32)
        v = b.ashr(b.add(hi, addend), m)  # SMMLA, ASR
        attrs = k.attrs if self.post else {**k.attrs, "y_zp": 0}
        clamp_store(k, v, attrs, ptr, off, dtype)


def _uniform(a: np.ndarray) -> bool:
    return a.size > 0 and bool(np.all(a == a[0]))


def plan(k, bound, q=None, s=None) -> Short | None:
    """The short form for sums bounded by `bound` (per channel, or one bound for all), with the
    multipliers q and shifts s (default: the instruction's constant inputs 3 and 4); None
    where it is not exact: mode "away", non-constant parameters, a shift > -2 on a channel
    with q != 0, or a possible tie (qmath.ties_possible)."""
    q = k.const(3) if q is None else q
    s = k.const(4) if s is None else s
    if k.attrs.get("mode") != "even" or bound is None or q is None or s is None:
        return None
    bound = np.asarray(bound, np.int64).reshape(-1)
    n = max(bound.size, np.asarray(q).size, np.asarray(s).size)
    q, s, bound = (np.broadcast_to(np.asarray(v, np.int64).reshape(-1), (n,)).copy()
                   for v in (q, s, bound))
    if np.any((q != 0) & (s > -2)) or qmath.ties_possible(bound, q, s):
        return None
    m = np.where(q == 0, 1, -1 - s)
    # |acc * q| >> 32 at most (acc is an int32 whatever the bound says)
    hi = (np.minimum(bound, LIMIT) * np.abs(q) >> 32) + 1
    k_odd = 1 + 2 * int(k.attrs["y_zp"])
    if np.all(hi + abs(k_odd) * (np.int64(1) << (m - 1)) < LIMIT):
        return Short(q, m, k_odd, False)
    return Short(q, m, 1, True)
