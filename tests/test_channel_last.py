"""conv/channel_last.py: channel-vectorized row tiles reading a channels-last copy of their
deep input (made in a gap of the activation region), against onnxruntime at each runnable
vector level under guard pages; and the pitches that keep a tile's columns and rows apart in
L1."""
import json

import numpy as np
import pytest

from glowpy.codegen.kernels.conv.channel_last import GROW_L2, pitches, scratch_bytes
from test_kernels_fast import check_guarded, f32
from util import GraphBuilder
from vector_levels import params


@pytest.mark.parametrize("level", params())
def test_channels_last_copy(level, tmp_path):
    """100 channels (a tail at every width), 23-wide rows (a column tail), a 3x3 stride-2
    window with pads, a 7x1 window with a residual add and Relu fused; the Concat before them
    leaves the gap the copies take. The report shows which layers read the copy."""
    g = GraphBuilder(x=f32(1, 40, 23, 23))
    big = g.node("Concat", ["x", "x", "x", "x"], output=False, axis=1)
    h = g.node("Conv", [big, f32(100, 160, 1, 1, scale=0.1)], output=False)
    g.node("Conv", [h, f32(48, 100, 3, 3, scale=0.05), f32(48)], strides=[2, 2], pads=[1, 1, 1, 1])
    y = g.node("Conv", [h, f32(40, 100, 7, 1, scale=0.05), f32(40)], output=False, pads=[3, 0, 3, 0])
    r = g.node("Conv", [h, f32(40, 100, 1, 1, scale=0.1)], output=False)
    g.node("Relu", [g.node("Add", [y, r], output=False)])
    report = tmp_path / "m.json"
    check_guarded(g.model(opset=13), g.feeds, tmp_path, level, dump_memory_report=str(report))
    _, nhwc = _copies(report)
    assert len(nhwc) == 2, nhwc


# flat tiles (across row ends) per x86 lane count in test_flat_tiles_read_the_copy: AVX-512's
# 7-pixel row tiles already fill its registers (test_channel_flat gives the plans); an Arm
# host's own level (lanes 0) is checked for the copy and the numbers only
FLAT_LAYERS = {4: 3, 8: 2, 16: 0}


@pytest.mark.parametrize("level", params())
def test_flat_tiles_read_the_copy(level, tmp_path):
    """Flat channel-vectorized tiles on small deep planes read the copy too: a 3x3/2 on 14x14
    (its first output row's kernel row in the padding), a 3x3 on 7x7 with a residual add and
    Relu, and a 3x3 on 7x7 with 100 input channels (a channel tail at 8 and 16 lanes) into 72
    outputs (a partial last block); the offsets of a flat tile run across row ends, where a
    row of the copy is not a whole number of columns (pitches). The Concat leaves the gaps."""
    g = GraphBuilder(x=f32(1, 48, 14, 14))
    big = g.node("Concat", ["x", "x", "x", "x"], output=False, axis=1)
    h = g.node("Conv", [big, f32(128, 192, 1, 1, scale=0.1)], output=False)
    t = g.node("Conv", [h, f32(128, 128, 3, 3, scale=0.03), f32(128)], output=False,
               strides=[2, 2], pads=[1, 1, 1, 1])
    y = g.node("Conv", [t, f32(64, 128, 3, 3, scale=0.03), f32(64)], output=False,
               pads=[1, 1, 1, 1])
    r = g.node("Conv", [t, f32(64, 128, 1, 1, scale=0.1)], output=False)
    g.node("Relu", [g.node("Add", [y, r], output=False)])
    u = g.node("Conv", [t, f32(100, 128, 1, 1, scale=0.1)], output=False)
    g.node("Conv", [u, f32(72, 100, 3, 3, scale=0.03), f32(72)], pads=[1, 1, 1, 1])
    report = tmp_path / "m.json"
    check_guarded(g.model(opset=13), g.feeds, tmp_path, level, dump_memory_report=str(report))
    rows = json.loads(report.read_text())["instructions"]
    flat = [i for i in rows if i["variant"]["name"] == "channel_vectorized"
            and i["variant"]["params"].get("flat")]
    assert len(flat) == FLAT_LAYERS.get(level.lanes, len(flat)), [i["variant"] for i in rows]
    assert all(i["variant"]["params"].get("nhwc") for i in flat), [i["variant"] for i in flat]


def _copies(report):
    """(activation region bytes, the instructions reading a channels-last copy) of a report."""
    rows = json.loads(report.read_text())
    return rows["regions"]["activation"], [i["name"] for i in rows["instructions"]
                                           if (i["variant"]["params"] or {}).get("nhwc")]


@pytest.mark.parametrize("level", params())
@pytest.mark.parametrize("cout,frames", [(40, 2101), (520, 3301)])
def test_1d_copy_grows_the_region_where_time_comes_first(level, cout, frames, tmp_path):
    """A Conv1d k3/2 over 264 channels (a tail at every width): its input (2.2 or 3.5 MB) is
    past GROW_L2 times a named CPU's L2 (the family's 512 KiB) and no gap of the region can
    hold a copy (the input is the graph's), so where time comes first the region grows by the
    copy and the tiles read it; with -activation-memory=min it does not grow and the tiles read
    the planes. With 520 outputs the weights (1.6 MB) are past the L2 and the copy over twice
    them: its tiles run outermost (ChanEmitter.copy_outweighs). Against onnxruntime under
    guard pages."""
    g = GraphBuilder(x=f32(1, 264, frames))
    g.node("Relu", [g.node("Conv", ["x", f32(cout, 264, 3, scale=0.05), f32(cout)], output=False,
                           strides=[2], pads=[1, 1])])
    assert 264 * frames * 4 > GROW_L2 * (512 << 10)
    fast, small = tmp_path / "fast", tmp_path / "small"
    fast.mkdir()
    small.mkdir()
    check_guarded(g.model(opset=13), g.feeds, fast, level, dump_memory_report=str(fast / "m.json"))
    region, nhwc = _copies(fast / "m.json")
    assert len(nhwc) == 1 and region >= scratch_bytes(264, 1, frames), (region, nhwc)
    check_guarded(g.model(opset=13), g.feeds, small, level, activation_memory="min",
                  dump_memory_report=str(small / "m.json"))
    region, nhwc = _copies(small / "m.json")
    assert nhwc == [] and region < scratch_bytes(264, 1, frames), (region, nhwc)


@pytest.mark.parametrize("level", params())
def test_short_rows_copy_grows_the_region_where_time_comes_first(level, tmp_path):
    """Two chained 3x3s over 100 channels of 14x14 (a tail of channels at 8 and 16 lanes): each
    row of a plane fits a cache line, no gap is free (the first reads the graph's input, the
    second the only activation), so where time comes first the region grows by one copy,
    which both read in turn; with -activation-memory=min neither does. Winograd is off (its
    scratch would take the room the test is about). Against onnxruntime under guard pages."""
    g = GraphBuilder(x=f32(1, 100, 14, 14))
    h = g.node("Relu", [g.node("Conv", ["x", f32(100, 100, 3, 3, scale=0.03), f32(100)],
                               output=False, pads=[1, 1, 1, 1])], output=False)
    g.node("Conv", [h, f32(100, 100, 3, 3, scale=0.03)], pads=[1, 1, 1, 1])
    fast, small = tmp_path / "fast", tmp_path / "small"
    fast.mkdir()
    small.mkdir()
    act = 100 * 14 * 14 * 4
    check_guarded(g.model(opset=13), g.feeds, fast, level, winograd=False,
                  dump_memory_report=str(fast / "m.json"))
    region, nhwc = _copies(fast / "m.json")
    assert len(nhwc) == 2 and region >= act + scratch_bytes(100, 14, 14), (region, nhwc)
    check_guarded(g.model(opset=13), g.feeds, small, level, winograd=False,
                  activation_memory="min", dump_memory_report=str(small / "m.json"))
    region, nhwc = _copies(small / "m.json")
    assert nhwc == [] and region < act + scratch_bytes(100, 14, 14), (region, nhwc)


@pytest.mark.parametrize("level", params())
def test_tall_window_on_short_rows_grows_the_region(level, tmp_path):
    """Inception-v3's 7x1 on 17x17 (rows of 68 bytes, two lines) over 120 channels (a tail at
    every width): the input is the graph's, no gap is free, and a window of 7 input rows
    sweeps past L1 on the planes, so where time comes first the region grows by the copy and
    the tiles read it (channel_last.TALL_ROWS); a 3x3/2 over the same input (3 rows, strided)
    keeps the planes. Against onnxruntime under guard pages."""
    g = GraphBuilder(x=f32(1, 120, 17, 17))
    g.node("Relu", [g.node("Conv", ["x", f32(40, 120, 7, 1, scale=0.04), f32(40)],
                           output=False, pads=[3, 0, 3, 0])])
    check_guarded(g.model(opset=13), g.feeds, tmp_path, level,
                  dump_memory_report=str(tmp_path / "m.json"))
    region, nhwc = _copies(tmp_path / "m.json")
    assert len(nhwc) == 1 and region >= scratch_bytes(120, 17, 17), (region, nhwc)
    g = GraphBuilder(x=f32(1, 120, 17, 17))
    g.node("Conv", ["x", f32(40, 120, 3, 3, scale=0.05), f32(40)], strides=[2, 2])
    strided = tmp_path / "strided"
    strided.mkdir()
    check_guarded(g.model(opset=13), g.feeds, strided, level,
                  dump_memory_report=str(strided / "m.json"))
    assert _copies(strided / "m.json")[1] == []


def test_pitches_are_odd_lines():
    """Column and row pitches are whole 64-byte lines, an odd number of them, never below the
    channels or the row."""
    for c, win in ((128, 56), (256, 28), (288, 37), (100, 23), (16, 64), (3, 1)):
        cp, rp = pitches(c, win)
        assert cp >= c and rp >= win * cp
        assert cp % 16 == 0 and (cp // 16) % 2 == 1
        assert rp % 16 == 0 and (rp // 16) % 2 == 1
    assert pitches(128, 56) == (144, 56 * 144 + 16)


def test_forced_copy_without_a_gap_is_refused(tmp_path):
    """Params forced through the Python API that ask for the copy where no scratch was placed
    (one layer: its input is the graph's, the activation region empty, and with
    -activation-memory=min it may not grow) end in one clear usage error naming the
    instruction, and leave no bundle behind."""
    import onnx

    import glowpy
    from glowpy.errors import UsageError
    g = GraphBuilder(x=f32(1, 128, 7, 7))
    g.node("Conv", ["x", f32(64, 128, 3, 3, scale=0.03)], pads=[1, 1, 1, 1])
    path = str(tmp_path / "m.onnx")
    onnx.save(g.model(opset=13), path)
    forced = {"Conv": ("channel_vectorized", {"npx": 5, "nvo": 2, "flat": True, "nhwc": True})}
    with pytest.raises(UsageError, match=r"instruction '.*' \(Conv\): the forced params ask for "
                                         r"a channels-last copy \('nhwc'\)"):
        glowpy.compile(path, str(tmp_path / "b"), mcpu="x86-64-v3", kernel_variants=forced,
                       activation_memory="min")
    assert not (tmp_path / "b").exists()
    forced["Conv"][1].pop("nhwc")
    glowpy.compile(path, str(tmp_path / "b"), mcpu="x86-64-v3", kernel_variants=forced)
    assert (tmp_path / "b").is_dir()
