"""Conv variant depthwise_phase (glowpy/codegen/kernels/conv/depthwise_phase.py): strided
depthwise layers through the padded, phase-split copy of each plane, at each x86 vector level
the host runs, against onnxruntime under guard pages (a copy or tap load that strays out of its
plane, or a store past the output, faults)."""
import json

import pytest

from glowpy.codegen.kernels.conv import depthwise
from glowpy.codegen.kernels.conv.depthwise_phase import SCRATCH_MAX, estimate, geometry, plan
from glowpy.codegen.kernels.tiles import Shape
from glowpy.codegen.kernels.vectors import Simd
from test_kernels_fast import check_guarded, f32
from util import GraphBuilder
from vector_levels import LEVELS, params


@pytest.mark.parametrize("level", params())
@pytest.mark.parametrize("shape, k, attrs, choice", [
    ((1, 6, 23, 21), 3, dict(pads=[1, 1, 1, 1], strides=[2, 2]), ("phase", 3, 1)),  # row remainder
    ((2, 5, 29, 30), 5, dict(pads=[2, 2, 2, 2], strides=[2, 2]), ("phase", 4, 2)),  # column tail
    ((1, 4, 17, 33), 3, dict(pads=[0, 2, 1, 0], strides=[3, 3]), ("phase", 2, 1)),  # asymmetric
    ((1, 3, 19, 19), 3, dict(pads=[3, 3, 3, 3], dilations=[2, 3], strides=[2, 2]), ("phase", 1, 3)),
    ((1, 4, 16, 16), 7, dict(pads=[3, 3, 3, 3], strides=[1, 2]), ("phase", 6, 1)),
    ((1, 4, 12, 40), 3, dict(strides=[2, 2]), ("phase", 2, 2)),  # no padding: unread last rows
])
def test_phase_tilings(shape, k, attrs, choice, level, tmp_path):
    """Each tiling, forced through the kernel registry, with and without bias."""
    check_forced_depthwise(shape, k, attrs, "depthwise_phase", choice, level, tmp_path, 0.3)


def check_forced_depthwise(shape, k, attrs, variant, choice, level, tmp_path, scale):
    """A depthwise k x k Conv with bias and Relu and one without, both forced to `variant`
    with `choice`, against onnxruntime under guard pages; both take that variant."""
    c = shape[1]
    g = GraphBuilder(x=f32(*shape))
    y = g.node("Conv", ["x", f32(c, 1, k, k, scale=scale), f32(c)], output=False, group=c,
               **attrs)
    g.node("Relu", [y])
    g.node("Conv", ["x", f32(c, 1, k, k, scale=scale)], group=c, **attrs)
    report = tmp_path / "m.json"
    check_guarded(g.model(opset=13), g.feeds, tmp_path, level, dump_memory_report=str(report),
                  kernel_variants={"Conv": (variant, choice)})
    got = [i["variant"] for i in json.loads(report.read_text())["instructions"]
           if i["kernel"] == "Conv"]
    assert got == [{"name": variant, "params": list(choice)}] * 2


@pytest.mark.parametrize("level", params())
def test_phase_chosen_where_its_copy_pays(level, tmp_path):
    """Unforced, the registry takes it for a strided layer on a large plane (3x3/2 on
    112x112: the shuffles saved outweigh the copy on SSE and AVX2; AVX-512's stride-2 vectors
    are two loads and a vpermt2ps, so the plain kernel keeps it there) and leaves a small
    plane (14x14, where the copy costs more than it saves) and stride 1 to conv/depthwise.py;
    outputs agree with onnxruntime."""
    g = GraphBuilder(x=f32(1, 4, 112, 112), z=f32(1, 4, 14, 14))
    g.node("Conv", ["x", f32(4, 1, 3, 3, scale=0.3), f32(4)], group=4, pads=[1, 1, 1, 1],
           strides=[2, 2])
    g.node("Conv", ["z", f32(4, 1, 3, 3, scale=0.3), f32(4)], group=4, pads=[1, 1, 1, 1],
           strides=[2, 2])
    g.node("Conv", ["z", f32(4, 1, 5, 5, scale=0.3), f32(4)], group=4, pads=[2, 2, 2, 2])
    report = tmp_path / "m.json"
    check_guarded(g.model(opset=13), g.feeds, tmp_path, level, dump_memory_report=str(report))
    got = [i["variant"]["name"] for i in json.loads(report.read_text())["instructions"]
           if i["kernel"] == "Conv"]
    large = "depthwise" if level.lanes == 16 else "depthwise_phase"
    assert got == [large, "depthwise", "depthwise"]


def test_phase_estimate_counts_the_copy():
    """The choice is a comparison of estimates: the phase kernel's includes its copy, so it
    is below the plain kernel's on the large planes only (AVX2 shape: 8 lanes, 16 registers;
    where each variant, forced, was measured faster on the AVX2 EPYC: the phases on 96 of
    112x112, 128 of 56x56 3x3 and 144 of 56x56 5x5, the plain kernel on 256 of 28x28 and
    512 of 14x14)."""
    simd = Simd(8, 16, False, True)
    ratio = {}
    for c, hw, k in ((96, 112, 3), (128, 56, 3), (144, 56, 5), (256, 28, 3), (512, 14, 3),
                     (672, 14, 5), (32, 24, 3)):
        ho = (hw + 2 * (k // 2) - k) // 2 + 1
        s = Shape(1, c, c, c, hw, hw, ho, ho, k, k, 2, 2, 1, 1, k // 2, k // 2, 2)
        ratio[hw, k] = estimate(s, simd)[0] / depthwise.estimate(s, simd)[0]
    assert ratio[112, 3] < 0.95 and ratio[56, 3] < 0.98 and ratio[56, 5] < 0.95
    assert ratio[28, 3] > 1.1 and ratio[14, 3] > 1.5 and ratio[14, 5] > 1.4 and ratio[24, 3] > 1.1


def test_plain_kernel_estimated_cheaper_on_avx512():
    """AVX-512 (16 lanes, 32 registers, cheap masks): every stride-2 layer that was measured,
    each variant forced, faster in the plain kernel on a Zen 4 (1.25-2x: Simd.strided_load)
    is estimated cheaper there too."""
    simd = Simd(16, 32, True, True)
    for c, hw, k in ((96, 112, 3), (144, 56, 3), (144, 56, 5), (240, 28, 5), (384, 28, 3),
                     (64, 112, 3), (576, 14, 3), (672, 14, 5)):
        ho = (hw + 2 * (k // 2) - k) // 2 + 1
        s = Shape(1, c, c, c, hw, hw, ho, ho, k, k, 2, 2, 1, 1, k // 2, k // 2, 2)
        assert depthwise.estimate(s, simd)[0] < estimate(s, simd)[0]


@pytest.mark.parametrize("level", LEVELS, ids=str)
def test_phase_plan_fits_registers_and_stack(level):
    """Accumulators + one vector of taps per column + a weight fit the level's registers; the
    ring holds a power of two of rows, at least the padded rows one block reads, within
    SCRATCH_MAX at any plane height (geometry gives the buffer): 8 rows of 3x3/2 blocks of
    3 rows on a 320x320 plane instead of its 321 padded rows."""
    simd = Simd(level.lanes, 32 if level.lanes == 16 else 16, level.lanes == 16, True)
    for c, hw, k, st in ((96, 112, 3, 2), (144, 56, 5, 2), (672, 14, 5, 2), (8, 9, 7, 3),
                         (48, 160, 3, 2), (32, 320, 3, 2), (144, 80, 5, 2)):
        ho = (hw + 2 * (k // 2) - k) // st + 1
        s = Shape(1, c, c, c, hw, hw, ho, ho, k, k, st, st, 1, 1, k // 2, k // 2, 2)
        _, r, nv = plan(s, simd)
        assert r * nv + nv + 1 <= simd.registers
        rows, length, _ = geometry(s, simd.width, r)
        assert rows & (rows - 1) == 0 and rows >= (r - 1) * st + k
        assert rows * st * length * 4 <= SCRATCH_MAX and length >= ho
    assert geometry(Shape(1, 1, 1, 1, 8, 9000, 4, 4500, 3, 3, 2, 2, 1, 1, 1, 1, 2), 8, 2)[0] is None


@pytest.mark.parametrize("level", params())
def test_large_plane_rings_match_onnxruntime(level, tmp_path):
    """Planes whose whole phase copy passes SCRATCH_MAX (3x3/2 on 160x160, 5x5/2 on 80x96),
    forced through the registry at the tilings the plan gives them, under guard pages: every
    row of the ring is rewritten many times, its padding rows too."""
    g = GraphBuilder(x=f32(1, 3, 160, 160), z=f32(1, 2, 80, 96))
    g.node("Conv", ["x", f32(3, 1, 3, 3, scale=0.3), f32(3)], group=3, pads=[1, 1, 1, 1],
           strides=[2, 2])
    g.node("Conv", ["z", f32(2, 1, 5, 5, scale=0.3)], group=2, pads=[2, 2, 2, 2], strides=[2, 2])
    report = tmp_path / "m.json"
    check_guarded(g.model(opset=13), g.feeds, tmp_path, level, dump_memory_report=str(report),
                  kernel_variants={"Conv": "depthwise_phase"})
    got = [i["variant"]["name"] for i in json.loads(report.read_text())["instructions"]
           if i["kernel"] == "Conv"]
    assert got == ["depthwise_phase"] * 2
