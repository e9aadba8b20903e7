"""Float Conv over few input channels with a strided or narrow window (first layers: a
spectrogram, a grey or RGB image) on vector targets: the chunk's columns gathered
(im2col), then the strided 1x1's GEMM on them (pointwise_strided.PointwiseTiles).

Such a layer has a short reduction (C x KH x KW products per output, 27 for a 3x3 on RGB, 40 for
keyword spotting's 10x4 on one channel) that neither direct tiling runs well: the
channel-vectorized tiles turn every tile around in registers to store it, a cost their few
multiply-adds do not amortize, and the pixel-vectorized row tiles pay a wide load and a
shuffle per strided input vector and output-channel block, and waste lanes on rows narrower
than a vector. Gathered once per chunk of output rows into a buffer [C x KH x KW][positions]
(zeros where a tap lands in the padding), the layer is a plain GEMM with long runs of positions
(planes narrower than a vector flattened into one chunk), the stores contiguous output rows.
The buffer lives on the stack or, past its budget, in a gap of the activation region
(pointwise_strided.scratch_need, gaps.place)."""
from __future__ import annotations

import math

from glowpy.codegen.kernels.accumulators import const_input
from glowpy.codegen.kernels.conv.channel_plan import CHAN_TAPS
from glowpy.codegen.kernels.conv import pointwise_strided
from glowpy.codegen.kernels.conv.pointwise_strided import (SCRATCH_MAX, PointwiseStridedEmitter, chunk_rows,
                                                           plan_tiles, reduction, scratch_of)
from glowpy.codegen.kernels.tiles import shape_of
from glowpy.codegen.kernels.vectors import Simd
from glowpy.codegen.registry import variant

# input channels at most: the gathered columns are C x KH x KW times the chunk's positions
MAX_CHANNELS = 4
# output channels at least: a gathered vector (a wide load, a shuffle, a store) feeds M
# multiply-add vectors, so the gather costs about 5/M of the GEMM: VWW's 3 -> 8 3x3/2 on 96x96
# went 17.2 -> 25.4 us (Zen 3, one layer + Relu, direct tiling -> im2col, same run)
MIN_OUTPUTS = 16
# and a reduction shorter than the one from which the channel-vectorized tiles win
# (channel_plan.CHAN_TAPS): ResNet's 3 -> 64 7x7/2 stem (147 products) ran level in one layer (2.83
# ms either way) and 1.64 -> 2.03 ms inside a ResNeXt-style model as 3 -> 32. Short ones, same
# measure: keyword spotting's 1 -> 64 10x4/2 on 49x10 16.8-21.1 -> 7.9 us, on 98x40 (40 mel
# bins) 114-124 -> 57 us, 1 -> 64 3x3 on 49x10 9.3 -> 7.6, 3 -> 32 3x3/2 on 32x32 6.7 -> 5.4,
# 1 -> 32 3x3/2 on 64x64 10.8 -> 8.2 us. On 224x224 (a 0.8-1.6 MB output) one layer alone
# swings with the machine's phases (3 -> 32: 451 -> 288 us in one run, 425 -> 443 in another;
# 3 -> 16: 174 -> 159, 187 -> 237); inside the models the instrumented stems ran faster every
# time (MobileNetV3-small 300 -> 255 us, ShuffleNetV2 327 -> 296 and 658 -> 327)
# gather bodies at most (kernel taps x the vectors of an output row that are unrolled: those
# touching the padding, and one loop body for the rest; `edges`)
MAX_UNROLL = 1024


def edges(s, w: int) -> tuple[int, int]:
    """[lo, hi): the vectors v of an output row (w positions each) whose strided window lies
    inside the input row for every kernel column (no padding lane): gathered in a loop; the
    vectors before and after are unrolled, each with its columns in the padding masked off.
    An output row of 3,199 positions (wav2vec 2.0's raw-audio front end, 10 taps) had 4,000
    unrolled bodies, too many to emit, and kept the pixel tiles: 2.0 ms in the model against
    onnxruntime's 0.7; gathered so, 675 us against 697."""
    n = math.ceil(s.wo / w)
    lo = next((v for v in range(n) if v * w * s.sw - s.pl >= 0), n)
    hi = lo
    while hi < n and hi * w * s.sw + (s.kw - 1) * s.dw - s.pl + w * s.sw <= s.win:
        hi += 1
    return lo, hi


def applies(s, simd, weights_const: bool) -> bool:
    """A 1-D or 2-D Conv of one group with a window wider than 1x1, at most MAX_CHANNELS input
    channels, at least MIN_OUTPUTS output channels, a reduction shorter than CHAN_TAPS and at
    most MAX_UNROLL gather bodies, strided or on rows narrower than two vectors (stride 1 on
    wide rows: the flat pixel tiles read every tap as a shifted plane, nothing to gather),
    constant weights, on a vector target."""
    if s is None or s.g != 1 or s.kh * s.kw == 1 or simd.width == 1:
        return False
    strided = s.sh > 1 or s.sw > 1
    lo, hi = edges(s, simd.width)
    if s.c > MAX_CHANNELS or reduction(s) >= CHAN_TAPS[strided] or s.m < MIN_OUTPUTS or \
            not weights_const or \
            s.kh * s.kw * (math.ceil(s.wo / simd.width) - (hi - lo) + 1) > MAX_UNROLL:
        return False
    return strided or s.wo < 2 * simd.width


def plan(k):
    """{"rows": output rows per chunk, "mr", "nv", "scratch"} as pointwise_strided.plan, for
    the layers `applies` names."""
    s = shape_of(k)
    simd = Simd.of(k.caps)
    if not applies(s, simd, s is not None and const_input(k, 1) is not None):
        return None
    scratch = scratch_of(k)
    rows = chunk_rows(s, simd.width, scratch.nbytes if scratch is not None else SCRATCH_MAX)
    if rows < 1:
        return None
    mr, nv = plan_tiles(s.m, reduction(s), rows * s.wo, simd)
    return {"rows": rows, "mr": mr, "nv": nv, "scratch": scratch is not None}


class Im2colEmitter(PointwiseStridedEmitter):
    def gather(self, n, oh0, nrows):
        """buf[(c x KH + a) x KW + j][r x wo + q] = x[n, c, (oh0 + r) x sh + a x dh - pt,
        q x sw + j x dw - pl], zero in the padding. A kernel row that falls outside the input
        for some output rows reads a clamped row and stores zeros there (no branch); the
        columns in the padding are masked off the load at compile time."""
        k, b, s, vec = self.k, self.b, self.s, self.vec
        w = vec.w
        taps = s.kh * s.kw
        zero = vec.zero()
        lo, hi = edges(s, w)
        with k.for_range(s.c, name="c") as c:
            plane = b.mul(b.add(b.mul(n, k.c(s.c)), c), k.c(s.hin * s.win))
            for a in range(s.kh):
                with k.for_range(nrows, name="r") as r:
                    ih = b.sub(b.add(b.mul(b.add(oh0, r), k.c(s.sh)), k.c(a * s.dh)), k.c(s.pt))
                    inside = b.and_(b.icmp_signed(">=", ih, k.c(0)), b.icmp_signed("<", ih, k.c(s.hin)))
                    row = b.add(plane, b.mul(b.select(inside, ih, k.c(0)), k.c(s.win)))
                    for j in range(s.kw):
                        t = b.add(b.mul(c, k.c(taps)), k.c(a * s.kw + j))
                        dst = b.add(b.mul(t, k.c(self.pitch)), b.mul(r, k.c(s.wo)))

                        def one(v, mask=None):  # v: a vector index, constant or in the loop
                            first = b.add(b.mul(v, k.c(w * s.sw)), k.c(j * s.dw - s.pl)) \
                                if mask is None else k.c(v * w * s.sw + j * s.dw - s.pl)
                            x = vec.load_strided(k.inp(0), b.add(row, first), s.sw, mask)
                            vec.store(b.select(inside, x, zero), self.buf,
                                      b.add(dst, b.mul(v, k.c(w)) if mask is None else k.c(v * w)))
                        looped = range(lo, hi) if hi - lo > 1 else range(0)
                        for v in range(math.ceil(s.wo / w)):
                            if v not in looped:
                                q0 = v * w * s.sw + j * s.dw - s.pl
                                one(v, tuple(0 <= q0 + e < s.win for e in range(w * s.sw)))
                        if looped:
                            with k.for_range(hi, start=lo, name="v") as v:
                                one(v)


RANK = 36  # above the direct tilings (channel 30, pixel 20) for the layers it applies to


@variant("Conv", "im2col", rank=RANK, plan=plan)
def emit(k, p):
    Im2colEmitter(k, p).emit()


def place(prog, caps, grow: bool = False) -> None:
    """catalog.post_planning: columns past the stack budget, in gaps; with `grow` (time
    first, no activation budget), a layer whose one output row's columns pass the stack's
    budget (a raw-audio row of 3,199 outputs: 128 KB) grows the region for them where no gap
    has room (pointwise_strided.place)."""
    pointwise_strided.place(prog, caps, applies, grow)
