"""Shared pieces of the fast convolution and pooling kernels: the static shape of a 1-D/2-D
window op, tile choice for pixel-vectorized tiles, weight packing, the valid kernel rows of an
output row, and the compile-time lane masks of tile positions along a row."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.accumulators import const_input
from glowpy.codegen.kernels.vectors import LINE  # cache line bytes


@dataclass
class Shape:
    n: int
    c: int
    m: int
    g: int
    hin: int
    win: int
    ho: int
    wo: int
    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    pt: int
    pl: int
    rank: int  # spatial rank of the output (1 or 2; a flattened 1x1 is 1)

    @property
    def cg(self):
        return self.c // self.g

    @property
    def mg(self):
        return self.m // self.g

    @property
    def ktot(self):
        return self.cg * self.kh * self.kw


def shape_of(k, runtime_weights: bool = False) -> Shape | None:
    """The float Conv's shape; None for other types, more than two spatial dims, or weights
    computed at run time unless the caller takes them (`runtime_weights`: the pixel and
    channel tiles, which pack them at run time, conv/runtime_weights.py; the other kernels
    pack constant weights at compile time)."""
    x, w, y = k.in_buf(0), k.in_buf(1), k.out_buf()
    if any(b.dtype != np.float32 for b in (x, w, y)) or \
            (const_input(k, 1) is None and not runtime_weights):
        return None
    if k.in_buf(2) is not None and k.in_buf(2).dtype != np.float32:
        return None
    return window_shape(k.node, x.shape, w.shape)


def window_shape(node, xshape, wshape) -> Shape | None:
    """A Conv or QConv node's Shape whatever its types (None past two spatial dims)."""
    win = node.opdef.window(node)
    nd = len(win.in_size)
    if nd not in (1, 2):
        return None
    n, c = xshape[:2]
    m, g = wshape[0], node.attrs["group"]
    if all(q == 1 for q in win.kernel + win.strides) and not any(win.pads_begin + win.pads_end):
        p = int(np.prod(win.in_size))  # a 1x1 unpadded stride-1 conv is one over the flat plane
        return Shape(n, c, m, g, 1, p, 1, p, 1, 1, 1, 1, 1, 1, 0, 0, 1)
    if nd == 1:
        return Shape(n, c, m, g, 1, win.in_size[0], 1, win.out_size[0], 1, win.kernel[0], 1,
                     win.strides[0], 1, win.dilations[0], 0, win.pads_begin[0], 1)
    return Shape(n, c, m, g, *win.in_size, *win.out_size, *win.kernel, *win.strides,
                 *win.dilations, win.pads_begin[0], win.pads_begin[1], 2)


# accumulators of a vector tile at most: with 28 of 32 registers (AVX-512 14 x 2) LLVM hoists
# the broadcasts, spills accumulators to the stack and shuffles the rest down a chain of
# register moves every step; 24 leave it room. Zen 4, 1x1 128 -> 512 on 28x28 (+ residual
# + Relu), alternating in one process: 14 x 2 1310 us, 12 x 2 1021, 8 x 3 1013; 512 -> 128:
# 1201, 920, 925 (channel.py's tiles keep the same 24)
MAX_ACC = 24


def step_cycles(mr: int, nv: int, per_vector: float = 0.0) -> float:
    """Cycles of one reduction step of an MR x NV vector tile: two FMA pipes, two loads a
    cycle, 4 cycles of FMA latency, a little loop overhead per step and address/mask work per
    vector. Measured: 12 x 2 beats 24 x 1 on AVX-512; exactly 8 accumulators (4 x 2) do not
    keep the pipes full (Zen 4, AVX2 code, packed 1x1 128 -> 128 on 16x16: 4 x 2 72% of the
    peak, 6 x 2 87%), hence 4.5 cycles, not 4, for the latency."""
    return max(mr * nv / 2, (1.2 * mr + nv) / 2, 4.5) + 0.5 + (0.3 + per_vector) * nv


def choose_tile(simd, mg: int, lanes: int, kw: int, per_vector: float = 0.0):
    """(MR, NV) with the most useful multiply-adds per cycle (vector targets: two FMA and two
    load ports, four cycles of FMA latency) or per instruction (scalar targets)."""
    v, regs = simd.width, simd.registers
    cands = []
    for nv in range(1, 9):
        tiles = math.ceil(lanes / (nv * v))
        if nv > 1 and (nv - 1) * v >= lanes:
            break
        for mr in range(1, min(mg, 24) + 1):
            acc = mr * nv
            if v == 1 and (acc > 16 or acc + nv + kw + 1 > regs) and acc > 1:
                continue
            if v > 1 and (acc + nv + 2 > regs or acc > MAX_ACC) and acc > 1:
                continue

            def cost(r):
                if r == 0:
                    return 0.0
                if v == 1:
                    return r * nv + r + nv / max(1, min(kw, 3))
                return step_cycles(r, nv, per_vector)
            t = (mg // mr) * cost(mr) + cost(mg % mr)
            score = mg * lanes / (t * tiles)
            cands.append((score, mg % mr == 0, mr, nv))
    # a tail block is a second copy of the kernel: take a tile that divides the channels
    # unless it is more than 5% slower
    top = max(c[0] for c in cands)
    score, _, mr, nv = max(cands, key=lambda c: (c[1] and c[0] >= 0.95 * top, c[0]))
    return mr, nv, score


def tiles_outermost(caps, w_bytes: int, x_bytes: int, ntile: int, nblk: int) -> bool:
    """Loop order of a register-tiled convolution: pixel tiles outermost (the weights re-read
    per tile) or channel blocks outermost (the input re-read per block), whichever re-reads
    fewer bytes from beyond L1, bytes from past L2 counted three times (L3 and memory deliver
    a third of L2's bandwidth or less). The cache sizes are the target's (TargetCaps); without
    them the older rule: weights up to 256 KiB stay in cache, a rule from machines with 1-2
    MiB of L2. On a Zen 3 (32 KiB / 512 KiB) it changes ResNet-50's 14x14 1x1 layers with 1
    MiB of weights to blocks outermost, measured level (256 -> 1024: 1.12 -> 1.14 ms, 1024 ->
    256: 1.21 -> 1.21 ms, noise ~2%): it matters where caches differ more, not on this one."""
    if not caps.l2_bytes:
        return w_bytes <= (256 << 10) or w_bytes * ntile <= x_bytes * nblk
    return ntile * reread_cost(caps, w_bytes) <= nblk * reread_cost(caps, x_bytes)


# share of the L2 from which one block's weights count as streamed from L3 by every tile
BLOCK_L2 = 0.75


def block_streams(caps, w_bytes: int, nblk: int) -> bool:
    """Tiles outermost (conv/channel.py, besides tiles_outermost) where one block of output
    channels has BLOCK_L2 of the L2 in weights or more: they do not stay there from one tile to
    the next beside the tiles' input and output lines, so every tile streams its block's
    weights from L3 in either order, and with the tiles outermost each tile's input lines
    serve every block from L1 instead of being read again per block. tiles_outermost sees
    only the weights re-read per tile against the input per block. DeepSpeech2's second
    conv (21x11, stride (2, 1), 32 -> 32 on 81x150: 946 KB of weights, two blocks of 473 KB;
    real Zen 3, 512 KiB L2, AVX2, with a Relu before and after, best of 4 alternating rounds):
    34.6 -> 30.2 ms, onnxruntime 29.8; the whole model 61.4 -> 56.4 ms (onnxruntime 62.7).
    Blocks of 295 KB (a 3x3 512 -> 512 in 16-channel blocks) stay in a 512 KiB L2 and keep
    the blocks outermost, as measured there (conv/channel.py's flat tiles)."""
    return nblk > 1 and bool(caps.l2_bytes) and w_bytes / nblk >= BLOCK_L2 * caps.l2_bytes


# floats ahead in a packed weight stream to prefetch (4 KiB): in a whole model a deep layer's
# weights come from memory (MobileNetV1's 1024 -> 1024 on 7x7: 4 MB of its 17), not L3 as in
# a one-layer probe; Zen 3, best of 20 alternating rounds: MobileNetV1 14.59 / 14.78 -> 14.24 /
# 14.32 ms, EfficientNet-B0, ResNet-50, VWW, KWS level (within 1%); the channel-vectorized
# tiles 15% faster on a cold cache
PREFETCH = 1024
L1_SETS, L1_WAYS = 64, 8  # the L1 data caches of the vector targets (x86: 32 KiB 8-way or
# 48 KiB 12-way, 64-byte lines): the set index repeats every 4 KiB


def prefetch_ahead(streams: int) -> int:
    """Floats ahead in each of `streams` weight streams read in one loop: PREFETCH in flight
    among them all, in whole lines (at least one). Flat channel-vectorized tiles read a kernel
    row's kw taps as kw streams; 4 KiB ahead in each of 3 held 12 KiB of the 32 KiB L1 beside
    the 512 input lines a loop walks. A 3x3 512 -> 512 on 7x7 alone (Zen 3, AVX2, best of 5
    alternating rounds), a stream's distance 4 KiB / 2 KiB / 1 KiB / 1,344 B (this rule):
    3094 / 2665 / 2581 / 2510 us, onnxruntime 2533-2742; ResNet-50's three such layers in the
    model (-instrument-profile, min of 4 rounds), 4 KiB -> 1 KiB: 3924 / 3225 / 3137 -> 3461 /
    2779 / 2732 us, the one-stream tiles of the same model level."""
    line = LINE // 4
    return max(line, PREFETCH // max(streams, 1) // line * line)


def l1_sets(stride: int, count: int) -> int:
    """L1 sets that `count` lines `stride` bytes apart fall in (planes read or written at the
    same offset in each)."""
    return len({i * stride // LINE % L1_SETS for i in range(count)})


def chunk_tiles(caps, reduction: int, nr: int) -> int:
    """Pixel tiles per chunk for a register-tiled 1x1 convolution whose tiles are outermost,
    or 0 for none. With tiles outermost each tile writes NR pixels into every one of the M
    output planes and reads NR from each of the K input planes: M + K streams a plane apart
    (112x112 planes are 49 KiB apart), more than the hardware prefetchers follow. In chunks of
    tiles, with the channel blocks inside each chunk, a block writes a run of whole lines into
    each of its planes while the chunk's input (reduction x chunk floats, at most half of L1)
    is re-read from L1. Only from 8 tiles a chunk (NR = 16 on AVX2: 512 bytes of each plane).
    Zen 3 (32 KiB L1), one 1x1 layer + bias + Relu, best of 8 alternating rounds, unchunked ->
    chunked: 16 -> 96 on 112x112 (16 tiles a chunk) 504 -> 458 us, 32 -> 64 on 112x112 (8)
    619 -> 583, 24 -> 144 on 56x56 (10) 250 -> 245; shorter chunks gained nothing or lost:
    64 -> 64 on 112x112 (4) 1131 -> 1128, 128 -> 128 on 112x112 (2) 4823 -> 4948, 64 -> 256
    on 56x56 (4) 1070 -> 1082. MobileNetV2 8.49 -> 8.02 ms (onnxruntime 9.31)."""
    if not caps.l1d_bytes:
        return 0
    per = caps.l1d_bytes // 2 // (4 * reduction * nr)
    while per > 1 and per * nr * 4 % LINE:
        per -= 1
    return per if per >= 8 else 0


def reread_cost(caps, nbytes: int) -> int:
    """What reading `nbytes` again costs, in L2-byte units: nothing from the first half of L1,
    a byte each from the first half of L2, three from beyond (L3 and memory deliver a third of
    L2's bandwidth or less). Targets without cache figures (l2_bytes 0): the byte count."""
    if not caps.l2_bytes:
        return nbytes
    return nbytes * (0 if nbytes <= caps.l1d_bytes // 2 else 1 if nbytes <= caps.l2_bytes // 2 else 3)


def _blocks(mg, mr):
    full = mg // mr
    return full, mg - full * mr


def _pack(w, s: Shape, mr: int, axes) -> np.ndarray:
    """w (M, cg, KH, KW) -> per group, per block of MR channels (the last block may be
    smaller): the reduction dims in `axes` order (1 = ic, 2 = kh, 3 = kw), then the block's
    channels. A block starting at channel o of group gi starts at element (gi*mg + o)*ktot."""
    w = w.reshape(s.m, s.cg, s.kh, s.kw)
    parts = []
    full, tail = _blocks(s.mg, mr)
    for gi in range(s.g):
        for o0, r in [(o * mr, mr) for o in range(full)] + ([(full * mr, tail)] if tail else []):
            blk = w[gi * s.mg + o0: gi * s.mg + o0 + r]
            parts.append(blk.transpose(tuple(axes) + (0,)).reshape(-1))
    return np.concatenate(parts)


def kh_range(k, s: Shape, oh):
    """Kernel rows whose input row is inside the input for output row oh (IR values)."""
    b = k.b
    if s.kh == 1 and s.pt == 0 and (s.ho - 1) * s.sh < s.hin:
        return k.c(0), k.c(1)
    top = b.sub(k.c(s.pt), b.mul(oh, k.c(s.sh)))  # kh*dh >= top
    bot = b.sub(k.c(s.hin - 1 + s.pt), b.mul(oh, k.c(s.sh)))  # kh*dh <= bot
    return tap_range(k, top, bot, s.dh, s.kh)


def tap_range(k, top, bot, d: int, n: int):
    """The taps t in [0, n) with top <= t * d <= bot (IR values): (lo, hi), an empty range
    where there are none."""
    b = k.b
    lo = b.sub(k.c(0), cg.floordiv(b, b.sub(k.c(0), top), d)) if d > 1 else top
    hi = b.add(cg.floordiv(b, bot, d), k.c(1)) if d > 1 else b.add(bot, k.c(1))
    lo = b.select(b.icmp_signed("<", lo, k.c(0)), k.c(0), lo)
    hi = b.select(b.icmp_signed(">", hi, k.c(n)), k.c(n), hi)
    return lo, hi


def row_runs(s: Shape, w: int, nv: int):
    """Runs of tile positions (NV vectors of `w` lanes along an output row) that share their
    masks: [(t0, t1, (masks, store))], masks[c][j] the (wide: w * stride) lane mask of kernel
    column c for vector j, store[j] the lanes inside the row."""
    nr = nv * w
    runs = []
    for t in range(math.ceil(s.wo / nr)):
        masks = []
        for c in range(s.kw):
            per = []
            for j in range(nv):
                ow0 = t * nr + j * w
                if w == 1:
                    iw = ow0 * s.sw + c * s.dw - s.pl
                    per.append((ow0 < s.wo and 0 <= iw < s.win,))
                else:
                    iw = ow0 * s.sw + c * s.dw - s.pl + np.arange(w * s.sw)
                    per.append(tuple(bool(x) for x in (iw >= 0) & (iw < s.win)))
            masks.append(tuple(per))
        store = tuple(tuple(bool(x) for x in (t * nr + j * w + np.arange(w) < s.wo))
                      for j in range(nv))
        sig = (tuple(masks), store)
        if runs and runs[-1][2] == sig and runs[-1][1] == t:
            runs[-1] = (runs[-1][0], t + 1, sig)
        else:
            runs.append((t, t + 1, sig))
    return runs


def valid_taps(s: Shape):
    """[(kernel row, kernel column, flat input shift)] of the taps that read the input for at
    least one output position (a flat tile reads tap t at the output position + shift)."""
    out = []
    for a in range(s.kh):
        for c in range(s.kw):
            ih_ok = any(0 <= oh + a * s.dh - s.pt < s.hin for oh in range(s.ho))
            iw_ok = any(0 <= ow + c * s.dw - s.pl < s.win for ow in range(s.wo))
            if ih_ok and iw_ok:
                out.append((a, c, (a * s.dh - s.pt) * s.win + c * s.dw - s.pl))
    return out
