"""x86-64 vector levels for kernel tests that must not depend on the machine under them.

The kernels pick their variant and tile shapes from the target's vector width and register
count, so a test that compiles for "the host" tests a different program on an AVX2-only
Zen 3 than on an AVX-512 Xeon. The tests here compile for named psABI levels instead:

    x86-64     SSE2: 4 float lanes, 16 xmm registers (the baseline every x86-64 CPU has)
    x86-64-v3  AVX2 + FMA: 8 lanes, 16 ymm registers
    x86-64-v4  AVX-512 F/BW/CD/DQ/VL: 16 lanes, 32 zmm registers, mask registers

`RUNNABLE` holds the levels this host executes (every x86-64 host runs the first; AVX2 hosts
the second too; AVX-512 hosts all three), so an AVX-512 machine additionally runs its wider
paths and every machine runs the narrower ones: a change that breaks the SSE or AVX2 code
fails everywhere. A level the host cannot execute is not collected as a test at all (the
suite reports 0 skipped); tests that only check a plan compile for every level in `LEVELS`
without running (`plan_only`).

    @pytest.mark.parametrize("level", RUNNABLE)
    def test_x(level, tmp_path):
        check_against_onnxruntime(m, feeds, tmp_path, **level.options)
"""
from __future__ import annotations

import platform
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class Level:
    name: str  # test id: sse2, avx2, avx512
    cpu: str | None  # LLVM CPU name (-mcpu); None: the host's own
    lanes: int  # float lanes the kernels use (TargetCaps.float_lanes); 0: the host's
    features: frozenset  # LLVM feature names the host needs to execute this level's code
    mattr: str | None = None  # LLVM features added to the CPU's (-mattr)

    @property
    def options(self) -> dict:
        """glowpy.compile options: the host triple, this level's CPU (and features)."""
        return dict(mcpu=self.cpu, **({"mattr": self.mattr} if self.mattr else {})) \
            if self.cpu else {}

    def __str__(self) -> str:
        return self.name


_V2 = {"cx16", "sahf", "popcnt", "sse3", "sse4.1", "sse4.2", "ssse3"}
_V3 = _V2 | {"avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave"}
_V4 = _V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}

LEVELS = [Level("sse2", "x86-64", 4, frozenset({"sse2"})),
          Level("avx2", "x86-64-v3", 8, frozenset(_V3)),
          Level("avx512", "x86-64-v4", 16, frozenset(_V4))]


def host_features() -> set:
    from llvmlite import binding as llvm
    llvm.initialize_native_target()
    return {f[1:] for f in llvm.get_host_cpu_features().flatten().split(",") if f.startswith("+")}


def _runnable() -> list:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return [Level("native", None, 0, frozenset())]  # an Arm host runs its own vectors
    have = host_features()
    return [lv for lv in LEVELS if lv.features <= have]


RUNNABLE = _runnable()
# VNNI (vpdpbusd) on top of AVX-512: the int8 GEMM's quads (kernels/int8/groups.py); run
# where the host has it, by the tests of those kernels only
VNNI = Level("vnni", "cascadelake", 16, frozenset(_V4 | {"avx512vnni"}))
# AVX without AVX2: 8 float lanes but SSE2's integer vectors (TargetCaps.pair_madd 4)
AVX1 = Level("avx1", "sandybridge", 8, frozenset(_V2 | {"avx"}))
# AVX512-VBMI's byte permute (TargetCaps.byte_permute: int8 tables, kernels/int8/qtable.py)
VBMI = Level("vbmi", "x86-64-v4", 16, frozenset(_V4 | {"avx512vbmi"}), "+avx512vbmi")
X86 = platform.machine().lower() in ("x86_64", "amd64")
VNNI_RUNNABLE = [VNNI] if X86 and VNNI.features <= host_features() else []
AVX1_RUNNABLE = [AVX1] if X86 and AVX1.features <= host_features() else []
VBMI_RUNNABLE = [VBMI] if X86 and VBMI.features <= host_features() else []
HOST = Level("host", None, 0, frozenset())  # the host's own CPU and features (the default build)


def params(levels=None):
    """pytest.param per level with its name as the id (for parametrize's argvalues)."""
    return [pytest.param(lv, id=lv.name) for lv in (RUNNABLE if levels is None else levels)]


def plan_only(level: Level) -> bool:
    """True when `level` cannot run here (its bundle is compiled and its plan checked only)."""
    return level not in RUNNABLE
