"""Where channel-vectorized float Conv tiles (conv/channel.py) pay, and their register tile:
the plan of the `channel_vectorized` variant, from the layer's shape and the target's lanes,
registers and caches (the score of conv_fast's tiles.step_cycles model)."""
from __future__ import annotations

import math
from dataclasses import replace

from glowpy.codegen.kernels.tiles import Shape, _blocks, step_cycles
from glowpy.codegen.kernels.conv import channel_chunks, pointwise_packed, runtime_weights
from glowpy.codegen.kernels.conv.pixel import form
from glowpy.codegen.kernels.conv.channel_last import scratch_of

# reductions from which channel-vectorized tiles win (unstrided, strided): a strided tap is a
# wide load and a shuffle per pixel vector (ResNet-8's 3x3 stride-2 16->32 layer, 144 taps: 9%)
CHAN_TAPS = (160, 140)
# accumulators of a tile: every register but the weights, a broadcast and one spare (AVX2: 12
# in 16 ymm), at most 24 (AVX-512, NEON). AVX2 tiles were held to 8 on reductions under 1,024
# taps (Zen 3: ResNet-8 4% slower with 12, when its tile stores cost more); 8 chains are just
# the FMA latency x 2 pipes, and the 1D TCN's 384-tap layers ran at 60% of the peak. Zen 4,
# -mcpu=znver3 code, -instrument-profile, sum of per-layer minima over 6-16 alternating rounds,
# 8 -> 12: TCN 0.82, YuNet 0.86, ResNet-8 0.94, VWW 0.95, YOLO 0.96, ResNet-18 0.99, KWS 1.00
MAX_CHAN_ACC = 24
SCATTER_CYCLES = 12  # writing one channel vector of a tile out (turned around), roughly
FLAT_TILES = 16  # flat tiles per plane at most (each is its own code)
# the flat tiles' straight-line code must score this much better than the rows' loops: ResNet-8's
# 8x8 layers (+16% by score) ran 8% slower flat on Zen 3; 7-wide rows score +29%
FLAT_GAIN = 1.2


def choose(simd, s: Shape, accumulate: bool):
    """(score, NPX, NVO): useful multiply-adds per cycle, in the units of conv_fast's scores."""
    v, regs = simd.width, simd.registers
    if v == 1:
        return None
    taps = s.cg * s.kh * s.kw
    best = None
    for nvo in range(1, 4):  # measured on AVX-512: 7 pixels x 3 vectors is the sweet spot
        ob = nvo * v
        if nvo > 1 and (nvo - 1) * v >= s.mg:
            break
        full, tail = _blocks(s.mg, ob)
        for npx in range(1, min(s.wo, 8) + 1):
            if npx * nvo > min(MAX_CHAN_ACC, regs - nvo - 2):
                break

            def cost(px, nv):  # (tiles.step_cycles: the model every register tile is
                # chosen by; its own here ranked 3 x 3 above 6 x 2 on AVX2, which measured
                # 90% against 98% of the peak: AlexNet's 5x5 64 -> 192 on 27x27, Zen 4)
                store = px * nv * SCATTER_CYCLES * (2 if accumulate else 1) / taps
                return step_cycles(px, nv) + store
            pfull, prem = divmod(s.wo, npx)
            row = pfull * cost(npx, nvo) + (cost(prem, nvo) if prem else 0)
            if tail:
                row_t = pfull * cost(npx, math.ceil(tail / v)) + (cost(prem, math.ceil(tail / v)) if prem else 0)
            else:
                row_t = 0
            score = s.mg * s.wo / (full * row + row_t)
            if tail:
                score *= 0.99
            if best is None or score > best[0]:
                best = (score, npx, nvo)
    return best


def plan(k):
    """{npx, nvo[, flat | nhwc]} when the output channels should fill the vector lanes (nhwc:
    the instruction got a channels-last scratch, channel_last.place): measured on AVX-512,
    channel-vectorized tiles waste no lane on small planes or strided columns but turn the
    result around before storing it, so they win once the reduction is over ~150 products per
    output (ResNet-18's 3x3 layers by 10-30%, MNIST's 5x5 by 40%) or the pixel lanes would be
    mostly idle (small planes, 5-wide rows); pixel-vectorized tiles win for short reductions
    (most 1x1s, a 7x7 first layer on 3 channels). Vector targets only; weights computed at
    run time where the instruction has their packing scratch (conv/runtime_weights.py)."""
    f = form(k, runtime_weights=runtime_weights.scratch(k) is not None)
    if f is None:
        return None
    s, simd, pointwise, flat, tile = f
    if simd.width == 1 or s.mg < simd.width and s.mg / simd.width <= _pixel_fill(s, simd):
        return None
    chan = choose(simd, s, k.instr.attrs.get("accumulate") is not None)
    taps = s.cg * s.kh * s.kw
    lanes = s.ho * s.wo if flat else s.wo
    nr = tile[1] * simd.width
    wasteful = lanes / (math.ceil(lanes / nr) * nr) < 0.7  # e.g. 5-wide rows in 16 lanes
    # a small plane in whole vectors: 7x7 fills 49 of 64 AVX-512 lanes, where channel tiles won
    # (measured on AVX-512); on AVX2 it fills 49 of 56 and the flat pixel tiles, which read
    # each channel's plane contiguously, run ResNet-50's 7x7 1x1 layers 11-17% faster (Zen 3:
    # 2048->512 1.75 -> 1.51 ms, 512->2048 2.04 -> 1.89 ms)
    plane = s.ho * s.wo
    filled = plane / (math.ceil(plane / simd.width) * simd.width)
    # ... when its input is past L1 (R50: 100-400 KiB): VWW's 6x6 128-channel 1x1 layers (18
    # KiB) ran 4.5% slower pixel-vectorized
    x_bytes = s.cg * s.hin * s.win * 4
    past_l1 = bool(k.caps.l1d_bytes) and x_bytes > k.caps.l1d_bytes
    small_plane = (plane < 64 and s.cg >= 64
                   and (not (pointwise and flat) or filled < 0.8 or not past_l1)) or \
        (wasteful and not pointwise)
    clash = channel_chunks.takes_colliding(k, s)  # (never a 1x1)
    if chan is None or not ((not pointwise and taps >= CHAN_TAPS[s.sh > 1 or s.sw > 1])
                            or small_plane or clash):
        return None
    if pointwise and flat and pointwise_packed.takes_small_plane(k):
        return None  # (its full tiles fill every lane, its tail lanes run over channels)
    nhwc = scratch_of(k) is not None
    if s.rank == 2 and s.g == 1 and s.ho > 1:
        # rows shorter than a good tile (7-wide on AVX2: 4 + 3 pixels, 8 and 6 of 12
        # accumulators) waste registers on every row; tiles across row ends do not
        fl = choose(simd, flat_shape(s), k.instr.attrs.get("accumulate") is not None)
        if fl is not None and fl[0] > FLAT_GAIN * chan[0] and s.ho * s.wo <= FLAT_TILES * fl[1]:
            return {"npx": fl[1], "nvo": fl[2], "flat": True} | ({"nhwc": True} if nhwc else {})
    kc = channel_chunks.chunk_channels(k.caps, s, chan[2] * simd.width, chan[1], nhwc) \
        if chan[1] > 1 else None
    return {"npx": chan[1], "nvo": chan[2]} | ({"nhwc": True} if nhwc else {}) | ({"kc": kc} if kc else {})


def _pixel_fill(s, simd) -> float:
    """The best share of lanes pixel-vectorized tiles fill: along a row, or over the whole
    plane flattened. Fewer output channels than lanes still fill more lanes than pixels on
    tiny planes: mnist_onnx2c's 20 -> 12 3x3 layer on a 3x3 output, at 16 lanes 12 channel
    lanes against 3 (rows) or 9 (flat) pixel lanes, took 4,696 cycles pixel-vectorized
    (Zen 4, -instrument-profile)."""
    fill = lambda n: n / (math.ceil(n / simd.width) * simd.width)  # noqa: E731
    return max(fill(s.wo), fill(s.ho * s.wo))


def flat_shape(s: Shape) -> Shape:
    """The output plane as one row (what the flat tiles' stores and scores see)."""
    return replace(s, ho=1, wo=s.ho * s.wo, rank=1)
