"""Resampling kernel for Resize, Upsample and Pad: one loop nest over the output reading the
op's per-dim tap tables (glowpy/ir/ops/taps.py).

Per output dim, in Python: affine dims (identity, constant padding) need no table and split
into fill / copy / fill ranges, so an innermost affine dim is a contiguous loop that
vectorizes (or becomes memcpy/memset); table dims get a table of input offsets (premultiplied
by the input stride, tap-major so each tap's entries are contiguous) and, when weighted, a
table of float weights, both in the constant region (Kernel.add_table); dims with invalid
coordinates add a byte table of validity flags. Tables are O(taps x sum of output dims), never
O(product). Each loop level extends the list of (input offset, weight) tap combinations of the
levels outside it, so weights are multiplied once per level, not per element; dims with wide
windows (antialias) instead sum their taps in a run-time loop around the innermost element, so
the code stays small."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.vectors import Simd, Vec
from glowpy.codegen.registry import emits
from glowpy.ir.ops.taps import Taps


@dataclass
class _Level:
    taps: Taps
    size: int
    in_st: int
    out_st: int


def _levels(taps, in_shape, out_shape):
    """Loop levels, with runs of identity dims merged and size-1 valid affine dims folded into
    a constant input offset."""
    in_st, out_st = cg.contiguous_strides(in_shape), cg.contiguous_strides(out_shape)
    levels, base = [], 0
    for d, t in enumerate(taps):
        if t.affine and t.size == 1 and t.lo == 0 and t.hi == 1:
            base += t.shift * in_st[d]
            continue
        ident = t.is_identity(in_shape[d])
        prev = levels[-1] if levels else None
        if ident and prev is not None and prev.taps.is_identity(prev.size) and \
                prev.in_st == in_st[d] * t.size and prev.out_st == out_st[d] * t.size:
            n = prev.size * t.size
            levels[-1] = _Level(Taps(n, shift=0, lo=0, hi=n), n, in_st[d], out_st[d])
            continue
        levels.append(_Level(t, t.size, in_st[d], out_st[d]))
    return levels, base


MIN_RUN = 16  # shifted-copy coordinates from which a table dim's interior loops on its own


def shifted_run(t: Taps) -> tuple[int, int, int] | None:
    """(lo, hi, shift): the longest run of output coordinates of a one-tap, unweighted, all-valid
    table dim reading input o + shift (Pad's reflect and edge modes: everything but the
    borders), when it is MIN_RUN long or more: that part loops as an affine dim, whose
    innermost copy vectorizes. Zen 4, AVX2 code: reflect-padding 64 x 128 x 128 by 3 301 ->
    100 us (onnxruntime 177-194)."""
    if t.idx.shape[0] != 1 or t.w is not None or t.valid is not None or t.size < MIN_RUN:
        return None
    d = t.idx[0] - np.arange(t.size)
    best, lo = (0, 0, 0), 0
    for o in range(1, t.size + 1):
        if o == t.size or d[o] != d[lo]:
            if o - lo > best[1] - best[0]:
                best = (lo, o, int(d[lo]))
            lo = o
    return best if best[1] - best[0] >= MIN_RUN else None


UNROLL_TAPS = 4  # dims with wider windows (antialias) sum their taps in a run-time loop
ROW_FLOATS = 4096  # row_pass's blended row on the stack: 16 KiB at most


def repeat_factor(lv: _Level) -> tuple[int, int] | None:
    """(f, n) when the level reads n contiguous input elements, each f times in a row (nearest
    upsampling by an integer factor along the innermost dim: torch's nn.Upsample), else None."""
    t = lv.taps
    if t.affine or t.w is not None or t.valid is not None or t.idx.shape[0] != 1 or \
            lv.in_st != 1 or lv.out_st != 1:
        return None
    n = int(t.idx[0].max(initial=-1)) + 1
    f = lv.size // n if n > 0 and lv.size % n == 0 else 0
    return (f, n) if f > 1 and np.array_equal(t.idx[0], np.arange(lv.size) // f) else None


def repeat_run(k, off, out_off, f: int, n_in: int, dtype):
    """Output run [out_off, out_off + f*n_in) = each of input[off : off + n_in] f times: a vector
    of input, f shuffles, f stores (the table loop costs a load of the table, a load and a store
    per output element: YOLO's 2x neck upsampling ran 3.2x onnxruntime's time). A vector is a
    float vector's bytes of any element type (32 int8 values on AVX2: the QDQ models' nearest
    upsampling on their integers, quant/moves.py)."""
    b = k.b
    ety = cg.llvm_type(dtype)
    v_w = Simd.of(k.caps).width * 4 // np.dtype(dtype).itemsize
    vty = ir.VectorType(ety, v_w)
    full = n_in // v_w
    if full:
        with k.for_range(full, name="rv") as j:
            v = b.load(cg.gep(b, k.inp(0), b.add(off, b.mul(j, k.c(v_w))), ety), typ=vty, align=1)
            dst = b.add(out_off, b.mul(j, k.c(v_w * f)))
            for q in range(f):
                lanes = ir.Constant(ir.VectorType(cg.I32, v_w), [(q * v_w + i) // f for i in range(v_w)])
                b.store(b.shuffle_vector(v, v, lanes), cg.gep(b, k.out(), b.add(dst, k.c(q * v_w)), ety),
                        align=1)
    if n_in % v_w:
        with k.for_range(n_in, start=full * v_w, name="rt") as j:
            x = k.load(k.inp(0), b.add(off, j), dtype)
            dst = b.add(out_off, b.mul(j, k.c(f)))
            for q in range(f):
                k.store(x, k.out(), b.add(dst, k.c(q)))


@emits("Resize", "Upsample", "Pad")
def emit_resample(k):
    b = k.b
    x, y = k.in_buf(0), k.out_buf()
    if y.nbytes == 0:
        return
    taps, fill = k.node.opdef.taps(k.node)
    levels, base = _levels(taps, x.shape, y.shape)
    ety = cg.llvm_type(y.dtype)
    fill_v = cg.const(ety, fill)
    weighted = any(lv.taps.w is not None for lv in levels)
    repeat = repeat_factor(levels[-1]) if levels and Simd.of(k.caps).width > 1 and \
        x.dtype.kind in "iuf" and x.dtype.itemsize <= 4 else None
    big = int(np.prod(x.shape)) >= 2 ** 31
    name = k.instr.op.lower()

    def fill_range(start, count):
        with k.for_range(count, name="f") as i:
            k.store(fill_v, k.out(), b.add(start, i))

    def tap(tab, o, j, size):
        """Offset and weight of tap j of output coordinate o (tables are tap-major)."""
        idx_tab, w_tab, itype = tab
        at = o if isinstance(j, int) and j == 0 else \
            b.add(o, k.c(j * size) if isinstance(j, int) else b.mul(j, k.c(size)))
        off = k.load(idx_tab, at, itype)
        if off.type.width < k.intp.width:
            off = b.sext(off, k.intp)
        elif off.type.width > k.intp.width:
            off = b.trunc(off, k.intp)
        return off, (k.load(w_tab, at, x.dtype) if w_tab is not None else None)

    def extend(combos, off, wj):
        return [(b.add(coff, off), wj if cw is None else (cw if wj is None else b.fmul(cw, wj)))
                for coff, cw in combos]

    def total(combos):
        if not weighted:
            return k.load(k.inp(0), combos[0][0], x.dtype)
        acc = None
        for off, w in combos:
            term = b.fmul(w, k.load(k.inp(0), off, x.dtype))
            acc = term if acc is None else b.fadd(acc, term)
        return acc

    def store(combos, out_off, valid, looped):
        if looped:  # wide windows: an accumulator and a tap loop per such dim
            acc_p = cg.alloca_in_entry(b, ety, "acc")
            b.store(cg.const(ety, 0), acc_p)

            def nest(j, cs):
                if j == len(looped):
                    b.store(b.fadd(b.load(acc_p), total(cs)), acc_p)
                    return
                tab, o, ntap, size = looped[j]
                with k.for_range(ntap, name=f"w{j}") as t:
                    nest(j + 1, extend(cs, *tap(tab, o, t, size)))
            nest(0, combos)
            acc = b.load(acc_p)
        else:
            acc = total(combos)
        if valid is not None:
            acc = b.select(valid, acc, fill_v)
        k.store(acc, k.out(), out_off)

    def level(i, combos, out_off, valid, looped):
        if i == len(levels):
            return store(combos, out_off, valid, looped)
        lv = levels[i]
        t = lv.taps
        if i == len(levels) - 1 and repeat is not None and len(combos) == 1 and not looped \
                and valid is None:
            return repeat_run(k, combos[0][0], out_off, *repeat, x.dtype)
        if t.affine:
            if t.lo > 0:
                fill_range(out_off, k.c(t.lo * lv.out_st))
            shifted_range(i, lv, combos, out_off, valid, looped, t.lo, t.hi, t.shift)
            if t.hi < t.size:
                fill_range(b.add(out_off, k.c(t.hi * lv.out_st)), k.c((t.size - t.hi) * lv.out_st))
            return
        ntap = t.idx.shape[0]
        tab = tables(lv)
        if i == len(levels) - 1 and blends_rows(lv, combos, valid, looped):
            return row_pass(lv, combos, out_off, tab)
        v_tab = k.add_table(t.valid.astype(np.uint8), f"{name}_ok") if t.valid is not None else None
        run = shifted_run(t)
        if run is not None:  # reflect/edge padding: the interior is a plain shifted copy
            lo, hi, shift = run
            table_range(i, lv, combos, out_off, valid, looped, tab, v_tab, ntap, 0, lo)
            shifted_range(i, lv, combos, out_off, valid, looped, lo, hi, shift)
            table_range(i, lv, combos, out_off, valid, looped, tab, v_tab, ntap, hi, t.size)
            return
        table_range(i, lv, combos, out_off, valid, looped, tab, v_tab, ntap, 0, lv.size)

    def tables(lv):
        """(input offsets, weights or None, offset type) of a table dim's taps."""
        t = lv.taps
        offs = t.idx * lv.in_st
        itype = np.int64 if big or offs.max(initial=0) >= 2 ** 31 else np.int32
        return (k.add_table(offs.astype(itype).reshape(-1), f"{name}_idx"),
                k.add_table(t.w.astype(x.dtype).reshape(-1), f"{name}_w") if t.w is not None else None,
                itype)

    def blends_rows(lv, combos, valid, looped) -> bool:
        """The innermost dim is a weighted table dim over contiguous input and the levels
        outside it weigh several input rows (bilinear, bicubic): row_pass applies."""
        t = lv.taps
        return (x.dtype == np.float32 and Simd.of(k.caps).width > 1 and len(combos) > 1
                and all(w is not None for _, w in combos) and t.w is not None
                and t.valid is None and not looped and valid is None and lv.in_st == 1
                and t.idx.shape[0] <= UNROLL_TAPS and int(t.idx.max()) < ROW_FLOATS)

    def row_pass(lv, combos, out_off, tab):
        """The input rows the outer levels weigh, blended once into a row on the stack
        (contiguous: a vector loop), then each output element from its taps in that row. Per
        output element of a bilinear 2-D resize that is 2 loads and 2 products instead of 4
        loads and 8 products (each pair of weights multiplied, then each input)."""
        t = lv.taps
        n_in = int(t.idx.max()) + 1
        row = cg.stack_block(b, ety, n_in, "rows")
        with k.for_range(n_in, name="rb") as j:
            acc = None
            for off, w in combos:
                term = b.fmul(w, k.load(k.inp(0), b.add(off, j), x.dtype))
                acc = term if acc is None else b.fadd(acc, term)
            b.store(acc, cg.gep(b, row, j, ety), align=4)
        with k.for_range(lv.size, name="rx") as o:
            acc = None
            for j in range(t.idx.shape[0]):
                off, w = tap(tab, o, j, lv.size)
                term = b.fmul(w, b.load(cg.gep(b, row, off, ety), typ=ety))
                acc = term if acc is None else b.fadd(acc, term)
            k.store(acc, k.out(), b.add(out_off, cg.linear(b, [o], [lv.out_st], 0, k.intp)))

    def shifted_range(i, lv, combos, out_off, valid, looped, lo, hi, shift):
        """Output coordinates [lo, hi) of dim i reading input o + shift."""
        if hi <= lo:
            return
        with k.for_range(hi, start=lo, name=f"a{i}") as o:
            step = cg.linear(b, [o], [lv.in_st], shift * lv.in_st, k.intp)
            level(i + 1, [(b.add(off, step), w) for off, w in combos],
                  b.add(out_off, cg.linear(b, [o], [lv.out_st], 0, k.intp)), valid, looped)

    def table_range(i, lv, combos, out_off, valid, looped, tab, v_tab, ntap, start, stop):
        """Output coordinates [start, stop) of table dim i."""
        if stop <= start:
            return
        with k.for_range(stop, start=start, name=f"t{i}") as o:
            new_valid = valid
            if v_tab is not None:
                ok = b.icmp_unsigned("!=", k.load(v_tab, o, np.uint8), cg.const(cg.I8, 0))
                new_valid = ok if valid is None else b.and_(valid, ok)
            out_next = b.add(out_off, cg.linear(b, [o], [lv.out_st], 0, k.intp))
            if ntap > UNROLL_TAPS:
                level(i + 1, combos, out_next, new_valid, looped + [(tab, o, ntap, lv.size)])
            else:
                new = []
                for j in range(ntap):
                    new += extend(combos, *tap(tab, o, j, lv.size))
                level(i + 1, new, out_next, new_valid, looped)

    level(0, [(k.c(base), None)], k.c(0), None, [])
