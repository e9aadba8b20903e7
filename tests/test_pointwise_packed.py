"""Conv variant pointwise_packed (glowpy/codegen/kernels/conv/pointwise_packed.py): stride-1
1x1 layers whose positions are packed panel by panel into a stack buffer, at each x86 vector
level the host runs, against onnxruntime under guard pages (a copy or store that strays out of
its tensor faults), with the fused epilogues (residual add, per-channel Mul, Clip) it honours."""
import json
from types import SimpleNamespace

import pytest

from glowpy.codegen.kernels.conv.pointwise_packed import panel_tiles, pays
from glowpy.codegen.kernels.conv.pointwise_strided import tail_group
from test_kernels_fast import check_guarded, check_pointwise_pair, f32
from util import GraphBuilder
from vector_levels import params

SHAPES = [  # (input, output channels, forced params or None: the plan's)
    ((1, 96, 14, 14), 40, None),  # 196 positions: panels, a partial last tile
    ((1, 24, 19, 21), 37, None),  # partial channel block, odd plane
    ((2, 19, 7, 9), 11, {"mr": 5, "nv": 2, "tiles": 2}),  # batch 2, leftover tiles, a tail
    ((1, 16, 18, 18), 8, {"mr": 3, "nv": 1, "tiles": 5}),  # panels, leftover tiles, a tail
    ((1, 32, 6, 6), 21, {"mr": 4, "nv": 2, "tiles": 1}),  # a plane narrower than one tile
    ((1, 20, 50), 13, {"mr": 6, "nv": 1, "tiles": 3}),  # a 1-D convolution
    # the last positions fewer than a vector (7x7: 49 = 3 x 16 + 1 on AVX2, 6 x 8 + 1 on SSE):
    # lanes over output channels, 7 blocks of 6 and one of 2 in one group
    ((1, 40, 7, 7), 44, {"mr": 6, "nv": 2, "tiles": 3}),
    ((2, 24, 5, 7), 100, {"mr": 6, "nv": 2, "tiles": 2}),  # 35 = 2 x 16 + 3: groups in a loop
]


@pytest.mark.parametrize("level", params())
@pytest.mark.parametrize("xs, m, forced", SHAPES)
def test_packed_pointwise(xs, m, forced, level, tmp_path):
    check_pointwise_pair("pointwise_packed", xs, m, forced, level, tmp_path)


@pytest.mark.parametrize("level", params())
def test_chosen_where_vectors_straddle_lines(level, tmp_path):
    """Unforced: a 14x14 layer past L1 is packed at every level; a plane of whole cache lines
    (16x16), an input inside L1 and a padded 1x1 are not. (The input in L1 is 12x5: a 14x14
    plane ends in a short tail at 16 lanes, 196 = 3 x 64 + 4, which short_tail packs.)"""
    g = GraphBuilder(x=f32(1, 96, 14, 14), y=f32(1, 96, 16, 16), z=f32(1, 16, 12, 5))
    for x in ("x", "y", "z"):
        g.node("Conv", [x, f32(64, 96 if x != "z" else 16, 1, 1, scale=0.1)])
    g.node("Conv", ["x", f32(64, 96, 1, 1, scale=0.1)], pads=[1, 1, 1, 1])
    report = tmp_path / "m.json"
    check_guarded(g.model(opset=13), g.feeds, tmp_path, level, dump_memory_report=str(report))
    got = [i["variant"]["name"] for i in json.loads(report.read_text())["instructions"]
           if i["kernel"] == "Conv"]
    assert got[0] == "pointwise_packed" and "pointwise_packed" not in got[1:]


def test_pays_and_panels():
    zen3 = SimpleNamespace(l1d_bytes=32 << 10)  # (all pays() reads of TargetCaps)
    assert pays(zen3, 512, 196) and pays(zen3, 1024, 49)
    assert not pays(zen3, 128, 3136)  # 56x56: whole lines
    assert not pays(zen3, 64, 125)  # 32,000 bytes: in L1
    assert pays(SimpleNamespace(l1d_bytes=0), 64, 125)  # no cache figures: the lines alone decide
    # planes a multiple of 2 KiB apart: the K rows in one or two of the L1's sets
    assert pays(zen3, 64, 32 * 32) and pays(zen3, 128, 2048) and pays(zen3, 32, 128 * 128)
    assert pays(zen3, 64, 512)  # 2 KiB planes: two sets, 16 ways for 64 rows
    assert not pays(zen3, 128, 16 * 16)  # 1 KiB planes: four sets
    assert panel_tiles(512, 16, 13, 65536) == 2 and panel_tiles(1024, 16, 4, 65536) == 1
    assert panel_tiles(32, 16, 784, 65536) == 32  # 25 panels of equal size


def test_tail_group():
    """Blocks per tail tile: enough chains to cover the FMA latency, registers permitting; none
    when a vector or more of positions is left or no tail at all."""
    avx2, avx512 = (SimpleNamespace(width=w, registers=r) for w, r in ((8, 16), (16, 32)))
    assert tail_group(6, 1024, 1, avx2) == 8  # 7x7 on AVX2: 8 accumulators of one position
    assert tail_group(6, 1024, 3, avx2) == 3  # 3 positions x 3 blocks
    assert tail_group(6, 1024, 0, avx2) == 0 and tail_group(6, 1024, 8, avx2) == 0
    assert tail_group(6, 1024, 17, avx512) == 0  # 49 = 32 + 17: a full vector is left
    assert tail_group(12, 512, 1, avx512) == 8
