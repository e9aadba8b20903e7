"""ConvPointwiseInPlace (a 1x1 convolution writing over its dying input, chosen by
glowpy/ir/inplace.py) with the register-blocked micro-kernel.

Same contract as the reference kernel in fused.py, whose loop structure it keeps: for each
tile of `tile` positions (in order, batch outermost) every output channel of the tile is
computed from the input tile into the scratch buffer (outputs[1], M x tile), and only then
written back over the input tile through the epilogue. The scratch phase runs MR output
channels x NV vectors of positions at a time with weights packed [MR block][C][MR]. Falls back
to fused.py's kernel for what it does not cover."""
from __future__ import annotations

import numpy as np

from glowpy.codegen.kernels import emits, fused
from glowpy.codegen.kernels.conv_tiling import Shape, _blocks, choose_tile
from glowpy.codegen.kernels.gemm_micro import Acc, Simd, Vec, const_input, pack_constant, simd_of
from glowpy.codegen.kernels.vec_epilogue import Finisher
from glowpy.ir import epilogue


def _fast(k) -> bool:
    x, w, y = k.in_buf(0), k.in_buf(1), k.out_buf(0)
    bias = k.in_buf(2)
    if any(b.dtype != np.float32 for b in (x, w, y)) or const_input(k, 1) is None or \
            (bias is not None and bias.dtype != np.float32):
        return False
    b = k.b
    simd = simd_of(k.target)
    vec = Vec(k, simd)
    n_, c = x.shape[:2]
    m = y.shape[1]
    plane = int(np.prod(x.shape[2:]))
    cap = int(k.instr.attrs["tile"]) * m  # floats of scratch
    # Output channels from C up lie past the input's bytes (lowering allows M > C only with
    # one image): they are computed straight into the output over the whole plane first.
    # The first min(C, M) channels overwrite the input and go through the scratch, in tiles
    # as long as the scratch allows for that many channels.
    direct = m - c if m > c else 0
    mt = m - direct
    tile = min(plane, max(1, cap // mt))
    if vec.w > 1 and tile > vec.w:
        tile = tile // vec.w * vec.w
    wmat = const_input(k, 1).reshape(m, c)
    mr, nv, _ = choose_tile(simd, mt, tile, 1)
    chan = None
    if vec.w > 1 and tile <= 2 * vec.w and mt >= vec.w:
        # a scratch-sized tile is a vector or two of positions: broadcast the positions and
        # run the channels in vectors instead (conv_chan's orientation), turned around into
        # the scratch rows
        from glowpy.codegen.kernels.conv_chan import choose
        chan = choose(simd, Shape(1, c, mt, 1, 1, tile, 1, tile, 1, 1, 1, 1, 1, 1, 0, 0, 1), False)
        if chan is not None:
            mr = chan[2] * vec.w
    mr_d, nv_d, _ = choose_tile(simd, direct, plane, 1) if direct else (1, 1, 0)
    parts, offs = [], {}

    def pack(lo, hi, r):
        full, tail = _blocks(hi - lo, r)
        for o, rr in [(lo + i * r, r) for i in range(full)] + ([(lo + full * r, tail)] if tail else []):
            offs[(o, rr)] = sum(p.size for p in parts)
            parts.append(wmat[o:o + rr].T.reshape(-1))
    pack(0, mt, mr)
    if direct:
        pack(mt, m, mr_d)
    wp = pack_constant(k, 1, np.concatenate(parts), "packed_w")
    scratch = k.out(1)
    fin = Finisher(k, vec, y.shape[2:])

    def blocks(lo, hi, r, body):
        full, tail = _blocks(hi - lo, r)
        if full == 1:
            body(k.c(lo), r, offs[(lo, r)])
        elif full > 1:
            with k.for_range(full, name="ob") as ob:
                body(b.add(k.c(lo), b.mul(ob, k.c(r))), r,
                     b.add(k.c(offs[(lo, r)]), b.mul(ob, k.c(r * c))))
        if tail:
            body(k.c(lo + full * r), tail, offs[(lo + full * r, tail)])

    def compute(n, p0, count, r, nvc, o0, woff, emit):
        """acc[i][j] = W[o0 + i] . x[n, :, p0 + j*w + lane] for `count` positions."""
        masks = [tuple(j * vec.w + l < count for l in range(vec.w)) for j in range(nvc)]
        acc = Acc(vec, r, nvc)
        xb = b.add(b.mul(n, k.c(c * plane)), p0)
        with acc.loop(k, c, name="ic") as ic:
            wo = b.add(woff if not isinstance(woff, int) else k.c(woff), b.mul(ic, k.c(r)))
            av = [k.load(wp, b.add(wo, k.c(i)), np.float32) for i in range(r)]
            xr = b.add(xb, b.mul(ic, k.c(plane)))
            bv = [vec.load(k.inp(0), b.add(xr, k.c(j * vec.w)), masks[j]) for j in range(nvc)]
            acc.fma(av, bv)
        for i in range(r):
            oc = b.add(o0, k.c(i))
            bias_v = vec.splat(k.load(k.inp(2), oc, np.float32)) if bias is not None else None
            for j in range(nvc):
                val = acc.value(i, j)
                if bias_v is not None:
                    val = b.fadd(val, bias_v)
                emit(n, oc, b.add(p0, k.c(j * vec.w)), j, val, masks[j])

    def to_output(n, oc, p, j, val, mask):
        fin.finish(val, [n, oc], p, b.add(b.mul(b.add(b.mul(n, k.c(m)), oc), k.c(plane)), p), mask)

    def chunks(count, nr, body):
        """body(start, n) over [0, count) in runs of nr: a loop over full runs, then the rest."""
        full, rest = divmod(count, nr)
        if full == 1:
            body(k.c(0), nr)
        elif full > 1:
            with k.for_range(full, name="q") as q:
                body(b.mul(q, k.c(nr)), nr)
        if rest:
            body(k.c(full * nr), rest)

    def chan_block(n, t0, p0, npx, o0, r, woff):
        """scratch[o0 + l][p0:p0+npx] for the r channels of a block, channel-vectorized."""
        from glowpy.codegen.kernels.conv_chan import transpose
        nvo = -(-r // vec.w)
        chmask = [tuple(v * vec.w + l < r for l in range(vec.w)) for v in range(nvo)]
        acc = Acc(vec, npx, nvo)
        xb = b.add(b.mul(n, k.c(c * plane)), b.add(t0, k.c(p0)))
        with acc.loop(k, c, name="ic") as ic:
            wo = b.add(woff if not isinstance(woff, int) else k.c(woff), b.mul(ic, k.c(r)))
            bv = [vec.load(wp, b.add(wo, k.c(v * vec.w)), chmask[v]) for v in range(nvo)]
            xr = b.add(xb, b.mul(ic, k.c(plane)))
            av = [k.load(k.inp(0), b.add(xr, k.c(p)), np.float32) for p in range(npx)]
            acc.fma(av, bv)
        pw = 1
        while pw < npx:
            pw *= 2
        tv = Vec(k, Simd(pw, simd.registers, simd.cheap_masks))
        store = tuple(q < npx for q in range(pw))
        for v in range(nvo):
            cols = [acc.value(p, v) for p in range(npx)]
            if bias is not None:
                bv = vec.load(k.inp(2), b.add(o0, k.c(v * vec.w)), chmask[v])
                cols = [b.fadd(col, bv) for col in cols]
            rows = transpose(b, cols, vec.w, pw)
            for l in range(vec.w):
                if chmask[v][l]:
                    oc = b.add(o0, k.c(v * vec.w + l))
                    tv.store(rows[l], scratch, b.add(b.mul(oc, k.c(tile)), k.c(p0)), store)

    def tile_at(n, t0, tl: int):
        if chan is not None:
            for p0 in range(0, tl, chan[1]):
                blocks(0, mt, mr, lambda o0, r, wo, p0=p0: chan_block(
                    n, t0, p0, min(chan[1], tl - p0), o0, r, wo))
            writeback(n, t0, tl)
            return
        def to_scratch(n_, oc, p, j, val, mask):
            vec.store(val, scratch, b.add(b.mul(oc, k.c(tile)), b.sub(p, t0)), mask)
        # scratch[oc][c0:c0+NR] = bias + W x, NR positions at a time (a loop: one copy of code)
        chunks(tl, nv * vec.w, lambda c0, cnt: blocks(0, mt, mr, lambda o0, r, wo: compute(
            n, b.add(t0, c0), cnt, r, -(-cnt // vec.w), o0, wo, to_scratch)))
        writeback(n, t0, tl)

    def writeback(n, t0, tl):
        """The scratch rows written back over the consumed input tile, through the epilogue."""
        with k.for_range(mt, name="oc") as oc:
            def one(j0, cnt):
                mask = tuple(l < cnt for l in range(vec.w))
                val = vec.load(scratch, b.add(b.mul(oc, k.c(tile)), j0), mask)
                to_output(n, oc, b.add(t0, j0), 0, val, mask)
            chunks(tl, vec.w, one)

    with k.for_range(n_, name="n") as n:
        if direct:
            nr_d = nv_d * vec.w
            blocks(mt, m, mr_d, lambda o0, r, wo: chunks(plane, nr_d, lambda p0, cnt: compute(
                n, p0, cnt, r, -(-cnt // vec.w), o0, wo, to_output)))
        chunks(plane, tile, lambda t0, tl: tile_at(n, t0, tl))
    if not (fin.vector_ok or not epilogue.steps(k.node)):
        return True  # module.py's sweep applies the remaining steps in place afterwards
    k.epilogue_done = True
    return True


_reference = fused.emit_conv_pointwise_inplace


@emits("ConvPointwiseInPlace")
def emit_conv_pointwise_inplace(k):
    if not _fast(k):
        _reference(k)
