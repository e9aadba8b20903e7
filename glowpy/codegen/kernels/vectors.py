"""Register-blocked micro-kernels: the shared machinery of the fast Conv, Gemm and MatMul paths.

A micro-kernel computes a tile of MR x NV accumulators: MR rows (output channels of a Conv,
rows of a Gemm) times NV vectors of the target's width (output pixels, Gemm columns). Every
reduction step loads MR scalars of the "broadcast" operand and NV vectors of the other and
does MR*NV multiply-adds, so each loaded value is used NV or MR times from a register. The
accumulators are loop-carried values (phis) through the reduction loops, marked not to be
unrolled; they are written to the output once, through the node's fused epilogue
(vec_epilogue.py) applied to whole vectors.

The target decides the shapes, nothing else does: `Simd.of(k.caps)` gives the float lanes of a
vector register (16 for AVX-512, 8 for AVX, 4 for SSE and NEON, 1 for scalar FPUs such as the
Cortex-M7's) and how many registers there are (glowpy/codegen/target/caps.py derives them).
With width 1 every "vector" is a plain float, so the same generator gives a scalar
register-blocked kernel."""
from __future__ import annotations

from dataclasses import dataclass, replace

from llvmlite import ir

from glowpy.codegen import cgutils as cg

LINE = 64  # cache line bytes (x86, Arm A-profile)

F32 = cg.F32


@dataclass(frozen=True)
class Simd:
    """The vector shape a Vec works with: the target's own (`of`), or narrower lanes for
    partial vectors."""
    width: int  # float lanes per vector register (1: scalar FP registers)
    registers: int  # FP / vector registers available to the allocator
    cheap_masks: bool  # a masked load costs what a plain load costs (AVX-512)
    fpu: bool = True  # False: soft float, every float operation is a library call

    @property
    def pairs_in_lanes(self) -> bool:
        """Whether stride-2 lanes come from 128-bit halves (`Vec.load_pairs`): 8 lanes, x86 AVX."""
        return self.width == 8

    def strided_load(self, stride: int) -> float:
        """What a vector of stride-`stride` lanes costs in the cost models, in plain vector
        loads. Through `Vec.load_pairs` (stride 2 on AVX) four 128-bit loads and an in-lane
        shuffle give two such vectors, two adjacent kernel columns; otherwise a wide load
        and a shuffle (AVX-512's vpermt2ps, NEON's ld2). Fitted on the AVX2 EPYC (znver1)
        with 11 stride-2 depthwise layers (3x3 and 5x5, 14x14 to 112x112, 32 to 576
        channels), each variant forced: the plain kernel's time per channel (ns) over its
        estimate was 0.45-0.57 with 2.5 (the figure from before the pairs) and 0.73-1.02
        with 1.25, the phase kernel's 0.71-0.97 (depthwise_phase.COPY), so the two compare.
        AVX-512 (cheap masks) at stride 2: two loads and one vpermt2ps give a vector, 1.5; at
        2.5 the phase kernel took the large planes, which on a Zen 4 ran 1.25-2x slower
        than the plain one on each of 8 stride-2 layers (3x3/2 on 96 of 112x112 198 -> 116
        us, 5x5/2 on 144 of 56x56 135 -> 105, 3x3/2 on 576 of 14x14 42 -> 21; forced, one
        process, alternating)."""
        if stride == 1:
            return 1.0
        if stride == 2 and self.cheap_masks:
            return 1.5
        return 1.25 if stride == 2 and self.pairs_in_lanes else 2.5

    @classmethod
    def of(cls, caps) -> "Simd":
        """The target's vector shape, from its TargetCaps."""
        return cls(caps.float_lanes, caps.vector_registers, caps.cheap_masks, caps.fpu)

    def widened(self, count: int, factor: int = 4) -> "Simd":
        """This shape with up to `factor` registers per IR vector (a power of two; no more
        than `count` elements fill): LLVM splits every operation on the wide vector into one
        per register, side by side, so the long per-element chains (mathfn's exp) and the
        running sums of several registers overlap instead of waiting on each other. Softmax
        of (1,4,128,128) on an AVX2 Zen 3: 72 us with one register, 59 with two, 53 with
        four; LayerNormalization of (1,128,256): 12.3, 8.8, 7.8 (benchmarks/op_probe.py).
        Scalar targets keep their width."""
        f = 1
        while self.width > 1 and f < factor and self.width * f * 2 <= count:
            f *= 2
        return replace(self, width=self.width * f)


def declare(module, name, fnty):
    try:
        return module.get_global(name)
    except KeyError:
        return ir.Function(module, fnty, name)


class Vec:
    """Vectors of `width` floats (plain floats when width is 1) with masked access.

    A mask is None (every lane), a tuple of bools (known at compile time) or an IR <width x i1>
    value. `safe` says every lane's address may be read (inside the buffer, or inside its
    region: Kernel.readable), so a plain load followed by a select may stand in for a masked
    load."""

    def __init__(self, k, simd: Simd):
        self.k, self.b, self.simd = k, k.b, simd
        self.w = simd.width
        self.ty = F32 if self.w == 1 else ir.VectorType(F32, self.w)
        self.mty = cg.I1 if self.w == 1 else ir.VectorType(cg.I1, self.w)
        self.ity = cg.I32 if self.w == 1 else ir.VectorType(cg.I32, self.w)
        # The widest IR vector a kernel may build (window spans, strided loads): 16 registers'
        # worth. Wider ones come only from absurd strides or dilations, and LLVM's time and
        # memory grow with the vector (stride 2^14 aborted it); past the cap, lanes are loaded
        # one by one. Every legitimate window of the shared models stays far below it.
        self.cap = 16 * max(self.w, 4)

    def zero(self):
        return cg.const(self.ty, 0.0)

    def splat(self, x):
        if self.w == 1:
            return x
        b = self.b
        v = b.insert_element(ir.Constant(self.ty, ir.Undefined), x, ir.Constant(cg.I32, 0))
        return b.shuffle_vector(v, ir.Constant(self.ty, ir.Undefined),
                                ir.Constant(ir.VectorType(cg.I32, self.w), [0] * self.w))

    def load_splat(self, ptr, off):
        """ptr[off] in every lane: a one-lane vector load and a shuffle (two instructions; a
        vbroadcastss from memory on x86)."""
        if self.w == 1:
            return self.b.load(self._ptr(ptr, off), typ=F32, align=4)
        one = ir.VectorType(F32, 1)
        v = self.b.load(self._ptr(ptr, off), typ=one, align=4)
        return self.b.shuffle_vector(v, ir.Constant(one, ir.Undefined),
                                     ir.Constant(ir.VectorType(cg.I32, self.w), [0] * self.w))

    def iota(self):
        return ir.Constant(self.ity, list(range(self.w))) if self.w > 1 else ir.Constant(cg.I32, 0)

    def isplat(self, x):
        """An i32 vector of x (an IR integer of any width)."""
        x = self.b.trunc(x, cg.I32) if x.type.width > 32 else x
        if self.w == 1:
            return x
        v = self.b.insert_element(ir.Constant(self.ity, ir.Undefined), x, ir.Constant(cg.I32, 0))
        return self.b.shuffle_vector(v, ir.Constant(self.ity, ir.Undefined),
                                     ir.Constant(ir.VectorType(cg.I32, self.w), [0] * self.w))

    def _const_mask(self, bits, n=None):
        n = n or self.w
        return ir.Constant(ir.VectorType(cg.I1, n), [int(bool(x)) for x in bits])

    def _ptr(self, ptr, off):
        return cg.gep(self.b, ptr, off, F32)

    def _masked(self, ty, n):
        name = f"llvm.masked.load.v{n}f32.p0"
        return declare(self.b.module, name, ir.FunctionType(ty, [cg.PTR, cg.I32, ir.VectorType(cg.I1, n), ty]))

    def load(self, ptr, off, mask=None, safe=False, n=None, fill=0.0):
        """n floats (default: the width) from ptr[off...]; masked-off lanes read as `fill`."""
        b = self.b
        n = n or self.w
        ty = F32 if n == 1 else ir.VectorType(F32, n)
        if isinstance(mask, tuple):
            if all(mask):
                mask = None
            elif not any(mask):
                return cg.const(ty, fill)
        if mask is None:
            return b.load(self._ptr(ptr, off), typ=ty, align=4)
        if n == 1:
            if isinstance(mask, tuple):
                return b.load(self._ptr(ptr, off), typ=ty, align=4)
            assert safe, "a runtime-masked scalar load needs an in-bounds address"
            return b.select(mask, b.load(self._ptr(ptr, off), typ=ty, align=4), cg.const(ty, fill))
        m = self._const_mask(mask, n) if isinstance(mask, tuple) else mask
        if not safe and isinstance(mask, tuple) and not self.simd.cheap_masks:
            # a kept lane lies in the buffer, so the window lies within n floats of it
            safe = self.k.room_around(ptr, n)
        if safe and not self.simd.cheap_masks:
            # a blend instead of a masked load: AVX2's vmaskmovps is microcode on AMD cores
            # (an EPYC with LLVM CPU znver1, one depthwise layer + Relu, 3x3 on 960 channels of
            # 7x7 93.7 -> 43.6 us, on 576 of 14x14 190 -> 87 us, 5x5 on 672 of 14x14 450 -> 234)
            return b.select(m, b.load(self._ptr(ptr, off), typ=ty, align=4), cg.const(ty, fill))
        return b.call(self._masked(ty, n), [self._ptr(ptr, off), ir.Constant(cg.I32, 4), m,
                                            cg.const(ty, fill)])

    def load_strided(self, ptr, off, stride: int, mask=None, fill=0.0, safe=False):
        """Lanes ptr[off + l*stride]: one wide load and a shuffle (mask: per wide element;
        safe: as for load, every element of the wide window may be read)."""
        if stride == 1 or self.w == 1:
            return self.load(ptr, off, mask, safe=safe, fill=fill)
        n = self.w * stride
        if n > self.cap:
            return self._load_lanes(ptr, off, stride, mask, fill)
        if stride == 2 and self.pairs_in_lanes() and not isinstance(mask, ir.Value):
            return self.load_pairs(ptr, off, mask, safe=safe, fill=fill)[0]
        wide = self.load(ptr, off, mask, safe=safe, n=n, fill=fill)
        idx = ir.Constant(ir.VectorType(cg.I32, self.w), [l * stride for l in range(self.w)])
        return self.b.shuffle_vector(wide, ir.Constant(wide.type, ir.Undefined), idx)

    def load_phases(self, ptr, off, stride: int, count: int, mask=None):
        """[v_0 .. v_{count-1}] with lane l of v_c = ptr[off + l*stride + c] (mask: a tuple per
        element of the window of w*stride + count - stride floats, or None for all). The window
        is loaded once: `stride` vectors and one for the elements past them. log2(stride)
        rounds of two-source shuffles split it into the stride phases, and each further column
        is the column `stride` before it moved on by a lane. Winograd F4's input tiles need 6
        columns at stride 4: 5 loads and 10 shuffles, where strided loads take 24 and 18 (Zen 4,
        64 channels on 56x56: the input transform was 26% of the layer). For vectors of w > 1
        lanes, a stride that is a power of two dividing w, and at most w columns past the
        stride (its one caller, winograd.py, on 8 or 16 lanes: 4 or 6 columns at stride 2, 6 at
        stride 4)."""
        b, w = self.b, self.w
        extra = count - stride
        assert w > 1 and stride >= 2 and not stride & (stride - 1) and not w % stride \
            and 0 <= extra <= w and not isinstance(mask, ir.Value)
        at = (lambda d: off + d) if isinstance(off, int) else (lambda d: b.add(off, self.k.c(d)))
        m = (True,) * (w * stride + extra) if mask is None else tuple(mask)
        idx = lambda lanes: ir.Constant(ir.VectorType(cg.I32, len(lanes)), lanes)  # noqa: E731
        # groups of vectors by the residues (mod stride) fixed so far, each vector's elements
        groups = {0: [(self.load(ptr, at(i * w), m[i * w:(i + 1) * w]),
                       list(range(i * w, (i + 1) * w))) for i in range(stride)]}
        bit = stride // 2
        while bit:
            split = {}
            for key, vs in groups.items():
                for (a, ca), (c, cc) in zip(vs[::2], vs[1::2]):
                    both = ca + cc
                    for side in (0, bit):
                        sel = [q for q, e in enumerate(both) if e % stride & bit == side]
                        split.setdefault(key | side, []).append(
                            (b.shuffle_vector(a, c, idx(sel)), [both[q] for q in sel]))
            groups, bit = split, bit // 2
        phases = []
        for p in range(stride):
            [(v, content)] = groups[p]
            assert content == [l * stride + p for l in range(w)]
            phases.append(v)
        if not extra:
            return phases
        tail = m[stride * w:stride * w + extra] + (False,) * (w - extra)
        past = self.load(ptr, at(stride * w), tail)
        cols = phases  # column c: column c - stride moved on by a lane, its last from `past`
        for c in range(stride, count):
            cols.append(b.shuffle_vector(cols[c - stride], past,
                                         idx(list(range(1, w)) + [w + c - stride])))
        return cols

    def pairs_in_lanes(self) -> bool:
        """Whether `load_pairs` applies (Simd.pairs_in_lanes)."""
        return self.simd.pairs_in_lanes

    def load_pairs(self, ptr, off, mask=None, safe=False, fill=0.0):
        """(ptr[off + 2l], ptr[off + 1 + 2l]) over the lanes: the stride-2 lanes at off and
        off + 1 (mask: per element of the 2w-float window, as for load). Four 128-bit loads
        make [q0 q2] and [q1 q3], and one in-lane shuffle of the two picks the evens, another
        the odds, already in order. A wide load needs a lane-crossing vpermpd after that
        shuffle, three micro-ops of throughput 2 on Zen 1: a 3x3/2 depthwise layer on 512
        channels of 14x14 went 46.6 -> 37.1 us, on 256 of 28x28 94.8 -> 77.8."""
        b, q, n = self.b, self.w // 2, 2 * self.w
        m = (True,) * n if mask is None else mask
        if not all(m) and not safe and not self.simd.cheap_masks:
            safe = self.k.room_around(ptr, n)
        quarter = Vec(self.k, replace(self.simd, width=q))
        at = (lambda d: off + d) if isinstance(off, int) else (lambda d: b.add(off, self.k.c(d)))
        # where every element may be read, partial quarters load whole and the two halves
        # blend afterwards: a quarter's own blend with zero became a register-to-register
        # vmovq, which LLVM may encode in the 0x66 0F D6 form that valgrind cannot decode
        part = [quarter.load(ptr, at(i * q), (any(m[i * q:(i + 1) * q]),) * q if safe else
                             tuple(m[i * q:(i + 1) * q]), fill=fill) for i in range(4)]
        idx = lambda lanes: ir.Constant(ir.VectorType(cg.I32, len(lanes)), lanes)
        lo = b.shuffle_vector(part[0], part[2], idx(list(range(self.w))))
        hi = b.shuffle_vector(part[1], part[3], idx(list(range(self.w))))
        if safe:
            keep = lambda a, c: tuple(m[a:a + q]) + tuple(m[c:c + q])  # noqa: E731
            lo, hi = (v if all(k) or not any(k) else
                      b.select(self._const_mask(k), v, cg.const(self.ty, fill))
                      for v, k in ((lo, keep(0, 2 * q)), (hi, keep(q, 3 * q))))
        return (b.shuffle_vector(lo, hi, idx([0, 2, 8, 10, 4, 6, 12, 14])),
                b.shuffle_vector(lo, hi, idx([1, 3, 9, 11, 5, 7, 13, 15])))

    def _load_lanes(self, ptr, off, stride, mask, fill):
        """load_strided past the cap: one scalar load per lane whose element is in the mask
        (known at compile time: callers of strided loads pass tuples)."""
        assert mask is None or isinstance(mask, tuple), "strided loads take compile-time masks"
        b, v = self.b, cg.const(self.ty, fill)
        base = self._ptr(ptr, off)
        for lane in range(self.w):
            if mask is None or mask[lane * stride]:
                x = b.load(cg.gep(b, base, lane * stride, F32), typ=F32, align=4)
                v = b.insert_element(v, x, ir.Constant(cg.I32, lane))
        return v

    def store(self, val, ptr, off, mask=None):
        b = self.b
        if isinstance(mask, tuple):
            if all(mask):
                mask = None
            elif not any(mask):
                return
        if mask is None:
            b.store(val, self._ptr(ptr, off), align=4)
            return
        if self.w == 1:
            if isinstance(mask, tuple):
                b.store(val, self._ptr(ptr, off), align=4)
            else:
                with cg.if_then(b, mask):
                    b.store(val, self._ptr(ptr, off), align=4)
            return
        if isinstance(mask, tuple) and not self.simd.cheap_masks:
            self._store_runs(val, ptr, off, mask)
            return
        m = self._const_mask(mask) if isinstance(mask, tuple) else mask
        fn = declare(b.module, f"llvm.masked.store.v{self.w}f32.p0",
                      ir.FunctionType(ir.VoidType(), [self.ty, cg.PTR, cg.I32, self.mty]))
        b.call(fn, [val, self._ptr(ptr, off), ir.Constant(cg.I32, 4), m])

    def _store_runs(self, val, ptr, off, mask: tuple):
        """A store whose lanes are known at compile time, as plain stores of the kept lanes'
        runs in power-of-two pieces (7 of 8 lanes: 4, 2 and 1). Without mask registers
        AVX's vmaskmovps is microcode on AMD cores: on an EPYC (LLVM CPU znver1) a masked
        store took 6.0 ns against 1.3 for a plain one, and a 3x3 depthwise layer on 960
        channels of 7x7, whose every row ends in a 7-lane store, went 135 -> 106 us."""
        store_runs(self.b, val, self._ptr(ptr, off), mask)

    def _lanes(self, ptr, off, lane_offsets):
        """<w x ptr>: ptr + off + lane_offsets[l] (elements)."""
        b = self.b
        base = cg.gep(b, ptr, off, F32)
        idx = ir.Constant(ir.VectorType(cg.I32, self.w), [int(x) for x in lane_offsets])
        ptrs = b.gep(base, [idx], inbounds=True, source_etype=F32)
        ptrs.type = ir.VectorType(cg.PTR, self.w)  # llvmlite types a vector GEP as a scalar ptr
        return ptrs

    def gather(self, ptr, off, lane_offsets, mask=None):
        """Lanes ptr[off + lane_offsets[l]] (a plain load when they are consecutive)."""
        if list(lane_offsets) == list(range(self.w)):
            return self.load(ptr, off, mask)
        if isinstance(mask, tuple) and not any(mask):
            return self.zero()
        m = self._const_mask(mask if isinstance(mask, tuple) else (True,) * self.w) \
            if mask is None or isinstance(mask, tuple) else mask
        vp = ir.VectorType(cg.PTR, self.w)
        fn = declare(self.b.module, f"llvm.masked.gather.v{self.w}f32.v{self.w}p0",
                      ir.FunctionType(self.ty, [vp, cg.I32, self.mty, self.ty]))
        return self.b.call(fn, [self._lanes(ptr, off, lane_offsets), ir.Constant(cg.I32, 4), m,
                                self.zero()])

    def scatter(self, val, ptr, off, lane_offsets, mask=None):
        if list(lane_offsets) == list(range(self.w)):
            return self.store(val, ptr, off, mask)
        if isinstance(mask, tuple) and not any(mask):
            return
        m = self._const_mask(mask if isinstance(mask, tuple) else (True,) * self.w) \
            if mask is None or isinstance(mask, tuple) else mask
        vp = ir.VectorType(cg.PTR, self.w)
        fn = declare(self.b.module, f"llvm.masked.scatter.v{self.w}f32.v{self.w}p0",
                      ir.FunctionType(ir.VoidType(), [self.ty, vp, cg.I32, self.mty]))
        self.b.call(fn, [val, self._lanes(ptr, off, lane_offsets), ir.Constant(cg.I32, 4), m])

    def prefetch(self, ptr, off, locality: int = 3, write: bool = False):
        """A read (or write) prefetch of ptr[off] on vector targets (big caches, deep
        out-of-order cores: it hides the latency of streamed weights); nothing on scalar ones,
        where it would only cost an instruction. `locality` is LLVM's: 3 into L1, 2 into L2."""
        if self.w == 1:
            return
        fn = declare(self.b.module, "llvm.prefetch.p0",
                      ir.FunctionType(ir.VoidType(), [cg.PTR, cg.I32, cg.I32, cg.I32]))
        self.b.call(fn, [self._ptr(ptr, off), ir.Constant(cg.I32, int(write)), ir.Constant(cg.I32, locality),
                         ir.Constant(cg.I32, 1)])

    def prefetch_run(self, ptr, off, floats: int, locality: int = 3):
        """`prefetch` of each cache line of the `floats` floats from ptr[off] (a run a step of
        a register tile reads: one line on AVX2's two vectors, two on AVX-512's)."""
        for line in range(0, floats, LINE // 4):
            self.prefetch(ptr, off + line if isinstance(off, int) else
                          self.b.add(off, self.k.c(line)), locality)

    def sweep(self, base, count: int, init, step):
        """acc = step(offset, mask, acc) over the vectors of the `count` elements from offset
        `base` (an IR index): the whole vectors in a loop (mask None), then the last partial
        one with a compile-time mask (a tuple of bools). Returns the final acc."""
        k, b, w = self.k, self.b, self.w
        full, rem = divmod(count, w)
        with cg.for_range_carry(b, full, [init], intp=k.intp, name="v") as lp:
            lp.carry([step(b.add(base, b.mul(lp.index, k.c(w))), None, lp.values[0])])
        acc = lp.results[0]
        if rem:
            acc = step(b.add(base, k.c(full * w)), tuple(lane < rem for lane in range(w)), acc)
        return acc

    def keep(self, v, mask):
        """v with the lanes outside a compile-time mask (a tuple; None: every lane) zeroed."""
        if mask is None:
            return v
        return self.b.select(self._const_mask(mask), v, self.zero())

    def reduce(self, v, op):
        """op over the lanes of v (width lanes of any type) as a scalar: halving shuffles,
        log2(width) steps (op is associative and commutative: fadd, fmax, integer add)."""
        b, h = self.b, self.w // 2
        while h:
            idx = ir.Constant(ir.VectorType(cg.I32, self.w), [l + h if l < h else l for l in range(self.w)])
            v = op(v, b.shuffle_vector(v, ir.Constant(v.type, ir.Undefined), idx))
            h //= 2
        return b.extract_element(v, ir.Constant(cg.I32, 0)) if self.w > 1 else v

    def lane_sums(self, vs):
        """One vector whose lane j is the sum of vs[j]'s lanes (width vectors): log2(width)
        levels, each adding pairs of vectors shuffled so that a lane's position names its
        vector among the pair's (width - 1 adds and twice as many shuffles in all, where
        reducing each vector alone takes width * log2(width) of each)."""
        b, w = self.b, self.w
        if w == 1:
            return vs[0]
        s = 1
        while len(vs) > 1:
            lo = [(i // s) // 2 * 2 * s + i % s + (w if (i // s) % 2 else 0) for i in range(w)]
            pick = [ir.Constant(ir.VectorType(cg.I32, w), [x + d for x in lo]) for d in (0, s)]
            vs = [b.fadd(b.shuffle_vector(x, y, pick[0]), b.shuffle_vector(x, y, pick[1]))
                  for x, y in zip(vs[0::2], vs[1::2])]
            s *= 2
        return vs[0]

    def and_(self, a, c):
        return c if a is None else a if c is None else self.b.and_(a, c)


def store_runs(b, val, at, mask: tuple):
    """The lanes of vector val that mask keeps (a tuple), stored at `at` (lane 0's address) as
    plain stores of their runs in power-of-two pieces (Vec._store_runs; any element type)."""
    et, lane, n_all = val.type.element, 0, val.type.count
    while lane < n_all:
        if not mask[lane]:
            lane += 1
            continue
        end = lane
        while end < n_all and mask[end]:
            end += 1
        while lane < end:
            n = 1 << ((end - lane).bit_length() - 1)
            piece = b.shuffle_vector(val, ir.Constant(val.type, ir.Undefined), ir.Constant(
                ir.VectorType(cg.I32, n), list(range(lane, lane + n)))) if n > 1 else \
                b.extract_element(val, ir.Constant(cg.I32, lane))
            b.store(piece, cg.gep(b, at, lane, et), align=et.width // 8 if hasattr(et, "width") else 4)
            lane += n


def load_bytes(k, ptr, off, n: int, mask, fill: int, room: bool):
    """n bytes from ptr[off...] as <n x i8>, masked-off lanes (mask: a tuple, or None for all)
    read as `fill`: a plain load where every lane may be read (room: Kernel.room_around) and a
    blend, a masked load where masks are cheap (AVX-512BW's byte masks), else lane by lane."""
    b = k.b
    i8 = ir.IntType(8)
    ty = ir.VectorType(i8, n)
    at = cg.gep(b, ptr, off, i8)
    if mask is None or all(mask):
        return b.load(at, typ=ty, align=1)
    if not any(mask):
        return cg.const(ty, fill)
    m = ir.Constant(ir.VectorType(cg.I1, n), [int(bool(x)) for x in mask])
    if room:
        return b.select(m, b.load(at, typ=ty, align=1), cg.const(ty, fill))
    if k.caps.cheap_masks:
        fn = declare(b.module, f"llvm.masked.load.v{n}i8.p0",
                     ir.FunctionType(ty, [cg.PTR, cg.I32, m.type, ty]))
        return b.call(fn, [at, ir.Constant(cg.I32, 1), m, cg.const(ty, fill)])
    v = cg.const(ty, fill)
    for lane, keep in enumerate(mask):
        if keep:
            x = b.load(cg.gep(b, at, lane, i8), typ=i8, align=1)
            v = b.insert_element(v, x, ir.Constant(cg.I32, lane))
    return v
