"""QConv on the Arm M-profile DSP extension as a register-blocked matrix product (the "im2col"
variant of QConv, for ungrouped convolutions with constant int8 weights).

Y[m, p] = bias'[m] + sum_k W[m, k] * X[k, p], k = (ic, kh, kw), blocked P positions x C output
channels (BLOCK) so that every operand word feeds several SMLADs:

* the columns: for a block of P output positions their input windows are copied once, as
  16-bit values, into one position-interleaved column on the stack: per group of four k, the
  four values of position 0, then of position 1, ..., each four stored as x[k], x[k+2],
  x[k+1], x[k+3], so that two word loads give the lane pairs SMLAD needs. The copy is shared
  by all M output channels. The input zero point is not subtracted: it is folded into the bias
  (bias' = bias - x_zp * sum_k W[m, k]) and taps in the padding hold x_zp, which the fold
  cancels exactly;
* the weights: re-laid out at compile time (in place when the layer is their only reader,
  pack_weights) so that per group of four k each pair of output channels (a, b) has two
  adjacent words, (w_a[k], w_b[k], w_a[k+2], w_b[k+2]) and (w_a[k+1], w_b[k+1], w_a[k+3],
  w_b[k+3]): SXTB16 gives channel a's lane pair of a word, SXTB16 ROR #8 channel b's, so
  only two weight lanes are live at a time; K and M are padded with zero weights to
  multiples of 4 and C;
* per group of four k the inner loop is 2P column loads, C weight loads, 2C SXTB16 and 2PC
  SMLAD for 4PC multiply-accumulates, with the P x C sums in registers (loop-carried), then
  requantized per channel and stored as the block ends."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.accumulators import pack_constant
from glowpy.codegen.kernels.int8.conv_columns import (build_border, build_border_taps,
                                                     build_column, build_taps, build_words,
                                                     slide, words_ok)
from glowpy.codegen.kernels.int8.conv_fast import load_word, smlad, sxtb16
from glowpy.codegen.kernels.int8.conv_shape import QConvShape, interior
from glowpy.codegen.kernels.int8 import im2col_stream as stream
from glowpy.codegen.kernels.int8.quant import I32

I16 = cg.I16
# output positions x output channels per block: 4PC multiply-accumulates per group for 2P + C
# loads, 2C SXTB16 and 2PC SMLAD; 8 sums, 2 weight lanes, a column word and 2 pointers fit the
# 13 registers. Measured on keyword spotting (Cortex-M7, QEMU instructions), inner loop
# indexing col[g * 4P + ...] and w[...]: 2x2 4.65M, 3x2 4.27M, 4x2 5.52M (loop strength
# reduction made one induction per load stream and the sums spilled); with the two pointers
# carried (block_sums): 4x2 3.97M, 2x4 4.27M.
BLOCK = (4, 2)
# K <= 8 (two groups, no loop: VWW's 1x1 layer over 8 channels): 3 x 2 blocks, the six sums,
# the column words and the requantization fit without the spills of 4 x 2. Measured on VWW
# (Cortex-M7, QEMU instructions): 4x2 9,953,170, 3x2 9,928,010, 5x2 9,961,380, 6x2 9,991,760,
# 2x2 10,038,990, 2x6 10,209,480; 3x2 for K = 16 too: 9,969,050 (worse).
SHORT_BLOCK = (3, 2)
# K <= 8 and 1x1 (conv_columns.words_ok): four positions, whose columns are built from one word
# of each input plane (build_words). VWW (its other 1x1 layers with word columns already):
# 4x2 9,805,950, 3x2 (per-position columns) 9,825,150, 4x4 10,020,230; with the stream
# (im2col_stream) 4x2 9,558,280, 4x4 9,709,770.
WORDS_BLOCK = (4, 2)
MAX_COLUMN_BYTES = 2560  # two positions' columns at most (K <= 640, as before the blocks)
# Columns on the stack (where column_scratch found no gap in the activation region: layers at
# the region's peak): more positions per block only while they fit in STACK_BYTES, or in what
# two columns take (the stack the kernel needed before it had blocks). 640 keeps the stack of
# ResNet-8, VWW and keyword spotting under 1 KiB (812, 784, 848 B measured with the runner's
# frame): ResNet-8's 32x32 layers (K = 144, at the peak) then run 2x4 blocks, 14.82M
# instructions against 14.54M with 4x2 blocks in 1152 B (1,380 B of stack).
STACK_BYTES = 640


def _k4(c: QConvShape) -> int:
    kk = c.c * int(np.prod(c.win.kernel))
    return kk + (-kk) % 4


def block_of(c: QConvShape):
    """(positions, channels) per block: SHORT_BLOCK for K <= 8; else up to BLOCK's positions,
    as many as the stack budget allows, and 2 x 4 where only two fit (the same 8 sums: with 2 x 2, ResNet-8 ran 17.42M
    instructions, with 2 x 4 16.85M; 4 x 2 is the better of the two where both fit: keyword
    spotting 4.02M against 4.27M, whose column words are then read by twice the channels);
    None when two positions' columns exceed MAX_COLUMN_BYTES."""
    col = _k4(c) * 2
    if 2 * col > MAX_COLUMN_BYTES:
        return None
    if _k4(c) <= 8:  # two groups: SHORT_BLOCK (see there), WORDS_BLOCK for 1x1
        return WORDS_BLOCK if words_ok(c) else SHORT_BLOCK
    p = min(BLOCK[0], max(STACK_BYTES, 2 * col) // col)
    return (2, 4) if p == 2 and c.m >= 4 else (p, BLOCK[1])


def unroll_of(groups: int) -> int:
    """Groups of four k per trip of the inner loop: all of them up to FLAT (no loop); else the
    largest count from UNROLL down to 8 that divides them and leaves at least two trips; else
    8, with the rest unrolled after the loop. At each trip's end LLVM spills some sums, so
    longer trips run fewer instructions; a single trip (no loop) let it hoist the column
    loads out of the loop over channel blocks and spill the column (opaque prevents that).
    Measured with 4x2 blocks (QEMU instructions, .text, stack): keyword spotting (K = 64: 16
    groups) 4.45M with 2 groups per trip, 4.22M with 4, 3.97M with 8; all 16 (no loop) 3.84M
    with 1,232 B of stack, and with the opaque column pointer 3.330M with 712 B (against
    3.450M with two trips of 8, 832 B); ResNet-8 (K = 144, 288, 576) 15.83M with 6 and 8
    (22.7 KB), 15.20M with 12 (26.6 KB), 15.02M with 18 (31.0 KB)."""
    if groups <= FLAT:
        return groups
    return next((u for u in range(UNROLL, 7, -1) if groups % u == 0 and groups // u >= 2), 8)


FLAT = 32
UNROLL = 18


STACK_COLUMNS = 512  # four positions' columns up to this stay on the stack (K <= 64)


def scratch_need(node) -> int | None:
    """Bytes of the four-position columns of a QConv node the kernel would run from a scratch
    buffer (column_scratch): ungrouped 2-D, constant int8 weights and bias, more than
    STACK_COLUMNS; None otherwise (the plan decides with the target's caps at codegen)."""
    x, w, bias = node.inputs[0], node.inputs[1], node.inputs[2]
    if node.attrs["group"] != 1 or len(x.shape) != 4 or w.const is None or \
            bias is None or bias.const is None or np.dtype(w.dtype) != np.int8:
        return None
    kk = int(np.prod(w.shape[1:]))
    need = 4 * (kk + (-kk) % 4) * 2
    return need if need > STACK_COLUMNS else None


def scratch_of(k):
    """The instruction's scratch output for the columns (column_scratch.place), or None."""
    outs = k.instr.outputs
    return outs[1] if len(outs) == 2 and outs[1].name.endswith("_columns") else None


def usable(c: QConvShape, weights, bias) -> bool:
    return c.dsp and c.g == 1 and c.w.dtype == np.int8 and len(c.win.in_size) == 2 and \
        weights is not None and bias is not None and block_of(c) is not None


def opaque(b, ptr):
    """ptr, through an empty inline asm with side effects: a value LLVM cannot prove loop
    invariant. Without a loop over the groups, the column loads are invariant in the loop over
    channel blocks, and LICM hoisted all of them out of it: the whole column copied into spill
    slots (keyword spotting's 1x1 layers: 1,228 B of stack). No instruction is emitted."""
    fn = ir.InlineAsm(ir.FunctionType(ptr.type, [ptr.type]), "", "=r,0", side_effect=True)
    return b.call(fn, [ptr])


def pack_weights(w: np.ndarray, nch: int) -> np.ndarray:
    """W (M, K) int8 -> per block of nch (even) channels, per group of four k, per pair of
    channels (a, b): the words (w_a[k], w_b[k], w_a[k+2], w_b[k+2]) and (w_a[k+1], w_b[k+1],
    w_a[k+3], w_b[k+3]); zero-padded to whole blocks and groups."""
    m, kk = w.shape
    mb = -(-m // nch)
    k4 = kk + (-kk) % 4
    wp = np.zeros((mb * nch, k4), np.int8)
    wp[:m, :kk] = w
    # [block][pair][member][group][j] -> [block][group][pair][j: 0 2 | 1 3][member]
    t = wp.reshape(mb, nch // 2, 2, k4 // 4, 4)[..., [0, 2, 1, 3]].reshape(
        mb, nch // 2, 2, k4 // 4, 2, 2)
    return np.ascontiguousarray(t.transpose(0, 3, 1, 4, 5, 2))


def folded_bias(w: np.ndarray, bias: np.ndarray, zp: int) -> np.ndarray:
    """bias - zp * sum_k W[m, k], wrapped to int32 as the accumulators wrap."""
    s = np.asarray(bias, np.int64).reshape(-1) - zp * w.astype(np.int64).sum(axis=1)
    return ((s + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)


def emit(k, c: QConvShape, n, emit_out, block, short=None):
    """The whole convolution of batch n, in blocks of `block` = (positions, channels); short:
    the requantization's requant_fast plan (prepared) where it applies."""
    b = k.b
    win = c.win
    m = c.w.shape[0]
    P, C = block
    k4 = _k4(c)
    groups = k4 // 4
    # k in the order (kh, kw, ic) for KxK windows over channels in fours (conv_columns:
    # tap-major columns, stride-1 neighbours slide), else (ic, kh, kw) (1x1: the same order;
    # its unrolled copy is the faster: VWW 11.73M instructions, 11.89M tap-major)
    tap_major = c.c % 4 == 0 and c.ktaps > 1
    w4 = np.asarray(k.const(1))
    w2 = (w4.transpose(0, 2, 3, 1) if tap_major else w4).reshape(m, -1)
    kw_ = win.kernel[1]
    sliding = tap_major and kw_ > 1 and win.strides[1] == 1 and win.dilations[1] == 1
    bias = folded_bias(w2, k.const(2), c.zp)
    # one stream per channel block (im2col_stream) for K <= 4 * MAX_GROUPS over word columns
    # (it carries requant_fast's parameters: none without the short requantization)
    wide = block == WORDS_BLOCK and words_ok(c) and groups <= stream.MAX_GROUPS and \
        short is not None
    if wide:
        wp = k.add_table(stream.stream(pack_weights(w2, C), bias, short, m, C), "dsp_stream")
        bias_p, stride = wp, stream.block_words(groups, C) * 4
    else:
        wp = pack_constant(k, 1, pack_weights(w2, C), "dsp_blocks")
        # (in place of the bias where this layer is its only reader: no flash for a second copy)
        bias_p = pack_constant(k, 2, bias, "bias_folded") if c.zp else k.inp(2)
    oh_, ow_ = win.out_size
    npos = oh_ * ow_
    if scratch_of(k) is not None:  # in the activation region (column_scratch)
        col = b.bitcast(k.out(1), I16.as_pointer())
    else:
        with b.goto_entry_block():  # (cgutils.alloca_in_entry, with a count)
            col = b.alloca(I16, size=ir.Constant(I32, P * k4), name="col")
        col.align = 8  # word (and doubleword) loads
    (r_lo, r_hi), (c_lo, c_hi) = interior(win)

    def interior_column(q, npb, oh, ow):
        if not tap_major:
            build_column(k, c, col, q, npb, n, oh, ow)
        elif not sliding:
            build_taps(k, c, col, q, npb, n, oh, ow)
        else:  # the previous position is the neighbour to the left, inside too: slide
            prev = b.and_(b.icmp_signed(">", q, k.c(0)), b.icmp_signed(">", ow, k.c(c_lo)))
            with b.if_else(prev) as (then, otherwise):
                with then:
                    slide(k, c, col, q, npb)
                    build_taps(k, c, col, q, npb, n, oh, ow, [kw_ - 1])
                with otherwise:
                    build_taps(k, c, col, q, npb, n, oh, ow)

    def column(q, npb, pos):
        oh, ow = b.sdiv(pos, k.c(ow_)), b.srem(pos, k.c(ow_))
        inner = b.and_(b.and_(b.icmp_signed(">=", oh, k.c(r_lo)), b.icmp_signed("<", oh, k.c(r_hi))),
                       b.and_(b.icmp_signed(">=", ow, k.c(c_lo)), b.icmp_signed("<", ow, k.c(c_hi))))
        if (r_lo, r_hi, c_lo, c_hi) == (0, oh_, 0, ow_):  # no padding anywhere
            interior_column(q, npb, oh, ow)
            return
        with b.if_else(inner) as (then, otherwise):
            with then:
                interior_column(q, npb, oh, ow)
            with otherwise:
                (build_border_taps if tap_major else build_border)(k, c, col, q, npb, n, oh,
                                                                   ow, k4)

    def block_sums(cb, npb: int, nc: int):
        """The npb x C sums of channel block cb over the column of npb positions (channels
        from nc on are padding: zero weights, no bias)."""
        if wide:
            base = cg.gep(b, wp, b.mul(cb, k.c(stride)), cg.I8)
            init = [b.load(stream.b_ptr(k, base, 4 * j), typ=I32, align=4) for j in range(C)]
        else:
            w_blk = b.mul(cb, k.c(groups * C * 4))
            init = [k.load(bias_p, b.add(b.mul(cb, k.c(C)), k.c(j)) if j else b.mul(cb, k.c(C)),
                           np.int32) if j < nc else ir.Constant(I32, 0) for j in range(C)]
        accs0 = [init[j] for q in range(npb) for j in range(C)]
        def group(accs, cp, wq):
            """One group of four k at column pointer cp (i16*) and weight pointer wq (i8*)."""
            both = [None] * npb
            if wide:
                return stream.group(k, accs, cp, wq, npb, C)
            for half in range(2):  # (k, k+2) lanes, then (k+1, k+3)
                for pi in range(C // 2):
                    ww = load_word(k, wq, k.c(pi * 8 + half * 4))
                    wa, wb = sxtb16(k, ww), sxtb16(k, ww, True)  # channels 2pi, 2pi+1
                    for q in range(npb):
                        # both words of position q where the first is used (adjacent,
                        # 8-aligned; LLVM pairs few into LDRD, but schedules the block with
                        # no spills: keyword spotting 3.330M -> 3.299M, VWW 9.974M ->
                        # 9.954M, ResNet-8 14.686M -> 14.679M; one at a time where first
                        # used: 3.457M -> 3.462M before, fewer live values)
                        if both[q] is None:
                            both[q] = [b.load(cg.gep(b, cp, k.c(4 * q + 2 * h), I16), typ=I32,
                                              align=8 if h == 0 else 4) for h in range(2)]
                        xv = both[q][half]
                        for j, wv in ((2 * pi, wa), (2 * pi + 1, wb)):
                            accs[q * C + j] = smlad(k, xv, wv, accs[q * C + j])
            return accs, cg.gep(b, cp, k.c(npb * 4), I16), cg.gep(b, wq, k.c(C * 4), cg.I8)

        # the column and weight pointers carried through the loop (one induction each: with
        # indices, loop strength reduction made more, and they pushed sums out of registers)
        cp0 = cg.gep(b, col, k.c(0), I16)
        wq0 = cg.gep(b, base, k.c(4 * C), cg.I8) if wide else cg.gep(b, wp, w_blk, cg.I8)
        unroll = unroll_of(groups)
        if unroll == groups:
            accs, cp, wq = accs0, opaque(b, cp0), wq0
            for _ in range(groups):
                accs, cp, wq = group(accs, cp, wq)
            return accs
        with cg.for_range_carry(b, groups // unroll, accs0 + [cp0, wq0], intp=k.intp, name="g",
                                unroll=False) as lp:
            accs, cp, wq = list(lp.values[:-2]), lp.values[-2], lp.values[-1]
            for _ in range(unroll):
                accs, cp, wq = group(accs, cp, wq)
            lp.carry(accs + [cp, wq])
        accs, cp, wq = list(lp.results[:-2]), lp.results[-2], lp.results[-1]
        for _ in range(groups % unroll):
            accs, cp, wq = group(accs, cp, wq)
        return accs

    def store(sums, cb, pos, npb: int, nc: int):
        for j in range(nc):
            ch = b.add(b.mul(cb, k.c(C)), k.c(j)) if j else b.mul(cb, k.c(C))
            o_plane = b.mul(b.add(b.mul(n, k.c(m)), ch), k.c(npos))
            prm = stream.params(k, cg.gep(b, wp, b.mul(cb, k.c(stride)), cg.I8), groups, C,
                                j) if wide else None
            for q in range(npb):
                at = b.add(o_plane, b.add(pos, k.c(q)) if q else pos)
                if wide:
                    short.store(k, sums[q * C + j], prm, k.out(), at, k.out_buf().dtype)
                else:
                    emit_out(sums[q * C + j], ch, at)

    def positions(pos, npb: int):
        if npb == 4 and words_ok(c):  # a word of each plane (conv_columns.build_words)
            build_words(k, c, col, n, pos, k4)
        else:
            with k.for_range(npb, name="q") as q:  # one copy of the copying code
                column(q, npb, b.add(pos, q))
        if m // C:
            with k.for_range(m // C, name="cb") as cb:
                store(block_sums(cb, npb, C), cb, pos, npb, C)
        if m % C:
            cb = k.c(m // C)
            store(block_sums(cb, npb, m % C), cb, pos, npb, m % C)

    if npos // P:
        with k.for_range(npos // P, name="pb") as pb:
            positions(b.mul(pb, k.c(P)), P)
    if npos % P:
        positions(k.c(npos - npos % P), npos % P)
