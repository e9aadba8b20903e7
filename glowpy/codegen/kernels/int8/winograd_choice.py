"""When an integer QConv runs as Winograd F(2x2, 3x3) on pmaddwd pairs (int8/winograd.py), with
what blocking, and its weights transformed.

Exactness. With d = x - zp (|d| <= 255) and 2G = [[2,0,0],[1,1,1],[1,-1,1],[0,0,2]] (the
integer F(2,3) weight transform, twice G), V = B^T d B stays within 4 x 255 = 1020 and
4U = (2G) g (2G)^T within 9 x 255 = 2295 (int8 weights: 1152): both int16, and a pmaddwd pair of
their products within 4.7e6. The sums over the input channels and A^T M A are int32 adds, exact
modulo 2^32 whatever they pass through on the way, so the result, 4 x the direct convolution's
sum S, is exact where |4 S| < 2^31 (`exact`, from the weights), and S = that >> 2 exactly.

Cost (`pays`). F(2x2) multiplies alpha^2 = 16 values per 2x2 outputs per channel pair where the
direct convolution does 36: 2.25x fewer, at pmaddwd's rate. Without VNNI the direct kernels'
best is quads16 (pmaddubsw): 2x pmaddwd's multiply-adds an instruction, but pmaddwd issues
faster (hand-written loops from L1 on this Zen 3: pairs 55 G multiply-adds/s, quads16 82-89).
The model counts, in quads16 steps per vector of 8 outputs and output channel: the direct
kernel's steps (9C/4; pairs: 9C/2 at PAIR_COST) and its per-output work (EPILOGUE: the
requantization, packing, corrections), against the Winograd's 16 C/2 pair steps per tile and
its transforms (INPUT per tile vector and channel pair, shared by the output channels;
OUTPUT and four epilogues per tile vector and output channel). Fitted to single layers on
this Zen 3 (Winograd / quads16, forced, rounds interleaved): 16 -> 16 on 112x112 0.65 (model
0.66), 32 -> 32 on 112x112 0.72 (0.70), 64 -> 64 on 56x56 0.63-0.66 (0.65), 128 -> 128 on
28x28 0.62 (0.65), 256 on 14x14 0.65 (0.66); and both weights' bytes (WEIGHT_BYTE). Below
MIN_CHANNELS input or output channels the transforms are not repaid: 3 -> 16 on 32x32 1.2 of
pairs' time, 8 -> 8 1.0."""
from __future__ import annotations

import math

import numpy as np

from glowpy.ir import qmath

G2 = np.array([[2, 0, 0], [1, 1, 1], [1, -1, 1], [0, 0, 2]], np.int64)  # 2 G of F(2, 3)
MR, NV = 6, 2  # register tile: 12 int32 accumulators, 2 vectors of V, a splat, a product
PAIR_COST = 0.7  # time of a pmaddwd pair step against a quads16 step (the module's fit)
EPILOGUE = 15  # per vector of outputs and output channel, in quads16 steps
INPUT, OUTPUT = 60, 13  # transforms per tile vector: of a channel pair, of an output channel
MIN_CHANNELS = 16
# model steps a byte of weights costs, streamed from past the L2 once a call: 4U is 3.6x the
# int8 weights (16 int16 a channel pair against 9 bytes a channel), and on small planes few
# tiles share each word. ResNet-18 int8's 3x3 512 on 7x7 (8.4 MB of 4U against 2.4 MB), AVX2
# code on a Zen 5: Winograd 1.03x the direct (positions on the lanes) where the model without
# this term gave 0.76; 256 on 14x14 0.78 (0.73 without, 0.81 with)
WEIGHT_BYTE = 0.19


def fits(node) -> bool:
    """A 3x3, stride-1, undilated, ungrouped 2-D QConv with an 8-bit output."""
    if node.op != "QConv" or node.attrs.get("group", 1) != 1 or len(node.inputs[0].shape) != 4 \
            or np.dtype(node.outputs[0].dtype).itemsize != 1:
        return False
    win = node.opdef.window(node)
    return tuple(node.inputs[1].shape[2:]) == (3, 3) and all(s == 1 for s in win.strides) and \
        all(d == 1 for d in win.dilations)


def exact(node) -> bool:
    """4 x the direct sums fit int32 for every input (the module's bound)."""
    w = node.inputs[1].const
    zp = node.attrs["x_zp"]
    dev = qmath.sum_bound(w, np.zeros(w.shape[0], np.int64), node.inputs[0].dtype, zp)
    return bool(np.all(4 * dev < 1 << 31))


def takes(caps, node) -> bool:
    """The kernel can run this QConv (one x86's integer kernels take: pairs.integer): 8-lane
    pmaddwd (AVX2 and up; the kernel keeps 8 lanes), the shape, exact."""
    return caps.pair_madd >= 8 and fits(node) and exact(node)


def tiles(node) -> tuple[int, int]:
    """(tile rows, tiles per row) of the output plane."""
    ho, wo = node.outputs[0].shape[2:]
    return -(-ho // 2), -(-wo // 2)


def pays(node, direct: str | None) -> bool:
    """The Winograd's estimated time below that of the direct grouping the node would take
    (pairs.kind: quads16 or pairs; never against VNNI's quads), by the module's model."""
    c, m = node.inputs[0].shape[1], node.outputs[0].shape[1]
    if direct not in ("quads16", "pairs") or min(c, m) < MIN_CHANNELS:
        return False
    th, tw = tiles(node)
    ho, wo = node.outputs[0].shape[2:]
    w = 8
    steps = math.ceil(9 * c / 4) if direct == "quads16" else math.ceil(9 * c / 2) * PAIR_COST
    direct_cost = (steps + EPILOGUE) * m * math.ceil(ho * wo / w) + \
        WEIGHT_BYTE * 9 * c * m * (1 if direct == "quads16" else 2)
    tvec = th * math.ceil(tw / w)  # vectors over each row's tiles, as the transforms run
    gvec = math.ceil(th * tw / w)  # the GEMM's vectors over the block's tiles
    gemm = 16 * math.ceil(c / 2) * math.ceil(m / MR) * MR * gvec * PAIR_COST
    transforms = tvec * (math.ceil(c / 2) * INPUT + m * (OUTPUT + 4 * EPILOGUE))
    return gemm + transforms + WEIGHT_BYTE * 16 * math.ceil(c / 2) * m * 4 < direct_cost


def blocking(caps, node, budget: int) -> dict | None:
    """{"rows", "tpad", "bytes"}: tile rows per block, as many as the scratch `budget` allows up
    to the target's L2 for V (swept once per block of MR output channels); the tile slots of
    one point's row of V and M (the block's tiles, with room for the last row's vector stores
    past its tiles); the scratch's bytes (V [16][C/2][tpad] and M [16][MR][tpad], int32).
    None where one tile row does not fit."""
    th, tw = tiles(node)
    c2 = -(-node.inputs[0].shape[1] // 2)

    def block(rows):
        tpad = -(-((rows - 1) * tw + -(-tw // 8) * 8) // 8) * 8  # >= rows * tw, whole vectors
        return {"rows": rows, "tpad": tpad, "bytes": 16 * (c2 + MR) * tpad * 4}
    rows = 0
    while rows < th and block(rows + 1)["bytes"] <= budget and \
            (not rows or 16 * c2 * block(rows + 1)["tpad"] * 4 <= max(caps.l2_bytes, 1 << 18)):
        rows += 1
    # blocks as even as the count allows (no short last block re-streaming all of 4U)
    return block(-(-th // -(-th // rows))) if rows else None


def macs(node) -> int:
    """Executed multiply-adds: 16 per tile and channel pair (the transforms' adds not counted)."""
    th, tw = tiles(node)
    return node.inputs[0].shape[0] * th * tw * 16 * node.inputs[0].shape[1] * \
        node.outputs[0].shape[1]


def weights(w: np.ndarray, mr: int = MR) -> np.ndarray:
    """4U = (2G) g (2G)^T per (k, c) as int32 words of two int16 (channels 2p, 2p + 1, the first
    in the low half; an odd C padded with a zero channel), laid out per block of mr output
    channels (the last: the rest) [16][C/2][rows]: the GEMM's read order."""
    kk, c = w.shape[:2]
    u = np.einsum("ai,kcij,bj->kabc", G2, w.astype(np.int64), G2).reshape(kk, 16, c)
    u = np.concatenate([u, np.zeros((kk, 16, c % 2), np.int64)], axis=2)
    words = ((u[..., 0::2] & 0xFFFF) | ((u[..., 1::2] & 0xFFFF) << 16)).astype(np.uint32)
    words = words.view(np.int32)  # [K][16][C/2]
    return np.concatenate([words[k0:k0 + mr].transpose(1, 2, 0).reshape(-1)
                           for k0 in range(0, kk, mr)])
