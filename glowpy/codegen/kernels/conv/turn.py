"""Turning a channel-vectorized tile around: per pixel a vector of channels in, per channel a
run of pixels out (transpose), and the row-contiguous store of a tile with its bias, residual
and epilogue (store_rows); conv/channel.py's store routines and conv/pointwise_inplace.py's
short tiles use them."""
from __future__ import annotations


def row_start(k, s, n, oc, oh, ow0):
    """Offset of output channel oc's row oh at column ow0 (NCHW; a 1-D output: oh 0)."""
    b = k.b
    return b.add(b.mul(b.add(b.mul(n, k.c(s.m)), oc), k.c(s.ho * s.wo)),
                 b.add(b.mul(oh, k.c(s.wo)), ow0))


def store_rows(k, s, vec, tv, tfin, bias_ptr, vals, n, oc0, oh, ow0, npx, nvo, chmask):
    """vals[p][v]: pixel p, channel vector v of a tile at (n, channels oc0..., row oh, column
    ow0). Turned around in registers (per channel a short vector of pixels; the bias added
    before, one vector per pixel) and stored row-contiguous, onto the residual when
    accumulating; the other epilogue steps then run in a compact loop over the channels,
    re-reading the rows from L1: far less code than a copy of the steps per channel lane, and
    no scatter."""
    b = k.b
    w, pw = vec.w, tv.w
    accumulate = k.instr.attrs.get("accumulate") is not None
    # steps that are the same at every element run on the channel vectors, before the turn
    # (not after the residual, which is added to the stored rows): no second pass over memory
    early = not accumulate and tfin.uniform()
    start = row_start(k, s, n, oc0, oh, ow0)  # channel oc0's run; channel c's: c planes on
    chunks = [(p0, tuple(p0 + q < npx for q in range(pw))) for p0 in range(0, npx, pw)]
    for v in range(nvo):
        bias = vec.load(bias_ptr, b.add(oc0, k.c(v * w)), chmask[v]) if bias_ptr is not None else None
        for p0, store in chunks:
            cols = [vals[p][v] for p in range(p0, min(npx, p0 + pw))]
            if bias is not None:
                cols = [b.fadd(c, bias) for c in cols]
            if early:
                cols = [tfin.apply_uniform(c, vec) for c in cols]
            rows = transpose(b, cols, w, pw)
            for l in range(w):
                if not chmask[v][l]:
                    continue
                off = b.add(start, k.c((v * w + l) * s.ho * s.wo + p0))
                val = rows[l]
                if accumulate:
                    val = b.fadd(val, tv.load(k.out(), off, store))
                tv.store(val, k.out(), off, store)
    if not tfin.steps or not tfin.vector_ok or early:
        return  # (steps that are not vector code: module.py's sweep runs them afterwards)
    two_d = len(k.out_buf().shape) == 4 and s.rank == 2
    nch = sum(sum(m) for m in chmask)
    with k.for_range(nch, name="oc") as i:
        oc = b.add(oc0, i)
        off0 = row_start(k, s, n, oc, oh, ow0)
        for p0, store in chunks:
            off = b.add(off0, k.c(p0))
            pos = b.add(ow0, k.c(p0))
            tfin.finish(tv.load(k.out(), off, store), [n, oc, oh] if two_d else [n, oc], pos, off, store)


def transpose(b, cols, w: int, pw: int):
    """cols: up to pw vectors of w lanes (lane l = channel l of one pixel) -> w vectors of pw
    lanes (lane q = pixel q of one channel), with log2(pw) rounds of two-input shuffles."""
    from llvmlite import ir
    i32 = ir.IntType(32)
    ty = cols[0].type
    undef = ir.Constant(ty, ir.Undefined)
    vecs = list(cols) + [undef] * (pw - len(cols))
    content = [[(p, l) for l in range(w)] for p in range(pw)]
    unit = 1
    while unit < pw:
        lows, highs, clo, chi = [], [], [], []
        for i in range(0, len(vecs), 2):
            a, c = vecs[i], vecs[i + 1]
            ca, cc = content[i], content[i + 1]
            for half, dst, cdst in ((0, lows, clo), (w // 2, highs, chi)):
                idx, con = [], []
                for j in range(0, w // 2, unit):
                    idx += [half + j + t for t in range(unit)] + [w + half + j + t for t in range(unit)]
                    con += ca[half + j:half + j + unit] + cc[half + j:half + j + unit]
                dst.append(b.shuffle_vector(a, c, ir.Constant(ir.VectorType(i32, w), idx)))
                cdst.append(con)
        vecs, content = lows + highs, clo + chi
        unit *= 2
    rows = [None] * w
    for vv, con in zip(vecs, content):
        for g in range(0, w, pw):
            lane = con[g][1]
            assert all(con[g + q] == (q, lane) for q in range(pw))
            rows[lane] = vv if pw == w else b.shuffle_vector(
                vv, ir.Constant(ty, ir.Undefined), ir.Constant(ir.VectorType(i32, pw), list(range(g, g + pw))))
    return rows
