"""ConvPointwiseInPlace (a 1x1 convolution writing over its dying input, chosen by
glowpy/ir/inplace.py) with the register-blocked micro-kernel.

Same contract as the reference kernel (emit_reference, below), whose loop structure it keeps: for each
tile of `tile` positions (in order, batch outermost) every output channel of the tile is
computed from the input tile into the scratch buffer (outputs[1], M x tile), and only then
written back over the input tile through the epilogue. The scratch phase runs MR output
channels x NV vectors of positions at a time with weights packed [MR block][C][MR]. Falls back
to the reference kernel for what it does not cover."""
from __future__ import annotations

import numpy as np

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.accumulators import Acc, const_input, pack_constant
from glowpy.codegen.kernels.epilogue import extras, immediate, run_steps
from glowpy.codegen.kernels.tiles import Shape, _blocks, choose_tile
from glowpy.codegen.kernels.vector_epilogue import Finisher
from glowpy.codegen.kernels.vectors import Simd, Vec
from glowpy.codegen.registry import variant
from glowpy.ir import epilogue


def plan(k):
    """{} for float32 with constant weights, else None (the reference kernel)."""
    x, w, y = k.in_buf(0), k.in_buf(1), k.out_buf(0)
    bias = k.in_buf(2)
    if any(b.dtype != np.float32 for b in (x, w, y)) or const_input(k, 1) is None or \
            (bias is not None and bias.dtype != np.float32):
        return None
    return {}


@variant("ConvPointwiseInPlace", "vector", rank=10, plan=plan)
def emit_vector(k, params):
    x, y = k.in_buf(0), k.out_buf(0)
    bias = k.in_buf(2)
    b = k.b
    simd = Simd.of(k.caps)
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
        from glowpy.codegen.kernels.conv.channel_plan import choose
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
        cg.for_runs(b, count, nr, body, k.intp, "q")

    def chan_block(n, t0, p0, npx, o0, r, woff):
        """scratch[o0 + l][p0:p0+npx] for the r channels of a block, channel-vectorized."""
        from glowpy.codegen.kernels.conv.turn import transpose
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
        return  # module.py's sweep applies the remaining steps in place afterwards
    k.epilogue_done = True


def _spatial_offset(k, p, shape, strides):
    """Offset of flat spatial position p (IR) for an operand with these spatial strides."""
    b = k.b
    if all(s == 0 for s in strides):
        return k.c(0)
    if list(strides) == cg.contiguous_strides(shape):
        return p
    idx, rem = [], p
    for d, st in zip(shape, cg.contiguous_strides(shape)):
        q = b.udiv(rem, k.c(st)) if st > 1 else rem
        rem = b.urem(rem, k.c(st)) if st > 1 else k.c(0)
        idx.append(q)
    return cg.linear(b, idx, strides, 0, k.intp)


@variant("ConvPointwiseInPlace", "reference", rank=0)
def emit_reference(k, params=None):
    """y = W x + B for a 1x1 convolution whose output overwrites its (dying) input.

    For each tile of `tile` spatial positions: every output channel's tile is accumulated into
    the scratch buffer from the input tile of every channel, the epilogue runs, and the result
    is written back. Writing y[oc, tile] clobbers only x[oc, tile] (already read) or bytes past
    the input (lowering checks N == 1 or M <= C), so it is safe in place. Tile lengths are
    static (full tiles, then one tail) so the innermost loop unrolls and its accumulators stay
    in registers across the input-channel loop."""
    b = k.b
    x, y = k.in_buf(0), k.out_buf(0)
    n_, c = x.shape[:2]
    m = y.shape[1]
    sp = x.shape[2:]
    plane = int(np.prod(sp))
    tile = int(k.instr.attrs["tile"])
    with k.for_range(n_, name="n") as n:
        full = plane // tile
        if full:
            with k.for_range(full, name="tile") as ti:
                _pointwise_tile(k, n, b.mul(ti, k.c(tile)), tile, c, m, plane, sp)
        if plane % tile:
            _pointwise_tile(k, n, k.c(full * tile), plane % tile, c, m, plane, sp)
    k.epilogue_done = True


def _pointwise_tile(k, n, t0, tl: int, c: int, m: int, plane: int, sp):
    b = k.b
    x, w, y = k.in_buf(0), k.in_buf(1), k.out_buf(0)
    scratch = k.out(1)
    tile = int(k.instr.attrs["tile"])
    dt = y.dtype
    f = cg.llvm_type(dt)
    bias = k.inp(2)
    xb = b.add(b.mul(n, k.c(c * plane)), t0)
    yb = b.add(b.mul(n, k.c(m * plane)), t0)
    loaded = [j for j in extras(k) if immediate(k, j) is None]
    bst = {j: cg.broadcast_strides(k.in_buf(j).shape, y.shape) for j in loaded}
    ocb = 4 if m % 4 == 0 else 2 if m % 2 == 0 else 1  # output channels sharing each x load
    with k.for_range(m // ocb, name="ocb") as ob:
        oc0 = b.mul(ob, k.c(ocb))
        for j in range(ocb):
            oc = b.add(oc0, k.c(j))
            init = k.load(bias, oc, dt) if bias is not None else cg.const(f, 0)
            for t in range(tl):
                k.store(init, scratch, b.add(b.mul(oc, k.c(tile)), k.c(t)))
        with k.for_range(c, name="ic") as ic:
            ws = [k.load(k.inp(1), b.add(b.mul(b.add(oc0, k.c(j)), k.c(c)), ic), w.dtype)
                  for j in range(ocb)]
            xrow = b.add(xb, b.mul(ic, k.c(plane)))
            for t in range(tl):
                xv = k.load(k.inp(0), b.add(xrow, k.c(t)), x.dtype)
                for j in range(ocb):
                    si = b.add(b.mul(b.add(oc0, k.c(j)), k.c(tile)), k.c(t))
                    k.store(b.fadd(k.load(scratch, si, dt), b.fmul(ws[j], xv, flags=("contract",)),
                                   flags=("contract",)), scratch, si)
    with k.for_range(m, name="oc") as oc:
        row = b.mul(oc, k.c(tile))
        yrow = b.add(yb, b.mul(oc, k.c(plane)))
        with k.for_range(tl, name="t") as t:
            v = k.load(scratch, b.add(row, t), dt)
            p = b.add(t0, t)

            def get(j, oc=oc, p=p):
                imm = immediate(k, j)
                if imm is not None:
                    return imm
                st = bst[j]
                off = b.add(cg.linear(b, [n, oc], st[:2], 0, k.intp), _spatial_offset(k, p, sp, st[2:]))
                return k.load(k.inp(j), off, k.in_buf(j).dtype)

            k.store(run_steps(k, v, get), k.out(0), b.add(yrow, t))
