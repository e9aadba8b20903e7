"""The plan of a Winograd convolution (conv/winograd.py): F(m x m) per layer, m = 2 or 4 for
3x3 kernels (2 for 5x5), and the blocking of its tile rows into the scratch.

m (`_cost`): F4's multiplies are 2.25/4 of F2's, but its transforms cost more per
tile, its tiles per row halve (vectors over the tiles of a row fill worse on small planes:
14x14 gives 4 tiles of 4 per row, padded to 16 outputs, one 8-lane vector half empty) and U
grows 36/16. The model counts the vector operations of each part (GEMM multiply-adds over
the padded tile slots, the transforms' operations from winograd_transforms.ops, loads and
stores) for each m from the target's vector width and register tiles and the layer's shape,
and takes the cheaper. Measured on the AVX2 Zen 3 (zoo ResNet-18, one thread, same run): every
candidate layer F2 44.3 ms, F4 wherever it fits 40.4, the model's choice (F4 at 56x56 and
28x28, F2 at 14x14 where 4 tiles per row half-fill a vector) 38.9."""
from __future__ import annotations

import math

from glowpy.codegen.kernels.conv import winograd_transforms as tf
from glowpy.codegen.kernels.tiles import L1_WAYS, LINE, choose_tile, l1_sets

SCRATCH_MAX = 1 << 20  # scratch at most this big without cache figures (scratch_max)
MAX_TILES = 256  # F(2x2) tiles per block (F(4x4): the same bytes of V, 16/36 as many tiles)
MIN_TILES = 16  # F(2x2) tiles per block at least
BLOCK_TILES = 64  # F(2x2) tiles per block enough when U stays in cache
U_CACHED = 1 << 20  # bytes of U that stay in cache between blocks
MAX_U = 16 << 20  # bytes of transformed weights at most (u_fits)


def scratch_max(caps) -> int:
    """Scratch bytes a layer may take: twice the target's L2 (SCRATCH_MAX, as measured on the
    512 KiB Zen 3, without cache figures). Beyond its U_CACHED, U is streamed from past L2 once
    per block, so a block too small for the plane costs a whole stream of U more, and its
    padded tile slots more multiply-adds; V over L2 by part costs less. Zen 4 (1 MiB L2),
    alone, budget not binding, ms: 256 -> 256 on 14x14 (F2, U 4 MiB) in blocks of 4 tile rows
    (0.83 MB, 80 slots for 49 tiles) 1.61, in one of 7 (1.08 MB, 64 slots) 1.31; 128 -> 128
    on 28x28 (F4, U 2.4 MiB) 1.09 and 1.00 (0.94 and 1.25 MB)."""
    return max(SCRATCH_MAX, 2 * caps.l2_bytes)


def in_place(mr, c, kk):
    """M[xi] can overwrite V[xi]: one channel block covers all K output channels, so each
    register tile has read its columns of V[xi] for good before it stores them, and M's rows
    fit in V's."""
    return kk <= mr and kk <= c


def points_outer(l2_bytes: int, v_bytes: int) -> bool:
    """Whether the GEMM takes the alpha^2 points outermost, all K output channels for each
    (each register tile's columns of V[xi] held in L1 while every channel block passes, M for
    all K written over V's planes one plane behind), rather than the channel blocks outermost
    (all of V swept once per block of MR channels, M only MR channels deep, in L1): where a
    block's V is over half the L2 (without cache figures: half of U_CACHED), so that the
    sweeps, one per channel block, would stream it from L3. The previous rule at the same
    bound only prefetched V's next plane into L2 (ResNet-18 0.986 of its time then).
    -instrument-profile, min of 6-8 alternating rounds, the time summed over the layers,
    against that: AVX2 code (Zen 3's caches) on the Zen 4: ResNet-18 0.955 (its 56x56
    layers, V 0.3 MB, 0.94-0.97; 28x28 0.94; 14x14, V 0.9 MB, 0.79-0.82), ResNet-50 0.978,
    YOLO-style detector 0.958, CRNN 0.974, VGG 0.944 (its 14x14 layer 0.84), U-Net 0.988,
    super-resolution 1.016 (its 64 -> 64 on 224x224, V 0.5 MB and M 0.5 MB, 1.09: on this
    1 MiB L2 the sweeps V fits in cost less than M's round trip to L3). AVX-512 code (1 MiB
    L2): VGG 0.923 (128 -> 128 on 28x28, V 1.2 MB, 0.67), ResNet-50 0.990, ResNet-18,
    U-Net and super-resolution level. Every layer this way: ResNet-8's 16-channel layers,
    whose V fits, 1.3x slower (M to L2 and back, where the channel blocks keep it in L1)."""
    return v_bytes > (l2_bytes or U_CACHED) // 2


CHAINS = 4  # independent sums the lone tiles keep (lone_tiles): an FMA's latency in issues


def plane(floats: int, planes: int) -> int:
    """Floats each of the scratch's `planes` (alpha^2; alpha^2 + 1 with the points outermost,
    layout) planes V[xi] or M[xi] takes. An input
    tile's alpha^2 values are stored one to a plane, at the same offset in each: planes a
    multiple of 2 KiB apart put those stores in one or two L1 sets, whose 8 ways cannot hold
    36 half-written lines, and V's lines went back and forth to L2. Where the planes' sets
    cannot hold a line of each, a plane is rounded up to an odd count of lines, which
    spreads them over as many sets as there are planes (up to 64), for a line a plane at
    most; elsewhere (ResNet-8's 16 planes of 1 KiB: 4 sets, 32 ways) it stays as it is.
    Zen 4, one layer (F4, scratch 0.96 MB, ResNet-50's 64 -> 64 on 56x56, planes 26 KiB
    apart), best of 8 alternating rounds: AVX2 940 -> 800 us, its input transform 398 ->
    143; AVX-512 819 -> 739. Inside ResNet-50 (AVX2, -instrument-profile, min of 10 rounds):
    its three 56x56 layers 16-18% faster, the 28x28 ones 4-10%, the model 1.6%."""
    if l1_sets(4 * floats, planes) * L1_WAYS >= planes:
        return floats
    lines = -(-floats * 4 // LINE)
    return (lines | 1) * LINE // 4


def lone_tiles(simd, mr: int, used: int) -> int:
    """Tiles of a block's last vector of tile slots that the GEMM runs with the output
    channels in the lanes (_Emitter.lone), or 0: at most MR/2 of them (the padded vector
    costs MR multiply-adds a channel, they count one each), for MR up to a vector's lanes.
    7 x 7 = 49 tiles (ResNet-50's 14x14 in F2, 28x28 in F4) fill 3 vectors of 16 lanes and
    one slot of a fourth (6 of 8 lanes and one). Zen 4, alone, ms: 256 -> 256 on 14x14
    1.31 -> 1.14, 128 -> 128 on 28x28 1.00 -> 0.79."""
    rem = used % simd.width
    return rem if simd.width > 1 and mr <= simd.width and 0 < rem <= mr // 2 else 0


def tpad(simd, tw, r):
    """Tile slots of a block of r tile rows: the rows' tiles back to back, the last row's
    rounded up to whole vectors (its input transform stores whole vectors), then the whole."""
    w = simd.width
    return math.ceil(((r - 1) * tw + math.ceil(tw / w) * w) / w) * w


def layout(a2, c, kk, mr, tp, outer):
    """(floats a plane of the scratch, scratch bytes) for alpha^2 points, C -> K channels,
    register tiles of MR channels, tp tile slots a block and the GEMM's order (`outer`: the
    points outermost, points_outer). Channel blocks outermost:
    alpha^2 planes of V (C rows) then alpha^2 of M (MR rows), or V's alone where one block of
    MR channels covers K (in_place). Points outermost: alpha^2 + 1 planes of max(C, K padded
    to MR) rows, V[xi] in plane xi + 1 and M[xi] written to plane xi."""
    if outer:
        p = plane(max(c, math.ceil(kk / mr) * mr) * tp, a2 + 1)
        return p, (a2 + 1) * p * 4
    p = plane(c * tp, a2)
    return p, a2 * (p + (0 if in_place(mr, c, kk) else plane(mr * tp, a2))) * 4


def _blocking(simd, m, r, c, kk, ho, wo, budget, forced, l2_bytes):
    """(tile rows per block, padded tiles per block, MR, NV, scratch bytes, points outermost,
    tile columns per block or 0), or None when the budget holds too few tiles to repay
    streaming U once per block. Blocks are as few as the budget allows, and even. Where one
    tile row does not fit (wide planes: 64 channels of 640 columns in F4 hold 1.5 MB of V a
    row), a block is one tile row's run of `cols` tiles, a multiple of the lanes (column
    blocks, _Emitter.block). forced["rows"] / forced["cols"] (through the registry, e.g.
    `forcing({"ConvWinograd": ("winograd", {"rows": 1})})`) fix the tile rows and columns per
    block."""
    a2 = tf.alpha(m, r) ** 2
    th, tw = math.ceil(ho / m), math.ceil(wo / m)
    w = simd.width

    def outer(tp):
        return forced.get("outer", points_outer(l2_bytes, a2 * plane(c * tp, a2) * 4))

    def scratch(tp, mr):
        return layout(a2, c, kk, mr, tp, outer(tp))[1]

    # tile counts are F(2x2)'s: F(4x4) tiles hold 36/16 the scratch each
    def tiles(t):
        return t * 16 // a2

    def fits(r, tc=tw):
        tp = tpad(simd, tc, r)
        return scratch(tp, choose_tile(simd, kk, tp, 1)[0]) <= budget and r * tc <= tiles(MAX_TILES)

    # U in cache: blocks of ~BLOCK_TILES tiles (less scratch); U beyond: as few blocks as fit,
    # since every block streams all of U once
    want = tiles(BLOCK_TILES if 4 * a2 * c * kk <= U_CACHED else MAX_TILES)
    cols = 0
    if "cols" in forced and forced["cols"] and forced["cols"] < tw:
        cols, rows = forced["cols"], 1
        if cols % w or not fits(1, cols):
            return None
    elif "rows" in forced:
        rows = min(forced["rows"], th)
        if not fits(rows):
            return None
    else:
        rows = 1
        while rows < th and rows * tw < want and fits(rows + 1):
            rows += 1
        if not fits(rows):  # column blocks: the widest run of whole vectors that fits
            cols = min(tw, max(want, tiles(MIN_TILES))) // w * w
            while cols >= w and not fits(1, cols):
                cols -= w
            if cols < max(w, tiles(MIN_TILES)) or cols >= tw:
                return None
        elif rows * tw < min(tiles(MIN_TILES), th * tw):
            return None
    if cols:
        tp = cols
    else:
        rows = math.ceil(th / math.ceil(th / rows))
        tp = tpad(simd, tw, rows)
    mr, nv, _ = choose_tile(simd, kk, tp, 1)
    return rows, tp, mr, nv, scratch(tp, mr), outer(tp), cols


def _cost(simd, m, r, n, c, kk, ho, wo, blocking) -> float:
    """Vector operations of the layer in F(m x m) with this blocking (the unit: one vector
    instruction; multiply-adds, loads, stores and shuffles each issue about two a cycle on the
    targets that take Winograd). GEMM: alpha^2 multiply-adds per channel pair and vector of
    tile slots, K padded to MR (a tile alone, lone_tiles: one per input channel and MR).
    Input transform, per tile row, channel and vector of a row's tiles: alpha^2 strided loads
    (m registers and their shuffles) and stores, the transform's operations. Output
    transform, per output channel: alpha^2 loads, the transform, and per output vector its
    bias, interleave and store."""
    rows, tp, mr = blocking[:3]
    cols = blocking[6]
    a2, w = tf.alpha(m, r) ** 2, simd.width
    th, tw = math.ceil(ho / m), math.ceil(wo / m)
    full, tail = divmod(th, rows)
    # per block: vectors of tile slots, MR multiply-adds a channel each; tiles alone, one
    vecs = lone = 0
    if cols:  # column blocks: every block runs its whole vectors
        vecs = th * math.ceil(tw / cols) * (cols // w)
    for nr, count in (() if cols else ((rows, full), (tail, 1 if tail else 0))):
        alone = lone_tiles(simd, mr, nr * tw) if count else 0
        vecs += count * (tpad(simd, tw, nr) // w - (1 if alone else 0))
        lone += count * alone
    gemm = a2 * math.ceil(kk / mr) * c * (mr * vecs + lone)
    t_in, t_out = tf.ops(m, r)
    row_vecs = th * math.ceil(tw / w)
    inp = row_vecs * c * (a2 * (2 * m + 2) + t_in)
    out = row_vecs * kk * (a2 + t_out + 3 * m * m)
    return n * (gemm + inp + out)


def u_fits(c: int, kk: int, r: int = 3) -> bool:
    """Some F(m x m)'s transformed weights for C -> K channels stay within MAX_U (Winograd may take
    the layer; it streams U in its own blocks). U is streamed from memory once per block, and a
    plane of MIN_PLANE outputs or more (winograd_select.py) gives each of its floats 36 or more
    tiles' multiply-adds, which the prefetched stream keeps up with. 4 MiB (the first plan's bound,
    before U was prefetched) kept the direct kernels on every layer of 192 -> 384 channels and
    up. Raised to 16 MiB, AVX2 code, zoo and held-out models, -instrument-profile, min of 8
    alternating rounds: tiny-YOLOv2's 13x13 layers (256 -> 512, 512 -> 1024 in channel chunks)
    0.70-0.73 of their time, the model 0.77 (AVX-512: 0.88); FCN-ResNet50 0.92 (its dilated
    256-channel phases F4, 0.67 of their time); AlexNet's 192 -> 384 layer 0.65; the YOLO-style
    detector's 256 -> 256 on 20x20 0.75, the model 0.95; CRNN 0.85; ResNet-18, ResNet-50,
    DenseNet, Inception, U-Net and VGG unchanged (their layers under 4 MiB or under MIN_PLANE).
    Past 16 MiB untried: 7x7 planes are under MIN_PLANE, and larger layers come in channel
    chunks (catalog.split_reduction)."""
    return any(4 * tf.alpha(m, r) ** 2 * c * kk <= MAX_U for m in tf.SIZES[r])


def plan(simd, s, budget, forced=None, l2_bytes=0):
    """(m, blocking) for a Conv of shape `s` (_shape), the cheaper F(m x m) of those whose U and
    scratch fit, or None. `forced` (registry params): {"m": 2 or 4} (where the kernel size has
    that m: 5x5 keeps F2), {"rows": r}, {"cols": t}
    and/or {"outer": bool} (the GEMM's order, points_outer); l2_bytes: the target's L2 (0: no figures)."""
    n, c, h, w, kk, pads, r = s
    ho, wo = h + pads[0] + pads[2] - r + 1, w + pads[1] + pads[3] - r + 1
    forced = forced or {}
    best = None
    for m in ([forced["m"]] if forced.get("m") in tf.SIZES[r] else tf.SIZES[r]):
        if 4 * tf.alpha(m, r) ** 2 * c * kk > MAX_U:
            continue
        blocking = _blocking(simd, m, r, c, kk, ho, wo, budget, forced, l2_bytes)
        if blocking is None:
            continue
        cost = _cost(simd, m, r, n, c, kk, ho, wo, blocking)
        if best is None or cost < best[0]:
            best = (cost, m, blocking)
    return best and best[1:]
