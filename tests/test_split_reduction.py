"""Convolutions whose block weights outgrow half of L2, split over chunks of input channels
(glowpy/ir/passes/split_reduction.py, the chunk size from kernels/catalog.late_rewrites):
compiled for explicit x86 levels (their family cache figures: 32 KiB L1, 512 KiB L2), run and
compared with onnxruntime, with the number of Conv instructions each compiles to."""

import numpy as np
import pytest

import vector_levels
from util import GraphBuilder, check_against_onnxruntime, memory_report

RNG = np.random.default_rng(3)


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def model(c, m, hw, k=3, bias=True, residual=False, dilation=1):
    g = GraphBuilder(x=f32(1, c, hw, hw), **({"r": f32(1, m, hw, hw)} if residual else {}))
    ins = ["x", f32(m, c, k, k, scale=1 / np.sqrt(c * k * k))] + ([f32(m, scale=0.1)] if bias else [])
    y = g.node("Conv", ins, output=False, pads=[dilation * (k // 2)] * 4,
               dilations=[dilation] * 2)
    if residual:
        y = g.node("Add", [y, "r"], output=False)
    g.node("Relu", [y])
    return g.model(opset=13), g.feeds


def conv_count(m, tmp_path, **options):
    return sum(i["kernel"] in ("Conv", "ConvWinograd")
               for i in memory_report(m, tmp_path, **options)["instructions"])


# (input channels, output channels, plane, kernel, bias, residual, dilation) and the Conv
# instructions expected at SSE2 / AVX2 / AVX-512 (a block = two vectors of output channels:
# 8 / 16 / 32 channels of weights per input channel; a split when they pass 256 KiB, into
# chunks whose input plus block weights take 3/4 of 512 KiB, of 64 channels at least; 3x3
# layers Winograd may take -- 8+ lanes, 144+ outputs, U within its MAX_U -- are left to it)
CASES = {
    "two_chunks_5x5": ((512, 24, 8, 5, True, False, 1), (2, 3, 5)),
    # U within winograd_plan.MAX_U (F2: 16 MiB), but 81 outputs are too few for Winograd
    # (winograd_select.MIN_PLANE): split like any direct convolution
    "residual_epilogue": ((1024, 256, 9, 3, True, True, 1), (2, 3, 4)),
    "no_bias_dilated": ((640, 16, 10, 3, False, False, 2), (1, 2, 3)),  # 5x5 phases: dilated
    "many_chunks": ((1536, 8, 12, 5, True, False, 1), (6, 9, 15)),
    "small_plane_kept": ((1024, 16, 7, 5, True, False, 1), (1, 1, 1)),  # 49 positions
    "1x1_kept": ((2048, 16, 16, 1, True, False, 1), (1, 1, 1)),
    # stride-1 1x1s whose packed micro-panel (C x NR floats) passes 64 KiB: chunks that fit it
    # (pointwise_packed.channel_chunk; SSE2's panel holds 2048 channels), each packed, the
    # 7x7 plane's last position in the tail with lanes over channels, a residual in the last;
    # AVX-512's tiles for 20 outputs are 5 x 4 (NR = 64 positions, 256 channels a panel)
    "1x1_packed_chunks_7x7": ((1100, 20, 7, 1, True, True, 1), (1, 2, 5)),
    "1x1_packed_chunks_deep": ((2048, 24, 7, 1, False, False, 1), (1, 2, 4)),
    # 64 outputs, under Winograd's MIN_PLANE: a direct convolution, split where its block
    # weights pass 256 KiB (AVX2 and up); it was left whole for Winograd when U fitted MAX_U
    "small_plane_not_winograd": ((512, 24, 8, 3, True, False, 1), (1, 2, 2)),
}


@pytest.mark.parametrize("level", vector_levels.params(vector_levels.LEVELS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_split_matches_onnxruntime(case, level, tmp_path):
    args, expected = CASES[case]
    m, feeds = model(*args)
    want = expected[[lv.name for lv in vector_levels.LEVELS].index(level.name)]
    assert conv_count(m, tmp_path / "plan", **level.options) == want
    assert conv_count(m, tmp_path / "O0", opt_level=0, **level.options) == 1
    if not vector_levels.plan_only(level):
        check_against_onnxruntime(m, feeds, tmp_path / "run", rtol=1e-4, atol=1e-4,
                                  **level.options)
