"""Strided depthwise float Conv through a padded, phase-split copy of each input plane.

conv/depthwise.py reads a strided tap as a wide load and a shuffle, and every tile at a plane
edge as masked loads: on AVX2 (no mask registers, cross-lane shuffles on two ports) a 5x5
stride-2 layer spends more issue slots on shuffles, masked loads and broadcast weights than on
its FMAs (EfficientNet-B0's 144-channel 5x5/2 layer ran at 2.5x onnxruntime's in the model).
Here each channel's input rows are first copied into a stack buffer, zero-padded and split by
column phase (column q of the padded row lands in phase q % stride at q // stride), so a tap
of any kernel column is one plain unaligned vector load at a constant offset: no mask, no
shuffle, and edge tiles are the interior's code. The copy costs a strided load per phase and
input vector, a small part of the kh*kw FMAs per output vector.

Tiles are R output rows x NV vectors as in conv/depthwise.py's rows (an input row loaded once
per kernel column feeds every output row of the block that reads it). The buffer is a ring of
the few rows one block reads (`geometry`), rewritten block by block, padding rows included:
it stays in L1 at any plane size. It held the whole padded plane until the twelfth session,
which bounded the kernel to planes of 64 KiB of copy (112x112 inputs) and left 320x320 models'
160x160 planes to conv/depthwise.py; AVX2 code (benchmarks/op_probe.py, against the same
layer through conv/depthwise.py, then with the whole plane): 3x3/2 on 48 of 160x160 142 us
against 173, 5x5/2 on 144 of 80x80 194 against 255, 3x3/2 on 32 of 320x320 396 against 614;
3x3/2 on 96 of 112x112 129 against 159 with the whole plane, 5x5/2 on 144 of 56x56 and 3x3/2
on 256 of 56x56 2-4% faster."""
from __future__ import annotations

import math

from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen import registry
from glowpy.codegen.kernels.accumulators import Acc
from glowpy.codegen.kernels.conv import depthwise
from glowpy.codegen.kernels.conv.depthwise import MAX_ROWS, ROW_TILE, DepthwiseEmitter
from glowpy.codegen.kernels.tiles import Shape, shape_of
from glowpy.codegen.kernels.vectors import Simd
from glowpy.codegen.registry import variant

SCRATCH_MAX = 64 * 1024  # bytes of stack per call at most (a ring of 8 rows of 1000 columns)


def geometry(s: Shape, w: int, r: int = 1):
    """(buffer rows, phase-row length in floats, column offset per kernel column within its
    phase) for blocks of r output rows. The buffer is a ring of rows x stride phases x length
    floats, padded row p in row p % rows: rows is the power of two at or above the padded rows
    one block reads (the copy of a block's new rows then never overwrites a row it reads), and
    the length a whole number of vectors (5x5/2 on 56x56, AVX2: 181 -> 151 us). Where a ring
    would pass SCRATCH_MAX, rows is None."""
    rows = 1 << ((r - 1) * s.sh + (s.kh - 1) * s.dh).bit_length()
    offs = [(c * s.dw) // s.sw for c in range(s.kw)]
    length = math.ceil((math.ceil(s.wo / w) * w + max(offs)) / w) * w  # the last tile's taps
    return (rows if rows * s.sw * length * 4 <= SCRATCH_MAX else None), length, offs


# The copy's cost per plane: cycles per vector copied and a fixed part (the row loop, the
# buffer's rows read back soon after they were written), by how the strided lanes are read.
# A wide load and a shuffle per vector: fitted on 22 strided layers (3x3 and 5x5, 6x6 to
# 112x112 planes, 16 to 960 channels; AVX2 EPYC, znver1, before Vec.load_pairs) from each
# variant's time minus the two tilings' estimates: without it the phase kernel was taken
# everywhere and lost up to 2.3x on small planes (3x3/2 on 512 of 14x14: 118 us against the
# plain kernel's 53). Both phases from one window of 128-bit halves (Simd.pairs_in_lanes):
# refitted on the same EPYC over 11 layers (3x3 and 5x5, 14x14 to 112x112, 32 to 576
# channels) by least squares on each forced variant's time per channel (0.40 ns per vector,
# no fixed part, 1.01 ns per estimated tile cycle; the plain kernel's estimate on the same
# scale through Simd.strided_load), 0.5 and 50 taken from the range that chose best: the
# faster variant on 9 of the 11 (before: 7; 3-6% off on 64 and 32 channels of 112x112,
# whose buffer outgrows L1), 2035 us over the set against 2075 before and 2006 at best
# (3x3/2 on 128 of 56x56: 171 -> 154 us, on 144: 189 -> 167). MobileNetV2 against
# onnxruntime, builds alternating: 0.941 -> 0.930.
COPY = {False: (2.0, 300), True: (0.5, 50)}  # pairs_in_lanes: (per vector, per plane)


def plan(s: Shape, simd):
    """The tiling `estimate` finds cheapest."""
    return estimate(s, simd)[1]


def estimate(s: Shape, simd):
    """(cycles per plane, ("phase", R, NV)) with the fewest estimated cycles: two FMAs and two
    loads a cycle (rows_in x kw tap loads and R x taps broadcast weights per tile), ROW_TILE
    cycles per accumulator to add the bias and store; R x NV accumulators + NV taps + a weight
    fit the registers; plus the copy (COPY: per vector of the buffer's filled rows, per
    plane)."""
    w, regs = simd.width, simd.registers
    taps = s.kh * s.kw
    best = None
    for nv in range(1, math.ceil(s.wo / w) + 1):
        tiles = math.ceil(s.wo / (nv * w))
        for r in range(1, min(s.ho, MAX_ROWS) + 1):
            if r * nv + nv + 1 > regs:
                break
            rows_in = (r - 1) * s.sh + (s.kh - 1) * s.dh + 1
            cyc = max(r * taps * nv, rows_in * s.kw * nv + r * taps) / 2 + ROW_TILE * r * nv + 8
            total = math.ceil(s.ho / r) * tiles * cyc
            if best is None or total < best[0]:
                best = (total, ("phase", r, nv))
    _, length, _ = geometry(s, w)
    per_vector, per_plane = COPY[simd.pairs_in_lanes]
    copy = s.hin * s.sw * math.ceil(length / w) * per_vector + per_plane
    return best[0] + copy, best[1]


class PhaseEmitter(DepthwiseEmitter):
    def emit(self):
        k, b, s, vec = self.k, self.b, self.s, self.vec
        w = vec.w
        self.rows, self.len, self.offs = geometry(s, w, self.choice[1])
        self.buf = cg.stack_block(b, cg.F32, self.rows * s.sw * self.len, "phases")
        self.filled = (s.pt, s.pt + s.hin)  # the padded rows input rows fill
        super().emit()

    def zero_row(self, dst):
        n, w = self.s.sw * self.len, self.vec.w
        zero = self.vec.splat(ir.Constant(cg.F32, 0.0))
        for j in range(math.ceil(n / w)):
            self.vec.store(zero, self.buf, self.b.add(dst, self.k.c(j * w)), self.tail(n, j))

    def slot(self, r):
        """The buffer's offset of padded row r (an IR value): row r % rows of the ring."""
        b, k = self.b, self.k
        return b.mul(b.and_(r, k.c(self.rows - 1)), k.c(self.s.sw * self.len))

    def row_plane(self):
        """Each block of output rows copies the input rows it is the first to read, just
        before its tiles read them: the copy and its reads meet in L1. Copied whole before the tiles
        (AVX2 code, Zen 4, -instrument-profile, min of 8 alternating rounds), MobileNetV1's
        3x3/2 on 64 channels of 112x112 took 135 us against onnxruntime's 93."""
        k, b, s, w = self.k, self.b, self.s, self.vec.w
        _, r, nv = self.choice
        nr = nv * w
        full, last = divmod(s.wo, nr)
        cols = [(0, full, tuple((True,) * w for _ in range(nv)))] if full else []
        if last:
            nvl = math.ceil(last / w)
            cols.append((full, full + 1, tuple(tuple(j * w + l < last for l in range(w))
                                               for j in range(nvl))))
        nblk, rest = divmod(s.ho, r)
        reach = (s.kh - 1) * s.dh + 1  # padded rows a block reads past its last row's start

        for r0, r1, nrows in ([(0, nblk, r)] if nblk else []) + ([(nblk, nblk + 1, rest)] if rest else []):
            def block(oh0, nrows=nrows):
                # the rows up to the last one this block reads, from the first the block before
                # it did not (the first block: from row 0)
                hi = b.add(b.mul(b.add(oh0, k.c(nrows - 1)), k.c(s.sh)), k.c(reach))
                lo = b.sub(hi, k.c(nrows * s.sh))
                self.copy_rows(b.select(b.icmp_signed("==", oh0, k.c(0)), k.c(0), lo), hi)
                for crun in cols:
                    self.each(crun, lambda ow0, crun=crun: self.phase_tile(oh0, ow0, nrows, crun[2]), nr)
            self.each((r0, r1), block, r)

    def copy_rows(self, lo, hi):
        """Padded rows lo .. hi (IR values; clipped to the rows input rows fill) of the
        channel into the buffer: phase p of padded row r at r*stride*len + p*len, element i =
        x[r - pt][i*stride + p - pl]; the padding rows among lo .. hi are written with zeros
        (the ring's rows are reused)."""
        k, b, s, vec = self.k, self.b, self.s, self.vec
        w, L = vec.w, self.len
        f0, f1 = self.filled

        def clip(v, low, high):
            v = b.select(b.icmp_signed("<", v, low), low, v)
            return b.select(b.icmp_signed(">", v, high), high, v)
        for z0, z1 in ((lo, clip(hi, lo, k.c(f0))), (clip(lo, k.c(f1), hi), hi)):
            with k.for_range(z1, start=z0, name="zr") as r:
                self.zero_row(self.slot(r))
        lo, hi = clip(lo, k.c(f0), k.c(f1)), clip(hi, k.c(f0), k.c(f1))
        with k.for_range(hi, start=lo, name="pr") as r:
            src = b.add(self.xb, b.mul(b.sub(r, k.c(s.pt)), k.c(s.win)))
            dst = self.slot(r)
            for j in range(math.ceil(L / w)):
                q0 = j * w * s.sw - s.pl  # input column of phase 0's lane 0
                mask = tuple(0 <= q0 + e < s.win for e in range(w * s.sw + s.sw - 1))
                if not any(mask):
                    phases = [vec.splat(ir.Constant(cg.F32, 0.0))] * s.sw
                else:
                    phases = self.phase_loads(b.add(src, k.c(q0)), mask)
                for p, v in enumerate(phases):
                    vec.store(v, self.buf, b.add(dst, k.c(p * L + j * w)), self.tail(L, j))

    def phase_loads(self, at, mask):
        """The stride's phases of the input at `at` (an element offset), phase p's lane l at
        at + l*stride + p, as float vectors; mask: per element of the window from `at`
        (elements outside the row read as 0)."""
        s, vec = self.s, self.vec
        w, inp = vec.w, self.k.inp(0)
        if s.sw == 2 and vec.pairs_in_lanes():  # both phases from one window
            return vec.load_pairs(inp, at, mask[:2 * w])
        return [vec.load_strided(inp, self.b.add(at, self.k.c(p)), s.sw, mask[p:p + w * s.sw])
                for p in range(s.sw)]

    def tail(self, n, j):
        """The store mask of vector j of an n-float run (None: the whole vector)."""
        w = self.vec.w
        return None if (j + 1) * w <= n else tuple(j * w + l < n for l in range(w))

    def phase_tile(self, oh0, ow0, nrows, store):
        k, b, s, vec = self.k, self.b, self.s, self.vec
        nv, w, L = len(store), vec.w, self.len
        acc = Acc(vec, nrows, nv)
        users = {}  # padded row (relative to the block) -> [(output row, kernel row)]
        for i in range(nrows):
            for a in range(s.kh):
                users.setdefault(i * s.sh + a * s.dh, []).append((i, a))
        top = b.mul(oh0, k.c(s.sh))
        for rr in sorted(users):
            row = b.add(self.slot(b.add(top, k.c(rr))), ow0)
            for c in range(s.kw):
                base = (c * s.dw) % s.sw * L + self.offs[c]
                vals = [vec.load(self.buf, b.add(row, k.c(base + j * w))) for j in range(nv)]
                for i, a in users[rr]:
                    acc.fma([None] * i + [self.weight(a, c)], vals)
        for i in range(nrows):
            for j in range(nv):
                p0 = b.add(b.mul(b.add(oh0, k.c(i)), k.c(s.wo)), b.add(ow0, k.c(j * w)))
                self.finish(acc.value(i, j), p0, store[j])


def plan_kernel(k):
    """The tiling (see `plan`) for strided depthwise layers on vector targets whose ring
    fits SCRATCH_MAX and whose estimate, copy included, is below conv/depthwise.py's: the
    large planes (on the AVX2 EPYC 3x3/2 on 96 of 112x112 1246 -> 1100 us, 5x5/2 on 144 of
    56x56 456 -> 397), not the small ones, where the copy outweighs the shuffles saved.
    Stride-1 layers keep conv/depthwise.py (no shuffles to save there, and its flat tiles
    use the lanes past a short row's end)."""
    s = shape_of(k)
    if s is None or s.rank != 2:
        return None
    simd = Simd.of(k.caps)
    if simd.width == 1 or s.cg != 1 or s.mg != 1 or s.kh * s.kw == 1 or s.sw == 1:
        return None
    cost, choice = estimate(s, simd)
    if geometry(s, simd.width, choice[1])[0] is None:
        return None
    cheaper = cost < depthwise.estimate(s, simd)[0]
    return choice if cheaper or registry.is_forced("Conv", "depthwise_phase") else None


@variant("Conv", "depthwise_phase", rank=41, plan=plan_kernel)
def emit(k, choice):
    PhaseEmitter(k, shape_of(k), choice).emit()
