"""The data-cache sizes of TargetCaps (caps.py) and the loop order the register-tiled
convolutions take from them (tiles.tiles_outermost)."""
from __future__ import annotations

import glob
import os
import platform

import pytest
from dataclasses import replace

from glowpy.codegen.kernels.tiles import tiles_outermost
from glowpy.codegen.target import resolve_target
from glowpy.codegen.target.caps import FAMILY_CACHES


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
