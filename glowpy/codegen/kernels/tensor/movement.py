"""Data-movement kernels: Transpose, Concat, Split, Slice, Gather. All but Gather are one
strided copy: a loop nest over a shape with a source and a destination stride per dim."""
from __future__ import annotations

import numpy as np

from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.vectors import Simd, Vec
from glowpy.codegen.registry import emits


def strided_copy(k, src, src_off, src_st, dst, dst_off, dst_st, shape, dtype):
    """dst[dst_off + idx . dst_st] = src[src_off + idx . src_st] over `shape`. An innermost
    loop that gathers (source stride past 1) is kept rolled: LLVM unrolled a short one in
    full, vectorized the loop around it along the source's contiguous dim and spent the
    compile on the thousands of scalar stores that made (an int8 (2,3,33,70) transpose to
    (3,70,2,33): 56 s of optimization in AVX2 code, 0.4 s rolled)."""
    _, (sst, _) = cg.collapse(shape, [src_st, dst_st])
    with k.strided_loop(shape, [src_st, dst_st], [src_off, dst_off],
                        unroll=False if abs(sst[-1]) > 1 else None) as (i, o):
        k.store(k.load(src, i, dtype), dst, o)


LINE = 64  # cache line bytes (x86, Arm A-profile)


def tiled_copy(k, src, src_st, dst, dst_st, shape, dtype):
    """strided_copy of a layout change that reads and writes different dims contiguously (a
    transpose): the dim the source runs along (stride 1) and the destination's last dim go in
    tiles of one cache line of elements each, so a tile reads and writes T lines instead of
    the T*T lines an element-order walk touches on its strided side. ConvNeXt-T's transposes,
    AVX2 Zen 3, best of 10 alternating runs (Mcycles): (1,56,56,96) -> NCHW 0.64 -> 0.28, back
    0.40 -> 0.26, (1,14,14,384) -> NCHW 0.23 -> 0.06, back 0.05 -> 0.06. Float tiles on vector
    targets are as wide as a vector and transposed in registers (register_tile): SegFormer-B0's
    largest, (1, 16384, 256) -> (1, 256, 16384), 32.3 -> 4.7 Mcycles in AVX-512 code and
    9.6 -> 6.3 in AVX2 code (-instrument-profile, min of 3 rounds). One-byte tiles on vector
    targets are 16 x 16, one 128-bit register a row (every vector ISA here has one), the same
    rounds of shuffles. Element tiles of 64 bytes ran int8 transposes at 3-3.6x onnxruntime's
    time; in AVX2 code on the Zen 3 (op_probe-style, best of 5 alternating rounds):
    (1,56,56,96) -> NCHW 158 -> 36 us (onnxruntime 39-44), (1,85,8400) -> (1,8400,85)
    270 -> 122 us (88-90: its last 5 columns still go element by element)."""
    shape, (sst, dstt) = cg.collapse(shape, [src_st, dst_st])
    t = LINE // np.dtype(dtype).itemsize
    dl = len(shape) - 1  # dst stride 1 (collapse keeps the last dim contiguous)
    ds = [d for d in range(dl) if sst[d] == 1]
    if dstt[dl] != 1 or sst[dl] == 1 or not ds or t < 2:
        return strided_copy(k, src, 0, sst, dst, 0, dstt, shape, dtype)
    d = ds[0]
    simd = Simd.of(k.caps)
    floats = np.dtype(dtype) == np.float32 and simd.width > 1
    byte = np.dtype(dtype).itemsize == 1 and simd.width > 1
    if floats:  # a tile is as many vectors as a vector has lanes (see register_tile)
        t = simd.width
    elif byte:
        t = BYTE_TILE
    registers = floats or byte
    nd, nl = shape[d] // t * t, shape[dl] // t * t
    rest = [i for i in range(dl) if i != d]
    if nd and nl and registers:
        tshape = [shape[i] for i in rest] + [nd // t, nl // t]
        tst = [[st[i] for i in rest] + [t * st[d], t * st[dl]] for st in (sst, dstt)]
        vec = Vec(k, simd) if floats else None  # (16 float lanes are BYTE_TILE wide too)
        with k.strided_loop(tshape, tst) as (i, o):
            if floats:
                register_tile(vec, src, i, sst[dl], dst, o, dstt[d])
            else:
                byte_tile(k, src, i, sst[dl], dst, o, dstt[d])
    elif nd and nl:  # [rest..., d / T, last / T, T, T]
        tshape = [shape[i] for i in rest] + [nd // t, nl // t, t, t]
        tst = [[st[i] for i in rest] + [t * st[d], t * st[dl], st[d], st[dl]] for st in (sst, dstt)]
        strided_copy(k, src, 0, tst[0], dst, 0, tst[1], tshape, dtype)
    if nd < shape[d]:  # the rows of d past the tiles, every column
        part = list(shape)
        part[d] -= nd
        strided_copy(k, src, nd * sst[d], sst, dst, nd * dstt[d], dstt, part, dtype)
    if nl < shape[dl] and nd:  # the last columns of the tiled rows
        part = list(shape)
        part[d], part[dl] = nd, shape[dl] - nl
        strided_copy(k, src, nl * sst[dl], sst, dst, nl * dstt[dl], dstt, part, dtype)


def register_tile(vec, src, src_off, src_row, dst, dst_off, dst_row):
    """A W x W float tile (W: the vector's lanes) transposed in registers: W vector loads of
    source rows src_row apart, log2(W) rounds of two-input shuffles that swap the off-diagonal
    halves of every 2h x 2h block (h = W/2, ..., 1), W vector stores of destination rows
    dst_row apart. Left to LLVM, the element loop of a tile became gathers on AVX-512 (vgatherdps,
    slow on a Zen 4): SegFormer-B0's transposes of tokens to maps and back took 144 Mcycles
    against 39 in AVX2 code; the model was 1.03x onnxruntime's time there, 0.81 in AVX2 code."""
    b, w = vec.b, vec.w
    rows = transposed(b, [vec.load(src, b.add(src_off, vec.k.c(c * src_row))) for c in range(w)])
    for a in range(w):
        vec.store(rows[a], dst, b.add(dst_off, vec.k.c(a * dst_row)))


BYTE_TILE = 16  # one-byte elements a row of a register tile: 128 bits


def byte_tile(k, src, src_off, src_row, dst, dst_off, dst_row):
    """register_tile of one-byte elements, BYTE_TILE x BYTE_TILE."""
    b, w, et = k.b, BYTE_TILE, cg.I8
    ty = ir.VectorType(et, w)
    rows = transposed(b, [b.load(cg.gep(b, src, b.add(src_off, k.c(c * src_row)), et), typ=ty,
                                 align=1) for c in range(w)])
    for a in range(w):
        b.store(rows[a], cg.gep(b, dst, b.add(dst_off, k.c(a * dst_row)), et), align=1)


def transposed(b, rows: list) -> list:
    """The W x W tile of W row vectors (W lanes each) as its W column vectors (register_tile's
    rounds)."""
    w = len(rows)
    mask = ir.VectorType(ir.IntType(32), w)
    h = w // 2
    while h:
        # rows i and j = i + h of each block: i keeps its lanes of even h-runs and takes j's
        # even runs into its odd ones; j takes i's odd runs and keeps its own odd ones
        lo = ir.Constant(mask, [l if l // h % 2 == 0 else w + l - h for l in range(w)])
        hi = ir.Constant(mask, [l + h if l // h % 2 == 0 else w + l for l in range(w)])
        out = list(rows)
        for i in range(w):
            if i // h % 2 == 0:
                out[i] = b.shuffle_vector(rows[i], rows[i + h], lo)
                out[i + h] = b.shuffle_vector(rows[i], rows[i + h], hi)
        rows, h = out, h // 2
    return rows


@emits("Transpose")
def emit_transpose(k):
    x, y = k.in_buf(0), k.out_buf()
    perm = k.node.opdef.perm(k.node)
    st = cg.contiguous_strides(x.shape)
    tiled_copy(k, k.inp(0), [st[p] for p in perm], k.out(), cg.contiguous_strides(y.shape),
               y.shape, y.dtype)


@emits("Concat")
def emit_concat(k):
    y = k.out_buf()
    ax = k.node.attrs["axis"]
    yst = cg.contiguous_strides(y.shape)
    pos = 0
    for j, x in enumerate(k.instr.inputs):
        if x is None:
            continue
        strided_copy(k, k.inp(j), 0, cg.contiguous_strides(x.shape), k.out(), pos * yst[ax], yst,
                     x.shape, x.dtype)
        pos += x.shape[ax]


@emits("Split")
def emit_split(k):
    x = k.in_buf(0)
    ax, sizes = k.node.opdef.sizes(k.node)
    xst = cg.contiguous_strides(x.shape)
    pos = 0
    for j, yb in enumerate(k.instr.outputs):
        strided_copy(k, k.inp(0), pos * xst[ax], xst, k.out(j), 0, cg.contiguous_strides(yb.shape),
                     yb.shape, x.dtype)
        pos += sizes[j]


@emits("Slice")
def emit_slice(k):
    x, y = k.in_buf(0), k.out_buf()
    region = k.node.opdef.region(k.node)
    xst = cg.contiguous_strides(x.shape)
    off = sum(s * st for (s, _, _), st in zip(region, xst))
    if y.nbytes:
        strided_copy(k, k.inp(0), off, [step * st for (_, step, _), st in zip(region, xst)],
                     k.out(), 0, cg.contiguous_strides(y.shape), y.shape, y.dtype)


@emits("Gather")
def emit_gather(k):
    b = k.b
    x, idx, y = k.in_buf(0), k.in_buf(1), k.out_buf()
    ax = k.node.attrs["axis"] % len(x.shape)
    pre, dim, post = int(np.prod(x.shape[:ax])), x.shape[ax], int(np.prod(x.shape[ax + 1:]))
    n_idx = int(np.prod(idx.shape))
    with k.for_range(pre, name="p") as p:
        with k.for_range(n_idx, name="j") as j:
            iv = k.load(k.inp(1), j, idx.dtype)
            iv = b.sext(iv, k.intp) if iv.type.width < k.intp.width else \
                b.trunc(iv, k.intp) if iv.type.width > k.intp.width else iv
            iv = b.select(b.icmp_signed("<", iv, k.c(0)), b.add(iv, k.c(dim)), iv)
            # out-of-range indices read nothing (the output keeps zeros) instead of faulting
            ok = b.and_(b.icmp_signed(">=", iv, k.c(0)), b.icmp_signed("<", iv, k.c(dim)))
            src = b.mul(b.add(b.mul(p, k.c(dim)), iv), k.c(post))
            dst = b.mul(b.add(b.mul(p, k.c(n_idx)), j), k.c(post))
            with cg.if_then(b, ok):
                with k.for_range(post, name="q") as q:
                    k.store(k.load(k.inp(0), b.add(src, q), x.dtype), k.out(), b.add(dst, q))


@emits("Dropout")
def emit_dropout(k):
    """A Dropout the views pass kept (its mask is used, or -O0): copy the data, fill the mask."""
    from glowpy.codegen.kernels.elementwise.arith import emit_copy
    emit_copy(k)
    if len(k.instr.outputs) > 1:
        dt, value = k.node.opdef.mask(k.node)
        m = k.out_buf(1)
        c = cg.const(cg.llvm_type(dt), value)
        with k.for_range(int(np.prod(m.shape)), name="m") as i:
            k.store(c, k.out(1), i)
