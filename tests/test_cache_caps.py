"""The data-cache sizes of TargetCaps (caps.py) and the loop order the register-tiled
convolutions take from them (tiles.tiles_outermost)."""
from __future__ import annotations

import glob
import json
import os
import platform

import numpy as np
import pytest
from dataclasses import replace

from glowpy.codegen.kernels.tiles import tiles_outermost
from glowpy.codegen.target import resolve_target
from glowpy.codegen.target.caps import FAMILY_CACHES
from util import GraphBuilder, check_against_onnxruntime
from vector_levels import RUNNABLE


def _sysfs_caches():
    sizes = {}
    for d in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        with open(os.path.join(d, "type")) as f:
            if f.read().strip() == "Instruction":
                continue
        with open(os.path.join(d, "level")) as f:
            level = int(f.read())
        with open(os.path.join(d, "size")) as f:
            text = f.read().strip().upper()
        sizes[level] = int(text.rstrip("KMB")) * {"K": 1024, "M": 1 << 20}.get(text[-1], 1)
    return sizes


def test_host_caches_are_the_machines_own():
    """The host target reads its caches from sysfs (where Linux has them), and an explicit CPU
    on the host's triple gets its family's figures: a test compiling for x86-64-v3 plans the
    same loops on every machine."""
    caps = resolve_target().caps
    sizes = _sysfs_caches()
    if platform.system() == "Linux" and 1 in sizes and 2 in sizes:
        assert (caps.l1d_bytes, caps.l2_bytes) == (sizes[1], sizes[2])
    else:
        assert caps.l1d_bytes > 0 and caps.l2_bytes > caps.l1d_bytes
    if platform.machine() in ("x86_64", "AMD64"):
        level = resolve_target(mcpu="x86-64-v3").caps
        assert (level.l1d_bytes, level.l2_bytes) == FAMILY_CACHES["x86_64"]


# ResNet-50, 1x1 256 -> 1024 on 14x14 (1 MiB of weights, 196 KiB of input) in 6-channel
# blocks and 16-pixel tiles; a 1x1 64 -> 256 on 56x56 (64 KiB of weights, 784 KiB of input)
R50_14 = dict(w_bytes=1 << 20, x_bytes=256 * 196 * 4, ntile=13, nblk=171)
R50_56 = dict(w_bytes=64 * 256 * 4, x_bytes=64 * 3136 * 4, ntile=196, nblk=43)


@pytest.mark.parametrize("l2, expected", [(0, True), (512 << 10, False), (4 << 20, True)])
def test_loop_order_follows_the_caches(l2, expected):
    """Weights past L2 re-read per tile cost more than an input in L2 re-read per block;
    with weights that fit L2 (or no cache figures: the size-free rule) tiles stay outermost."""
    caps = replace(resolve_target(target="x86_64", mcpu="x86-64-v3").caps,
                   l1d_bytes=32 << 10 if l2 else 0, l2_bytes=l2)
    assert tiles_outermost(caps, **R50_14) is expected
    assert tiles_outermost(caps, **R50_56) is True


def test_microcontrollers_have_no_cache_figures():
    caps = resolve_target(target="arm", mcpu="cortex-m7", float_abi="hard").caps
    assert (caps.l1d_bytes, caps.l2_bytes) == (0, 0)


# DeepSpeech2's second conv: 21x11 / (2, 1), 32 -> 32, two 16-channel blocks of 473 KB; a 3x3
# 512 -> 512 on 7x7 in 32 blocks of 295 KB (ResNet-18's last stage)
DS2 = dict(w_bytes=32 * 32 * 21 * 11 * 4, nblk=2)
R18_7 = dict(w_bytes=512 * 512 * 9 * 4, nblk=32)


@pytest.mark.parametrize("l2, ds2", [(0, False), (512 << 10, True), (1 << 20, False)])
def test_blocks_past_the_l2_run_the_tiles_outermost(l2, ds2):
    """Where one block's weights take 3/4 of the L2 or more, every tile streams them from L3
    in either order and the tiles go outermost (tiles.block_streams); blocks that stay in L2
    (ResNet-18's 295 KB on 512 KiB) keep the blocks outermost, as does a target without cache
    figures; a single block has no order to choose."""
    from glowpy.codegen.kernels.tiles import block_streams
    caps = replace(resolve_target(target="x86_64", mcpu="x86-64-v3").caps,
                   l1d_bytes=32 << 10 if l2 else 0, l2_bytes=l2)
    assert block_streams(caps, **DS2) is ds2
    assert block_streams(caps, **R18_7) is False
    assert block_streams(caps, DS2["w_bytes"], 1) is False


@pytest.mark.parametrize("level", RUNNABLE, ids=str)
def test_streamed_blocks_match_onnxruntime(level, tmp_path):
    """DeepSpeech2's 21x11 / (2, 1) conv on a short spectrogram against onnxruntime, with the
    Clip(0, 20) it carries; at AVX2 the plan is checked to be the one tiles.block_streams sends
    through the tiles-outermost order (two blocks of 16 channels, 473 KB each, on the family's
    512 KiB L2)."""
    rng = np.random.default_rng(3)
    g = GraphBuilder(x=rng.standard_normal((1, 32, 30, 37)).astype(np.float32))
    w = (rng.standard_normal((32, 32, 21, 11)) / 80).astype(np.float32)
    c = g.node("Conv", [g.node("Relu", ["x"], output=False), w,
                        rng.standard_normal(32).astype(np.float32)], output=False,
               kernel_shape=[21, 11], strides=[2, 1], pads=[10, 5, 10, 5])
    g.node("Clip", [c, np.float32(0), np.float32(20)])
    model, feeds = g.model(opset=13), g.feeds
    report = tmp_path / "m.json"
    check_against_onnxruntime(model, feeds, tmp_path, rtol=1e-4, atol=1e-4,
                              dump_memory_report=str(report), **level.options)
    if level.lanes == 8:  # the path under test: two blocks of 16 channels, streamed
        from glowpy.codegen.kernels.tiles import block_streams
        rows = json.loads(report.read_text())["instructions"]
        [conv] = [i for i in rows if i["kernel"] == "Conv"]
        assert conv["variant"]["name"] == "channel_vectorized", conv["variant"]
        assert conv["variant"]["params"]["nvo"] * 8 == 16, conv["variant"]
        caps = resolve_target(target="x86_64", mcpu=level.cpu).caps
        assert block_streams(caps, DS2["w_bytes"], 2)
