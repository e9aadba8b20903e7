"""QMatMul (fully connected layers) on the Arm M-profile DSP extension: the "dsp" variant for
int8 weights and int8/uint8 A.

Per row of A, outputs are taken BLOCK at a time. Down K four at a time, the word of A is split
once by SXTB16 into (a0, a2) and (a1, a3) and shared by the BLOCK outputs, each of which
takes its weight word, splits it the same way and adds two SMLADs: 3 + 5 * BLOCK
instructions for 4 * BLOCK multiply-accumulates (1.44 per MAC at BLOCK = 4; 4 accumulators,
A's lanes, the pointers and the counter fill the Armv7-M registers: BLOCK = 8 spills, the AD
autoencoder 443,320 instructions against 421,960). The weights are packed at compile time in
place of the model's (pack_blocks, same size): a block's words for one word of K are
adjacent, so one pointer and immediate offsets address them and two rows' words come in one
64-bit load (the AD autoencoder's layers 1.60 -> 1.50 instructions per MAC with loop and
requantization, at STEP 32).
The A zero point is folded into the bias (bias - a_zp * sum(w)), the K % 4 last products run
one by one, requantization is fused into the store (requant_fast where no rounding tie can occur)."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.accumulators import pack_constant
from glowpy.codegen.kernels.int8.conv_fast import load_word, smlad, sxtb16
from glowpy.codegen.kernels.int8.quant import I32, finish, widen
from glowpy.codegen.kernels.int8 import requant_fast
from glowpy.codegen.kernels.int8.taps import channel_params
from glowpy.codegen.registry import variant

BLOCK = 4
# K per iteration of the inner loop: the loop's increment, compare and branch are 3 of 26
# instructions per word, and LLVM schedules longer bodies better; a K of 128 (the AD
# autoencoder's hidden layers) runs as one straight pass. Measured on the M7 with the packed
# blocks, the AD autoencoder: 16 -> 423,260 instructions, 32 -> 421,960, 64 -> 441,950
# (spills), 128 -> 395,750 (+20.8 KB of code, its flash +7%; 128 for K = 128 alone and 32
# for K = 640: 398,150, +18.6 KB). A K not a multiple of STEP takes the largest of 32 .. 4
# dividing it (keyword spotting's and ResNet-8's K = 64 as before)
STEP = 128


def pack_blocks(w: np.ndarray) -> np.ndarray:
    """(N, K) weights -> per block of BLOCK rows, for each word of K the BLOCK rows' words in
    turn, then the rows' K % 4 last bytes row by row; the rows after the last whole block as
    they were. A block keeps its BLOCK * K bytes, so a row after the blocks stays at n * K."""
    n, kk = w.shape
    nb, k4 = n // BLOCK, kk - kk % 4
    head = w[:nb * BLOCK]
    words = head[:, :k4].reshape(nb, BLOCK, k4 // 4, 4).transpose(0, 2, 1, 3)
    words = words.reshape(nb, BLOCK * k4)
    blocks = np.concatenate([words, head[:, k4:].reshape(nb, BLOCK * (kk - k4))], axis=1)
    return np.concatenate([blocks.reshape(-1), w[nb * BLOCK:].reshape(-1)])


def block_words(k, w, off, kk: int, count: int):
    """The `count` rows' weight words at byte `off` of the packed table. In a whole block of an
    even K two rows' words are one aligned 64-bit load (the table starts 64-aligned, a block
    at a multiple of 4 * K bytes): LLVM addresses the pair from one base, 1.6 -> 1.5
    instructions per MAC on the AD autoencoder's layers, where word loads took more address
    arithmetic."""
    b = k.b
    for j in range(0, count, 2 if count == BLOCK and kk % 2 == 0 else 1):
        if count != BLOCK or kk % 2:
            yield load_word(k, w, b.add(off, k.c(4 * j)), 4 if count == BLOCK else 1)
            continue
        # (each pair right before its products: loading all four first schedules worse)
        pair = b.load(cg.gep(b, w, b.add(off, k.c(4 * j)), cg.I8), typ=cg.I64, align=8)
        yield b.trunc(pair, I32)
        yield b.trunc(b.lshr(pair, ir.Constant(cg.I64, 32)), I32)


def plan(k):
    """{"short": bool} on DSP cores for int8 weights and K >= 4; short: the tie-free
    requantization applies (requant_fast)."""
    a, w = k.in_buf(0), k.in_buf(1)
    if not (k.caps.dsp and np.dtype(w.dtype) == np.dtype(np.int8) and w.shape[1] >= 4
            and np.dtype(a.dtype) in (np.dtype(np.int8), np.dtype(np.uint8))
            and k.const(1) is not None and k.const(2) is not None):
        return None
    short = requant_fast.plan(k, requant_fast.sum_bound(k, a.dtype, k.attrs["a_zp"]))
    return {"short": short is not None}


@variant("QMatMul", "dsp", rank=10, plan=plan)
def emit(k, params):
    b = k.b
    t = k.attrs
    a, y = k.in_buf(0), k.out_buf()
    n_, kk = k.in_buf(1).shape
    rows = int(np.prod(a.shape[:-1]))
    requant = t["out_dtype"] != "int32"
    signed = np.dtype(a.dtype) == np.dtype(np.int8)
    q_c, s_c = (channel_params(k, 3), channel_params(k, 4)) if requant else (0, 0)
    bias = k.inp(2)
    if t["a_zp"]:
        wsum = k.const(1).astype(np.int64).sum(axis=1)
        folded = k.const(2).astype(np.int64).reshape(-1) - t["a_zp"] * wsum
        bias = k.add_table(folded.astype(np.int32), "mmbias")
    k4 = kk - kk % 4
    w = pack_constant(k, 1, pack_blocks(np.asarray(k.const(1))), "mm_blocks")
    short = requant_fast.plan(k, requant_fast.sum_bound(k, a.dtype, t["a_zp"])) \
        if requant and params["short"] else None
    if short is not None:
        short.prepare(k)
    shifts = k.const(4)  # every shift <= -2: rounding in the high word (quant.requantize)
    wide = requant and shifts is not None and int(np.asarray(shifts).max()) <= -2

    def block(r, n0, count):
        a_row = b.mul(r, k.c(kk))
        chans = [b.add(n0, k.c(j)) if j else n0 for j in range(count)]
        # a whole block reads its rows' words in turn (pack_blocks), a row after the last
        # block reads its own row (the same offsets as the model's layout)
        w_base = b.mul(n0, k.c(kk))
        init = [k.load(bias, ch, np.int32) for ch in chans]
        step = next(s for s in (STEP, 32, 16, 8, 4) if k4 % s == 0)
        with cg.for_range_carry(b, k4 // step, init, intp=k.intp, name="k4", unroll=False) as lp:
            accs = list(lp.values)
            for part in range(0, step, 4):
                off = b.add(b.mul(lp.index, k.c(step)), k.c(part))
                av = load_word(k, k.inp(0), b.add(a_row, off))
                ae, ao = sxtb16(k, av, signed=signed), sxtb16(k, av, True, signed)
                words = block_words(k, w, b.add(w_base, b.mul(off, k.c(count))), kk, count)
                for j, wv in enumerate(words):
                    wo = sxtb16(k, wv, True)  # (this order of the IR schedules best)
                    accs[j] = smlad(k, ao, wo, smlad(k, ae, sxtb16(k, wv), accs[j]))
            lp.carry(accs)
        accs = list(lp.results)
        for i in range(k4, kk):  # the last K % 4 products
            av = widen(b, k.load(k.inp(0), b.add(a_row, k.c(i)), a.dtype), a.dtype)
            for j in range(count):  # (the block's K % 4 bytes follow its words, row by row)
                wo = b.add(w_base, k.c(k4 * count + j * (kk - k4) + i - k4))
                wv = b.sext(k.load(w, wo, np.int8), I32)
                accs[j] = b.add(accs[j], b.mul(av, wv))
        for ch, acc in zip(chans, accs):
            yi = b.add(b.mul(r, k.c(n_)), ch)
            if short is not None:
                short.store(k, acc, short.channel(k, ch), k.out(), yi, y.dtype)
            elif requant:
                q = q_c if q_c is not None else k.load(k.inp(3), ch, np.int32)
                s = s_c if s_c is not None else k.load(k.inp(4), ch, np.int32)
                finish(k, acc, q, s, k.out(), yi, y.dtype, wide)
            else:
                k.store(acc, k.out(), yi)

    with k.for_range(rows, name="r") as r:
        if n_ >= BLOCK:
            with k.for_range(n_ // BLOCK, name="nb") as nb:
                block(r, b.mul(nb, k.c(BLOCK)), BLOCK)
        for n in range(n_ - n_ % BLOCK, n_):
            block(r, k.c(n), 1)
