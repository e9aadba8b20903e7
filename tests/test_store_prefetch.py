"""Prefetches the float convolutions issue ahead of memory they will wait on, and the register
tile cap of tiles.choose_tile.

- pixel.py's flat tiles with tiles outermost and PointwiseTiles (pointwise_packed, _strided,
  im2col) prefetch each accumulator vector's output (for writing) and its residual operand
  before the tile's reduction: one write and one read prefetch per accumulator vector;
- channel.py's row tiles prefetch each output channel's run (and residual) the same way, and
  with the channel blocks outermost every reduction step also prefetches the next block's
  weights into L2 (locality 2);
- channel.py's row tiles over a few input channels (a first layer) also prefetch the input
  lines the next output row adds;
- gemm/vector.py's tiles over a packed B with more than one row block prefetch each step's
  row of the next column panel into L2, a line per 16 columns (none with one row block).

Each case is compiled for each x86 vector level the host runs, checked against onnxruntime
under guard pages (a prefetch never faults, but the code around it must stay right), and its
LLVM IR (-dump-llvm-ir) is counted: `llvm.prefetch(ptr, rw, locality, 1)`."""
import json
import re

import pytest

from glowpy.codegen.kernels.tiles import MAX_ACC, choose_tile, prefetch_ahead
from glowpy.codegen.kernels.tiles import PREFETCH as AHEAD
from glowpy.codegen.kernels.vectors import Simd
from test_kernels_fast import check_guarded, f32
from util import GraphBuilder
from vector_levels import params

PREFETCH = re.compile(r"call void @\"?llvm\.prefetch\.p0\"?\(ptr [^,]+, i32 (\d), i32 (\d), i32 1\)")


def _compile(tmp_path, level, nodes, x, extra, variant=None):
    g = GraphBuilder(x=x, r=extra)
    y = g.node("Conv", nodes[0], output=False, **nodes[1])
    s = g.node("Add", [y, "r"], output=False)
    g.node("Relu", [s])
    ir_path, report = tmp_path / "m.ll", tmp_path / "m.json"
    check_guarded(g.model(opset=13), g.feeds, tmp_path, level, dump_llvm_ir=str(ir_path),
                  dump_memory_report=str(report),
                  **({"kernel_variants": {"Conv": variant}} if variant else {}))
    [v] = [i["variant"] for i in json.loads(report.read_text())["instructions"]
           if i["kernel"] == "Conv"]
    counts = {}
    for rw, loc in PREFETCH.findall(ir_path.read_text()):
        counts[(int(rw), int(loc))] = counts.get((int(rw), int(loc)), 0) + 1
    return v, counts


@pytest.mark.parametrize("level", params())
def test_pixel_flat_tiles_prefetch_their_stores(level, tmp_path):
    """A 1x1 + residual + Relu whose weights stay in L1 runs tiles outermost: per accumulator
    vector of every tile copy, one write prefetch (the output) and one read (the residual)."""
    w = f32(40, 16, 1, 1, scale=0.2)
    v, counts = _compile(tmp_path, level, (["x", w, f32(40)], {}), f32(1, 16, 20, 20),
                         f32(1, 40, 20, 20), ("pixel_vectorized", {"flat": True, "mr": 4,
                                                                   "nv": 1, "chunk": 0}))
    assert v["name"] == "pixel_vectorized"
    writes = counts.get((1, 3), 0)
    assert writes > 0 and writes % 4 == 0  # MR x NV per tile copy
    assert counts.get((0, 3), 0) == writes  # the residual, as many


@pytest.mark.parametrize("level", params())
def test_packed_tiles_prefetch_their_stores(level, tmp_path):
    """pointwise_packed on a 14x14 plane (784-byte planes: packing pays): a write and a
    residual read per accumulator vector; its weight stream keeps one read prefetch per step."""
    v, counts = _compile(tmp_path, level, (["x", f32(48, 64, 1, 1, scale=0.1), f32(48)], {}),
                         f32(1, 64, 14, 14), f32(1, 48, 14, 14), "pointwise_packed")
    assert v["name"] == "pointwise_packed"
    rows, nv = v["params"]["mr"], v["params"]["nv"]
    writes = counts.get((1, 3), 0)
    assert writes > 0 and writes % nv == 0
    assert counts.get((0, 3), 0) >= writes  # the residual's, and the weights'
    assert rows * nv <= MAX_ACC


@pytest.mark.parametrize("level", params())
def test_channel_tiles_prefetch_rows_and_next_block(level, tmp_path):
    """128 -> 128 3x3 on 14x14 + residual, channel-vectorized row tiles at every level: per
    tile copy a write and a residual read per output channel of its block; 590 KB of weights
    against a 100 KB input put the blocks outermost, and with two blocks or more each weight
    vector of a step is also prefetched one block ahead into L2."""
    v, counts = _compile(tmp_path, level, (["x", f32(128, 128, 3, 3, scale=0.05), f32(128)],
                                           dict(pads=[1, 1, 1, 1])),
                         f32(1, 128, 14, 14), f32(1, 128, 14, 14))
    assert v["name"] == "channel_vectorized" and not v["params"].get("flat")
    writes = counts.get((1, 3), 0)
    assert writes > 0 and counts.get((0, 3), 0) >= writes  # the residual's, the weights'
    assert counts.get((0, 2), 0) > 0


@pytest.mark.parametrize("level", params())
def test_channel_row_tiles_prefetch_the_next_rows_input(level, tmp_path, monkeypatch):
    """A 3 -> 32 7x7/2 stem on 40x40 + residual in channel-vectorized row tiles of 8 pixels:
    each tile copy prefetches, for the next output row, its two new kernel rows of each of
    the 3 input channels (16 strided columns: one line), so 6 more L1 read prefetches a copy
    than with channel.INPUT_PREFETCH at 0, including the last row's, past the plane (under
    guard pages); the outputs match onnxruntime either way."""
    from glowpy.codegen.kernels.conv import channel
    nodes = (["x", f32(32, 3, 7, 7, scale=0.1), f32(32)], dict(strides=[2, 2], pads=[3] * 4))
    variant = ("channel_vectorized", {"npx": 8, "nvo": 1})
    reads, on = {}, channel.INPUT_PREFETCH
    for limit in (on, 0):
        monkeypatch.setattr(channel, "INPUT_PREFETCH", limit)
        d = tmp_path / str(limit)
        d.mkdir()
        v, counts = _compile(d, level, nodes, f32(1, 3, 40, 40), f32(1, 32, 20, 20), variant)
        assert v["name"] == "channel_vectorized" and v["params"]["npx"] == 8
        reads[limit] = counts.get((0, 3), 0)
    extra = reads[on] - reads[0]
    assert extra > 0 and extra % 6 == 0, reads


@pytest.mark.parametrize("level", params())
def test_matmul_prefetches_the_next_panel(level, tmp_path):
    """MatMul by a constant 64 x 40 B: with 24 rows (more than any level's MR) every step
    prefetches a line of the next 16 columns' panel into L2, also past B's last panel (under
    guard pages: a prefetch never faults); with one row (a single row block) none."""
    counts = {}
    for m in (24, 1):
        g = GraphBuilder(x=f32(m, 64))
        g.node("MatMul", ["x", f32(64, 40, scale=0.1)])
        d = tmp_path / f"m{m}"
        d.mkdir()
        ir_path = d / "m.ll"
        check_guarded(g.model(opset=13), g.feeds, d, level, dump_llvm_ir=str(ir_path))
        counts[m] = sum(1 for rw, loc in PREFETCH.findall(ir_path.read_text())
                        if (rw, loc) == ("0", "2"))
    assert counts[24] > 0 and counts[1] == 0


def test_choose_tile_leaves_llvm_room():
    """At most MAX_ACC accumulators on a 32-register target: AVX-512's 14 x 2 spilled (1x1
    128 -> 512 on 28x28: 1310 us against 1013 for 8 x 3, Zen 4); 16 registers keep their
    own bound (acc + NV + 2 <= 16)."""
    avx512, avx2 = Simd(16, 32, True), Simd(8, 16, False)
    for mg in (16, 64, 128, 256, 512, 1000):
        for lanes in (49, 196, 784, 3136):
            mr, nv, _ = choose_tile(avx512, mg, lanes, 1)
            assert mr * nv <= MAX_ACC
            mr, nv, _ = choose_tile(avx2, mg, lanes, 1)
            assert mr * nv + nv + 2 <= 16
    assert choose_tile(avx512, 512, 784, 1)[:2] != (14, 2)


def test_weight_streams_share_the_prefetch_distance():
    """A loop reading k weight streams (flat channel tiles: a kernel row's kw taps) prefetches
    each PREFETCH / k floats ahead, whole 16-float lines, at least one line: 4 KiB in flight
    in all, as one stream has (3 streams x 4 KiB crowded the L1: ResNet-50's 512-channel 3x3
    layers on 7x7 ran 13-16% slower)."""
    assert AHEAD == 1024
    assert [prefetch_ahead(k) for k in (1, 2, 3, 5, 7, 64, 65, 1000)] == \
        [1024, 512, 336, 192, 144, 16, 16, 16]
