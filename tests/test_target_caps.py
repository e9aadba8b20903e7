"""TargetCaps (glowpy/codegen/target/caps.py): what each target offers the kernels, read from
what LLVM makes of the CPU, features and float ABI, for explicit targets, so the expectations
hold on every machine (a row naming this machine's own CPU gets its caches from sysfs)."""
from __future__ import annotations

import os
import re
from dataclasses import replace

import llvmlite.binding as llvm
import pytest

from glowpy.codegen.target import TargetCaps, caps_of, resolve_target
from vector_levels import LEVELS

GLOWPY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "glowpy")

def caps(lanes, regs, masks=False, fpu=True, arm_fpu=None, neon=False, mve=False,
         mve_float=False, dsp=False, bits=64, mcu=False, cache=None,
         fp_round=False, pair_madd=0, quad_madd=False, byte_permute=False) -> TargetCaps:
    """cache: (L1D, L2) bytes; default: none on microcontrollers, else caps.FAMILY_CACHES
    for 64-bit x86/AArch64 and SMALL_CORE_CACHES for the rest (explicit CPUs, not the host)."""
    if cache is None:
        cache = (0, 0) if mcu else (32 << 10, (512 if bits == 64 else 256) << 10)
    return TargetCaps(float_lanes=lanes, vector_registers=regs, cheap_masks=masks, fpu=fpu,
                      arm_fpu=arm_fpu, neon=neon, mve=mve, mve_float=mve_float, dsp=dsp,
                      fp_round=fp_round, pointer_bits=bits, memory_first=mcu, l1d_bytes=cache[0],
                      l2_bytes=cache[1], pair_madd=pair_madd, quad_madd=quad_madd,
                      byte_permute=byte_permute)


M_SOFT = dict(fpu=False, bits=32, mcu=True)  # an FPU-less M-profile core: floats in core registers

CAPS = {
    # pair_madd: pmaddwd's int32 lanes (SSE2's 4 where AVX2's integer instructions are
    # missing: SSE2 itself, or AVX alone; AVX512BW's 16, AVX512F alone keeps AVX2's 8);
    # quad_madd: VNNI (AVX512-VNNI or AVX-VNNI);
    # byte_permute: AVX512-VBMI
    "x86-64": (dict(target="x86_64", mcpu="x86-64"), caps(4, 16, pair_madd=4)),
    "sandybridge": (dict(target="x86_64", mcpu="sandybridge"), caps(8, 16, pair_madd=4)),
    "x86-64-v3": (dict(target="x86_64", mcpu="x86-64-v3"), caps(8, 16, pair_madd=8)),
    "x86-64-v4": (dict(target="x86_64", mcpu="x86-64-v4"),
                  caps(16, 32, masks=True, pair_madd=16)),
    "x86-64-v4-no-bw": (dict(target="x86_64", mcpu="x86-64-v4", mattr="-avx512bw"),
                        caps(16, 32, masks=True, pair_madd=8)),
    "haswell": (dict(target="x86_64", mcpu="haswell"), caps(8, 16, pair_madd=8)),
    "skylake-avx512": (dict(target="x86_64", mcpu="skylake-avx512"),
                       caps(16, 32, masks=True, pair_madd=16)),
    "cascadelake": (dict(target="x86_64", mcpu="cascadelake"),
                    caps(16, 32, masks=True, pair_madd=16, quad_madd=True)),
    "icelake-server": (dict(target="x86_64", mcpu="icelake-server"),
                       caps(16, 32, masks=True, pair_madd=16, quad_madd=True, byte_permute=True)),
    "x86-64-v4+vbmi": (dict(target="x86_64", mcpu="x86-64-v4", mattr="+avx512vbmi"),
                       caps(16, 32, masks=True, pair_madd=16, byte_permute=True)),
    # Zen 4 runs AVX512BW's 512-bit pmaddwd as two halves (caps.HALF_512): 8 lanes; Zen 5 16
    "znver4": (dict(target="x86_64", mcpu="znver4"),
               caps(16, 32, masks=True, pair_madd=8, quad_madd=True, byte_permute=True)),
    "znver5": (dict(target="x86_64", mcpu="znver5"),
               caps(16, 32, masks=True, pair_madd=16, quad_madd=True, byte_permute=True)),
    "x86-64-v3+avxvnni": (dict(target="x86_64", mcpu="x86-64-v3", mattr="+avxvnni"),
                          caps(8, 16, pair_madd=8, quad_madd=True)),
    "haswell-no-avx2": (dict(target="x86_64", mcpu="haswell", mattr="-avx2"),
                        caps(8, 16, pair_madd=4)),
    "i686": (dict(target="x86"), caps(1, 8, bits=32)),
    "aarch64": (dict(target="aarch64"), caps(4, 32, neon=True)),
    "aarch64-noneon": (dict(target="aarch64", mattr="-neon"), caps(1, 32)),
    "cortex-a7": (dict(target="arm", mcpu="cortex-a7"),
                  caps(4, 16, arm_fpu="neon-vfpv4", neon=True, bits=32)),
    "cortex-m7-hard": (dict(target="arm", mcpu="cortex-m7", float_abi="hard"),
                       caps(1, 32, arm_fpu="fpv5-d16", dsp=True, bits=32, mcu=True, fp_round=True)),
    "cortex-m7-soft": (dict(target="arm", mcpu="cortex-m7", float_abi="soft"),
                       caps(1, 12, dsp=True, **M_SOFT)),
    "cortex-m4-hard": (dict(target="arm", mcpu="cortex-m4", float_abi="hard"),
                       caps(1, 32, arm_fpu="fpv4-sp-d16", dsp=True, bits=32, mcu=True)),
    "cortex-m33-hard": (dict(target="arm", mcpu="cortex-m33", float_abi="hard"),
                        caps(1, 32, arm_fpu="fpv5-sp-d16", dsp=True, bits=32, mcu=True,
                             fp_round=True)),
    # Helium: LLVM keeps 16-float vectors in q registers, so the kernels see 4 lanes
    "cortex-m55-hard": (dict(target="arm", mcpu="cortex-m55", float_abi="hard"),
                        caps(4, 16, arm_fpu="fpv5-d16", mve=True, mve_float=True, dsp=True,
                             bits=32, mcu=True, fp_round=True)),
    "cortex-m85-hard": (dict(target="arm", mcpu="cortex-m85", float_abi="hard"),
                        caps(4, 16, arm_fpu="fpv5-d16", mve=True, mve_float=True, dsp=True,
                             bits=32, mcu=True, fp_round=True)),
    "cortex-m0": (dict(target="arm", mcpu="cortex-m0"), caps(1, 12, **M_SOFT)),
    "cortex-m3": (dict(target="arm", mcpu="cortex-m3"), caps(1, 12, **M_SOFT)),
    "riscv32": (dict(target="riscv32"), caps(1, 12, fpu=False, bits=32, mcu=True)),
    "riscv64": (dict(target="riscv64"), caps(1, 32, cache=(32 << 10, 256 << 10))),
    # the CPU's own F/D extensions count, not only -mattr's
    "riscv64-sifive-u74": (dict(target="riscv64", mcpu="sifive-u74"),
                           caps(1, 32, cache=(32 << 10, 256 << 10))),
    "riscv32-f": (dict(target="riscv32", mattr="+f"), caps(1, 32, bits=32, mcu=True)),
}


@pytest.mark.parametrize("name", list(CAPS))
def test_caps_per_target(name):
    options, expected = CAPS[name]
    spec = resolve_target(**options)
    if spec.is_host and spec.cpu == llvm.get_host_cpu_name():  # this machine's caches (sysfs)
        expected = replace(expected, l1d_bytes=spec.caps.l1d_bytes, l2_bytes=spec.caps.l2_bytes)
    assert spec.caps == expected
    assert caps_of(spec) is spec.caps  # derived once per spec
    assert spec.fpu == expected.arm_fpu


@pytest.mark.parametrize("level", LEVELS, ids=str)
def test_vector_levels_are_the_caps_lanes(level):
    """tests/vector_levels.py's lanes per x86 level are what the kernels get."""
    assert resolve_target("x86_64", level.cpu).caps.float_lanes == level.lanes


DSP = [("cortex-m4", None, True), ("cortex-m7", None, True), ("cortex-m33", None, True),
       ("cortex-m35p", None, True), ("cortex-m55", None, True), ("cortex-m85", None, True),
       ("cortex-m0", None, False), ("cortex-m0plus", None, False), ("cortex-m3", None, False),
       ("cortex-m23", None, False), ("cortex-m33", "-dsp", False), ("cortex-m4", "-dsp", False)]


@pytest.mark.parametrize("cpu, mattr, dsp", DSP,
                         ids=[c + (m or "") for c, m, _ in DSP])
def test_dsp_extension_follows_the_cpu_and_features(cpu, mattr, dsp):
    """The DSP extension (SMLAD, SXTB16: the int8 kernels' fast paths) comes from the CPU and
    -mattr, whatever the triple: Armv7E-M cores, and Armv8-M Mainline cores whose LLVM
    definition has +dsp (the M33's DSP is optional in silicon: -mattr=-dsp says it is not
    there)."""
    assert resolve_target("arm", mcpu=cpu, mattr=mattr).caps.dsp is dsp


def test_only_the_target_package_reads_assembly_or_triples():
    """Capabilities are derived in glowpy/codegen/target/ alone: no other module compiles a
    probe to read its assembly or looks at a triple's spelling."""
    target_pkg = os.path.join(GLOWPY, "codegen", "target")
    offenders = []
    for root, _, files in os.walk(GLOWPY):
        for f in files:
            path = os.path.join(root, f)
            if not f.endswith(".py") or path.startswith(target_pkg + os.sep):
                continue
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            if "emit_assembly" in text or re.search(
                    r"triple\)?\.(startswith|endswith|split|partition)|triple\s*[!=]=|"
                    r"[\"'](thumb|arm)v\d", text):
                offenders.append(os.path.relpath(path, GLOWPY))
    assert not offenders, offenders
