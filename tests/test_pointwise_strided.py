"""Conv variant pointwise_strided (glowpy/codegen/kernels/conv/pointwise_strided.py): strided
1x1 layers gathered into a stack buffer and multiplied from it, at each x86 vector level the
host runs, against onnxruntime under guard pages (a gather or store that strays out of its
tensor faults), with the fused epilogues (residual add, per-channel Mul, Clip) it must honour."""
import json

import pytest

from glowpy.codegen.kernels.conv.pointwise_strided import plan_tiles
from glowpy.codegen.kernels.vectors import Simd
from test_kernels_fast import check_guarded, check_pointwise_pair, f32
from util import GraphBuilder
from vector_levels import LEVELS, params

SHAPES = [  # (input, output channels, strides, chunk choice forced or None)
    ((1, 24, 20, 20), 40, [2, 2], None),  # chunks of whole rows, partial last tile
    ((2, 13, 17, 33), 11, [2, 3], None),  # odd sizes, partial channel block, batch 2
    ((1, 16, 18, 18), 8, [3, 3], {"rows": 2, "mr": 3, "nv": 1}),  # a last chunk of one row
    ((1, 8, 16, 20), 21, [1, 2], {"rows": 5, "mr": 4, "nv": 2}),  # rows not subsampled
]


@pytest.mark.parametrize("level", params())
@pytest.mark.parametrize("xs, m, strides, forced", SHAPES)
def test_strided_pointwise(xs, m, strides, forced, level, tmp_path):
    check_pointwise_pair("pointwise_strided", xs, m, forced, level, tmp_path, strides=strides)


@pytest.mark.parametrize("level", params())
def test_chosen_only_where_rows_fill_a_vector(level, tmp_path):
    """Unforced: a ResNet downsampling shortcut (at an eighth of its size) takes it at every
    level; a plane narrower than a vector and a padded 1x1 do not."""
    g = GraphBuilder(x=f32(1, 32, 32, 32), y=f32(1, 32, 6, 6))
    g.node("Conv", ["x", f32(64, 32, 1, 1, scale=0.2)], strides=[2, 2])
    g.node("Conv", ["y", f32(64, 32, 1, 1, scale=0.2)], strides=[2, 2])
    g.node("Conv", ["x", f32(64, 32, 1, 1, scale=0.2)], strides=[2, 2], pads=[1, 1, 1, 1])
    report = tmp_path / "m.json"
    check_guarded(g.model(opset=13), g.feeds, tmp_path, level, dump_memory_report=str(report))
    got = [i["variant"]["name"] for i in json.loads(report.read_text())["instructions"]
           if i["kernel"] == "Conv"]
    assert got[0] == "pointwise_strided" and got[1:].count("pointwise_strided") == 0


@pytest.mark.parametrize("level", LEVELS, ids=str)
def test_tiles_leave_a_register(level):
    """The register tile plus a row of inputs and a weight stays under the level's registers,
    with at least 8 accumulators (the FMA latency) where the positions allow."""
    regs = 32 if level.lanes == 16 else 16
    simd = Simd(level.lanes, regs, level.lanes == 16, True)
    for m, c, npos in ((512, 256, 56), (1024, 512, 28), (64, 32, 64), (40, 24, 300)):
        mr, nv = plan_tiles(m, c, npos, simd)
        assert mr * nv + nv + 1 < regs and mr * nv >= 8
    # more than the 8 accumulators the latency asks for where the channels allow it: 4 x 2 ran
    # at 72% of the peak where 6 x 2 ran at 87% (AVX2 code, 128 -> 128 on 16x16, packed)
    for m, c, npos in ((128, 128, 256), (1024, 128, 2048), (64, 256, 3136)):
        mr, nv = plan_tiles(m, c, npos, simd)
        assert mr * nv >= (12 if regs == 16 else 16), (m, c, npos, mr, nv)


@pytest.mark.parametrize("level", params())
def test_weights_packed_in_their_own_bytes(level, tmp_path):
    """37 output channels are not a multiple of the tile's rows on any level: the last block
    is packed narrower, so the constant region is the weights and the bias, nothing appended."""
    import os

    from util import check_against_onnxruntime, make_model
    x, w, b = f32(1, 24, 20, 20), f32(37, 24, 1, 1), f32(37)
    m = make_model("Conv", {"x": x}, 1, dict(strides=[2, 2]), {"w": w, "b": b})
    report = tmp_path / "m.json"
    check_against_onnxruntime(m, {"x": x}, tmp_path, rtol=1e-4, atol=1e-4,
                              dump_memory_report=str(report), **level.options)
    [v] = [i["variant"] for i in json.loads(report.read_text())["instructions"] if i["kernel"] == "Conv"]
    assert v["name"] == "pointwise_strided" and 37 % v["params"]["mr"] != 0
    man = json.load(open(os.path.join(str(tmp_path), "bundle", "model.json")))
    align = lambda n: (n + 63) // 64 * 64  # noqa: E731
    assert man["memory"]["constant"] == align(w.nbytes) + align(b.nbytes)


def _gap_model():
    # 36x36 -> 18-wide output rows: wider than a vector at every level (14-wide rows are
    # narrower than AVX-512's 16 lanes, and such a plane is only taken whole: chunk_rows)
    g = GraphBuilder(x=f32(1, 32, 36, 36))
    t = g.node("Conv", ["x", f32(640, 32, 1, 1, scale=0.2)], output=False)
    u = g.node("Conv", [t, f32(512, 640, 1, 1, scale=0.05)], output=False)
    g.node("Relu", [g.node("Conv", [u, f32(24, 512, 1, 1, scale=0.05), f32(24)], output=False,
                           strides=[2, 2])])
    return g


@pytest.mark.parametrize("level", params())
def test_other_variants_pass_over_the_scratch(level, tmp_path):
    """The scratch output is placed before the variant is chosen: a Conv forced to another
    variant leaves it alone (exact under guard pages)."""
    g = _gap_model()
    check_guarded(g.model(opset=13), g.feeds, tmp_path, level, kernel_variants={"Conv": "direct"})


@pytest.mark.parametrize("level", params())
def test_gathered_in_an_activation_gap(level, tmp_path):
    """Past the stack budget (512 channels of 18-wide rows: one row per 64 KiB chunk at 4 and 8
    lanes, none at 16), the gathered buffer sized by the cache (the named levels' 512 KiB L2:
    128 KiB, 2 or 3 rows) takes a gap of the activation region that a wider layer left: a
    scratch output, the result the same under guard pages."""
    g = _gap_model()
    report = tmp_path / "m.json"
    check_guarded(g.model(opset=13), g.feeds, tmp_path, level, dump_memory_report=str(report))
    rep = json.loads(report.read_text())
    convs = [i for i in rep["instructions"] if i["kernel"] == "Conv"]
    v = convs[-1]["variant"]
    assert v["name"] == "pointwise_strided" and v["params"]["scratch"] is True
    assert v["params"]["rows"] == {4: 2, 8: 3, 16: 2}[level.lanes]  # the stack's: 1, 1, 0


def test_chunks_end_on_whole_vectors():
    """Chunk rows fit the budget (pitch included) and, where some do, fill whole vectors."""
    from glowpy.codegen.kernels.conv.pointwise_strided import chunk_rows, pitch
    from glowpy.codegen.kernels.tiles import Shape
    for c, hw, w, budget, want in ((512, 28, 8, 1 << 17, 4), (512, 28, 8, 1 << 16, 1),
                                   (256, 56, 8, 1 << 16, 2), (512, 20, 8, 1 << 17, 4),
                                   (512, 28, 16, 1 << 17, 0)):
        ho = hw // 2
        s = Shape(1, c, 2 * c, 1, hw, hw, ho, ho, 1, 1, 2, 2, 1, 1, 0, 0, 2)
        rows = chunk_rows(s, w, budget)
        assert rows == want and 4 * c * pitch(s, w, rows) <= budget, (c, hw, w, rows)
    # (the last: 14-wide rows are narrower than 16 lanes, and the whole plane does not fit)


@pytest.mark.parametrize("level", params())
def test_narrow_plane_in_one_chunk(level, tmp_path):
    """Output rows narrower than a vector (ResNet-50's last shortcut, 14x14 -> 7x7, at an
    eighth of its channels): the whole plane flattened into one chunk where its 49 positions
    fill NARROW_FILL of their vectors (49 of 56 AVX2 lanes), not on AVX-512 (49 of 64) nor for
    a 5x5 plane (25 of 32 lanes); SSE's 4 lanes take both planes by rows; exact under guard
    pages with a residual epilogue."""
    from glowpy.codegen.kernels.conv.pointwise_strided import NARROW_FILL
    g = GraphBuilder(x=f32(1, 128, 14, 14), y=f32(1, 128, 10, 10), r=f32(1, 96, 7, 7))
    a = g.node("Conv", ["x", f32(96, 128, 1, 1, scale=0.1), f32(96)], output=False, strides=[2, 2])
    g.node("Relu", [g.node("Add", [a, "r"], output=False)])
    g.node("Conv", ["y", f32(96, 128, 1, 1, scale=0.1)], strides=[2, 2])
    report = tmp_path / "m.json"
    check_guarded(g.model(opset=13), g.feeds, tmp_path, level, dump_memory_report=str(report))
    got = [i["variant"] for i in json.loads(report.read_text())["instructions"]
           if i["kernel"] == "Conv"]
    for v, wo in zip(got, (7, 5)):
        fill = wo * wo / (-(-wo * wo // level.lanes) * level.lanes)
        narrow = wo < level.lanes
        assert (v["name"] == "pointwise_strided") == (not narrow or fill >= NARROW_FILL), v
        if narrow and v["name"] == "pointwise_strided":
            assert v["params"]["rows"] == wo
