"""Depthwise row tiles whose taps run as loops (conv/depthwise.py, DepthwiseEmitter.looped_rows):
kernels of 7x7 and larger, the input rows that feed every output row of a block in a loop and,
from 13 columns, runs of kernel columns with the same lane masks in a loop. At each x86 vector
level the host runs, against onnxruntime under guard pages (a tap that strays out of its plane
or a store past the output faults), and the code of a 31x31 layer bounded."""
import glob
import os

import pytest

from glowpy.codegen.kernels.conv import depthwise, depthwise_loops
from glowpy.codegen.kernels.tiles import Shape
from glowpy.codegen.target import resolve_target
from glowpy.codegen.kernels.vectors import Simd
from test_kernels_fast import check_guarded, f32
from test_depthwise_phase import check_forced_depthwise
from util import GraphBuilder
from vector_levels import LEVELS, params


def shape(hw, k, pads, strides=(1, 1), dil=(1, 1)):
    """The Shape of a depthwise Conv on one (h, w) plane."""
    h, w = hw
    ho = (h + pads[0] + pads[2] - dil[0] * (k - 1) - 1) // strides[0] + 1
    wo = (w + pads[1] + pads[3] - dil[1] * (k - 1) - 1) // strides[1] + 1
    return Shape(1, 1, 1, 1, h, w, ho, wo, k, k, strides[0], strides[1], dil[0], dil[1],
                 pads[0], pads[1], 2)


CASES = [  # (input shape, k, attributes, forced row tiling)
    ((1, 5, 26, 24), 13, dict(pads=[6, 6, 6, 6]), ("rows", 4, 1)),
    ((1, 3, 40, 37), 31, dict(pads=[15, 15, 15, 15]), ("rows", 3, 2)),   # row and column tails
    ((1, 4, 14, 14), 27, dict(pads=[13, 13, 13, 13]), ("rows", 2, 2)),   # kernel past the plane
    ((2, 3, 30, 21), 9, dict(pads=[3, 5, 4, 2], strides=[2, 1]), ("rows", 2, 1)),  # asymmetric
    ((1, 6, 19, 23), 7, dict(pads=[3, 6, 3, 6], dilations=[1, 2]), ("rows", 4, 2)),
    ((1, 2, 17, 16), 15, dict(), ("rows", 1, 2)),                         # no padding
]


@pytest.mark.parametrize("level", params())
@pytest.mark.parametrize("xshape, k, attrs, choice", CASES)
def test_looped_tiles(xshape, k, attrs, choice, level, tmp_path):
    """Each tiling, forced through the kernel registry, with and without bias; every case runs
    its taps in loops (looped_plan), so a wrong kernel row or column in a loop, or a loop
    that runs one row too many, changes the numbers or faults."""
    s = shape(xshape[2:], k, attrs.get("pads", [0] * 4), attrs.get("strides", (1, 1)),
              attrs.get("dilations", (1, 1)))
    assert depthwise_loops.looped_plan(s, choice)
    check_forced_depthwise(xshape, k, attrs, "depthwise", choice, level, tmp_path, 0.1)


def test_small_kernels_stay_unrolled():
    """3x3 and 5x5 kernels, and 7x7 ones whose blocks leave fewer than LOOP_MIN input rows
    that feed every output row, keep their unrolled tiles (on 56x56, 96 channels, the 7x7
    row loop measured 565 against 537 us: Zen 3, AVX2 code); strided columns too."""
    assert not depthwise_loops.looped_plan(shape((56, 56), 3, [1] * 4), ("rows", 1, 2))
    assert not depthwise_loops.looped_plan(shape((56, 56), 5, [2] * 4), ("rows", 1, 2))
    assert not depthwise_loops.looped_plan(shape((56, 56), 7, [3] * 4), ("rows", 6, 1))
    assert not depthwise_loops.looped_plan(shape((56, 56), 9, [4] * 4, (2, 2)), ("rows", 2, 1))
    assert depthwise_loops.looped_plan(shape((56, 56), 7, [3] * 4), ("rows", 5, 1))


@pytest.mark.parametrize("level", params())
def test_large_kernel_code_is_bounded(level, tmp_path):
    """A 31x31 depthwise layer on 56x56 planes (RepLKNet's first stage) as the registry plans
    it: its object file stays under 512 KB (with the loops 164 / 112 / 254 KB at SSE2 / AVX2
    / AVX-512; unrolled, its 45 edge and interior tiles of 34 x 31 taps each took 2.7 MB of
    AVX2 code and 20 s to emit), and the numbers agree."""
    g = GraphBuilder(x=f32(1, 2, 56, 56))
    g.node("Conv", ["x", f32(2, 1, 31, 31, scale=0.05), f32(2)], group=2, pads=[15] * 4)
    check_guarded(g.model(opset=13), g.feeds, tmp_path, level)
    objs = glob.glob(os.path.join(str(tmp_path), "bundle", "*.o"))
    assert len(objs) == 1 and os.path.getsize(objs[0]) < 512 * 1024, \
        [(o, os.path.getsize(o)) for o in objs]


def test_large_kernel_plan_loops_on_every_level():
    """The registry's plan for that layer loops at every vector width (the plans of SSE2,
    AVX2 and AVX-512 differ in R and NV, not in the loops)."""
    s = shape((56, 56), 31, [15] * 4)
    for level in LEVELS:
        simd = Simd.of(resolve_target(**level.options).caps)
        assert depthwise_loops.looped_plan(s, depthwise.plan(s, simd)), level
