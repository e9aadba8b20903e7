"""The im2col QConv's 4 x 2 blocks over four-position word columns (conv_columns.build_words:
1x1, stride 1, unpadded) for K <= 4 * MAX_GROUPS: everything a block of output channels
reads, in one stream per block, so that one pointer walks it.

Per block of C channels: the C folded biases, the weights as 16-bit lane pairs (wide_weights:
no SXTB16 in the loop, one load gives two channels' lanes), then the requantization's q, m
and addend per channel (requant_fast.Short; the addend precomputed instead of SUB + LSL per
channel). Twice the bytes of the int8 weights, so only where K is small. Measured on VWW int8
(Cortex-M7, QEMU instructions; flash = object read-only + constant region), after the word
columns (9,818,270, 293,080 B): K <= 8 (its layer 3) 9,778,520, 293,536 B; K <= 16 9,713,140,
294,880 B; K <= 32 9,558,280, 302,136 B; K <= 64 9,455,400, 329,232 B (+10.7% flash: over
issue 20's 10%). Layer 3 alone: with int8 weights and separate bias / q / m tables (four
pointers) 9,776,800, the stream 9,778,520: the stream is kept for the one pointer."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.int8.conv_fast import smlad
from glowpy.codegen.kernels.int8.quant import I32


MAX_GROUPS = 8  # groups of four k: K <= 32 (see above)


def wide_weights(wp: np.ndarray) -> np.ndarray:
    """conv_im2col.pack_weights' words as the 16-bit lane pairs SXTB16 would make of them: per
    word (w_a[k], w_b[k], w_a[k+2], w_b[k+2]) the words (w_a[k], w_a[k+2]) and (w_b[k],
    w_b[k+2]), adjacent. Twice the bytes: for K <= 8 only (256 B instead of 128 on VWW)."""
    return np.ascontiguousarray(wp.reshape(-1, 4)[:, [0, 2, 1, 3]], dtype=np.int16)


def _i32(v) -> np.ndarray:
    v = np.asarray(v, np.int64).reshape(-1)
    return ((v + (1 << 31)) % (1 << 32) - (1 << 31)).astype("<i4")


def stream(wp: np.ndarray, bias: np.ndarray, short, m: int, nch: int) -> np.ndarray:
    """The int32 stream: per block of nch channels [bias x nch, weights (wide_weights of the
    block), q x nch, m x nch, addend x nch]; channels past m (padding) have zero everything."""
    mb = -(-m // nch)

    def padded(v):
        out = np.zeros(mb * nch, np.int64)
        out[:m] = np.broadcast_to(np.asarray(v, np.int64).reshape(-1), (m,))
        return out.reshape(mb, nch)
    q, mm = padded(short.q), padded(short.m)
    add = np.where(np.arange(mb * nch).reshape(mb, nch) < m,
                   short.k_odd * (np.int64(1) << np.maximum(mm - 1, 0)), 0)
    w = wide_weights(wp).reshape(mb, -1).view("<i4")
    parts = [_i32(padded(bias)).reshape(mb, nch), w] + \
        [_i32(a).reshape(mb, nch) for a in (q, mm, add)]
    return np.ascontiguousarray(np.concatenate(parts, axis=1)).astype(np.int32).reshape(-1)


def block_words(groups: int, nch: int) -> int:
    """int32 words of one block of the stream."""
    return nch + groups * nch * 2 + 3 * nch


def pair(b, ptr):
    """The two words at ptr (8-aligned) as one 64-bit load: (low word, high word)."""
    v = b.load(b.bitcast(ptr, cg.I64.as_pointer()), typ=cg.I64, align=8)
    return b.trunc(v, I32), b.trunc(b.lshr(v, ir.Constant(cg.I64, 32)), I32)


def params(k, base, groups: int, nch: int, j: int):
    """(q, m, addend) of channel j of the block at `base` (i8*), for Short.store."""
    at = nch + groups * nch * 2
    return tuple(k.b.load(b_ptr(k, base, (at + r * nch + j) * 4), typ=I32, align=4)
                 for r in range(3))


def b_ptr(k, base, off: int):
    return k.b.bitcast(cg.gep(k.b, base, k.c(off), cg.I8), I32.as_pointer())


def group(k, accs, cp, wq, npos: int, nch: int):
    """One group of four k (conv_im2col's block_sums) at column pointer cp (i16*) and stream
    pointer wq (i8*): per half, per pair of channels one LDRD of their lanes, then per position
    its column word and two SMLADs."""
    b = k.b
    for half in range(2):  # (k, k+2) lanes, then (k+1, k+3)
        for pi in range(nch // 2):
            wa, wb = pair(b, cg.gep(b, wq, k.c(pi * 16 + half * 8), cg.I8))
            for q in range(npos):
                xv = b.load(cg.gep(b, cp, k.c(4 * q + 2 * half), cg.I16), typ=I32, align=4)
                for j, wv in ((2 * pi, wa), (2 * pi + 1, wb)):
                    accs[q * nch + j] = smlad(k, xv, wv, accs[q * nch + j])
    return accs, cg.gep(b, cp, k.c(npos * 4), cg.I16), cg.gep(b, wq, k.c(nch * 8), cg.I8)
