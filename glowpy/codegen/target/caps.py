"""What the target offers the kernels (TargetCaps), derived here and nowhere else.

Every fact is read from what LLVM makes of the resolved CPU, features and float ABI, never
from the spelling of a triple, so -mcpu, -mattr and -float-abi count: -mcpu=cortex-m33 has the
DSP extension whatever the triple says, -mattr=-dsp takes it away. Two probes are compiled
with the target's machine:

* the float probe (machine.PROBE_FP_IR). On ARM its build attributes, which LLVM writes from
  the subtarget's feature bits: Tag_CPU_arch (6) and Tag_CPU_arch_profile (7), Tag_DSP_extension
  (46, written for Armv8-M; Armv7E-M always has the DSP instructions), Tag_MVE_arch (48:
  1 integer, 2 integer and float), and the .fpu directive (no FPU instruction: soft float).
  On RISC-V the ISA string (.attribute 5): F or D means hardware float.
* the vector probe (machine.PROBE_VECTOR_IR, a 16-float addition). The registers LLVM uses
  for it give the float lanes (zmm/ymm/xmm on x86, v.4s on AArch64, q on ARM).
* on x86 the integer probe (machine.PROBE_X86_INT_IR): an 8 x int32 addition in ymm registers
  means AVX2's integer instructions (AVX alone has only float ones: -mcpu=sandybridge),
  pmaddwd plus an addition fused into vpdpwssd means VNNI, and a two-vector byte shuffle in
  one vpermi2b/vpermt2b AVX512-VBMI.

resolve.py, arm.py and riscv.py use the same readers while they resolve the options.

Three facts LLVM does not expose are not read from it: the data-cache sizes (the host's own
from Linux sysfs when the target is this machine's CPU, the family's usual figures otherwise,
none on microcontrollers), memory_first (microcontrollers: M-profile ARM, 32-bit RISC-V), and
the CPUs that run a 512-bit integer instruction as two 256-bit halves (HALF_512).

Adding a capability: a field of TargetCaps, its derivation in caps_of (from the probes'
assembly or the spec), a row in tests/test_target_caps.py; kernels read it as k.caps.<field>
(glowpy.codegen.kernel.Kernel)."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from glowpy.codegen.target.machine import PROBE_FP_IR, PROBE_VECTOR_IR, PROBE_X86_INT_IR, create_tm
from glowpy.codegen.target.triples import ARM_FAMILIES

# Build attribute tags (ARM IHI 0045, "Addenda to the ARM ABI")
TAG_CPU_ARCH, TAG_CPU_ARCH_PROFILE, TAG_DSP_EXTENSION, TAG_MVE_ARCH = 6, 7, 46, 48
CPU_ARCH_V7EM = 13  # Tag_CPU_arch of Armv7E-M: the DSP instructions are part of it


@dataclass(frozen=True)
class TargetCaps:
    """What kernels may ask about the target."""

    float_lanes: int       # float32 lanes of a vector register (1: scalar FP registers)
    vector_registers: int  # FP/vector registers the register tiles are planned for
    cheap_masks: bool      # a masked load/store costs a plain one (AVX-512 mask registers)
    fpu: bool              # floating point in hardware (False: soft float, library calls)
    arm_fpu: str | None    # ARM: LLVM's name of the FPU (GCC's -mfpu); None: none used
    neon: bool             # Advanced SIMD (AArch64, A/R-profile ARM)
    mve: bool              # M-profile Vector Extension (Helium), integer
    mve_float: bool        # Helium with float vectors
    dsp: bool              # M-profile DSP extension: SMLAD, SXTB16 (Armv7E-M, Armv8-M +dsp)
    pointer_bits: int
    # ARM FPU with directed-rounding instructions (VRINTN: FPv5 / Armv8 FPUs; Cortex-M7, M33,
    # M55): round-half-even is one instruction instead of mathfn's sequence
    fp_round: bool = False
    # RAM is the budget (microcontrollers: M-profile ARM, 32-bit RISC-V): the planner may take
    # a kernel that is slower to save activation bytes (ConvPointwiseInPlace); elsewhere time
    # comes first (planner.build, -activation-memory)
    memory_first: bool = False
    # data cache per core the loop orders are planned for (bytes; 0: none or unknown, the
    # kernels keep their size-free rules): the host's own from sysfs, else the family's usual
    l1d_bytes: int = 0
    l2_bytes: int = 0
    # int16 pairs multiplied and added into int32 lanes at twice the float FMA's multiply-adds
    # per instruction (x86's pmaddwd, every level from SSE2): the int32 lanes of the widest
    # one (4: SSE2, or AVX without AVX2's integer instructions; 8: AVX2; 16: AVX512BW, but 8 on
    # the CPUs that split it in halves: caps.HALF_512), 0
    # where there is none: the int8 GEMM kernels (kernels/int8/pairs.py). AArch64's smlal
    # does a float FMA's four.
    pair_madd: int = 0
    # quads of u8 x s8 products added into int32 lanes (x86 VNNI's vpdpbusd: AVX512-VNNI,
    # AVX-VNNI), twice pmaddwd's multiply-adds: the same kernels' quads (kernels/int8/groups.py)
    quad_madd: bool = False
    # a byte shuffle over two 64-byte tables (AVX512-VBMI's vpermi2b): a 256-entry byte table
    # looked up for 64 bytes in two of them and a blend (kernels/int8/qtable.py)
    byte_permute: bool = False


@functools.lru_cache(maxsize=64)
def probe_asm(spec) -> str:
    """Assembly of the float probe compiled for a TargetSpec."""
    return _compile(spec, PROBE_FP_IR)


def _compile(spec, ir: str) -> str:
    _, asm = create_tm(spec.triple, spec.cpu, spec.features, opt=2,
                       reloc=spec.relocation_model, codemodel=spec.code_model,
                       abi=spec.abi, probe_ir=ir)
    return asm or ""


def arm_fpu_from_asm(asm: str) -> str | None:
    m = re.search(r"^\s*\.fpu\s+(\S+)", asm or "", re.M)
    if not m or m.group(1) in ("softvfp", "none"):
        return None
    return m.group(1)


def arm_attributes(asm: str) -> dict[int, int]:
    """The integer-valued ARM build attributes in an assembly text: {tag: value}."""
    return {int(t): int(v) for t, v in
            re.findall(r"^\s*\.eabi_attribute\s+(\d+),\s*(\d+)\b", asm or "", re.M)}


def riscv_extensions(asm: str) -> set[str]:
    """The RISC-V extensions (i, m, f, d, c, zicsr...) of the ISA string in an assembly
    text, version numbers dropped."""
    isa = re.search(r'\.attribute\s+5,\s*"([^"]+)"', asm or "")
    if not isa:
        return set()
    name = isa.group(1)
    exts = {re.sub(r"\d+p\d+$", "", e) for e in name[4:].split("_")}
    first = name[4:].split("_")[0]
    exts.add(re.sub(r"\d+p\d+$", "", first)[:1])
    return exts


def _vector_shape(spec) -> tuple[int, int, bool]:
    """(float lanes, registers, cheap masks) from what LLVM makes of a 16-float addition."""
    arch = spec.arch
    asm = _compile(spec, PROBE_VECTOR_IR)
    if arch in ("x86_64", "i386"):
        regs = 32 if "zmm" in asm else (16 if arch == "x86_64" else 8)
        width = 16 if "zmm" in asm else 8 if "ymm" in asm else 4 if "xmm" in asm else 1
        return width, regs, width == 16
    if arch.startswith("aarch64"):
        return (4 if re.search(r"\.4s\b", asm) else 1), 32, False
    if arch in ARM_FAMILIES:
        if re.search(r"\bq\d+\b", asm):
            return 4, 16, False  # NEON: 16 quad registers
        return 1, 32, False  # VFP: 32 single-precision registers (D16)
    if arch.startswith("riscv"):
        return 1, 32, False
    return 1, 16, False


@functools.lru_cache(maxsize=64)
def caps_of(spec) -> TargetCaps:
    """The capabilities of a TargetSpec (computed once per spec)."""
    arch = spec.arch
    arm = arch in ARM_FAMILIES
    asm = probe_asm(spec) if arm or arch.startswith("riscv") else ""
    attrs = arm_attributes(asm) if arm else {}
    arm_fpu = arm_fpu_from_asm(asm) if arm else None
    if arm:
        fpu = arm_fpu is not None
    elif arch.startswith("riscv"):
        fpu = bool(riscv_extensions(asm) & {"f", "d"})
    else:
        fpu = True
    # Without an FPU floats live in core registers around the libgcc calls.
    lanes, regs, masks = _vector_shape(spec) if fpu else (1, 12, False)
    # dsp names the M-profile extension the int8 kernels' SMLAD paths were written for; A/R
    # cores have the instructions too, but their int8 code is left to LLVM's NEON vectorizer.
    m_profile = attrs.get(TAG_CPU_ARCH_PROFILE) == ord("M")
    return TargetCaps(
        float_lanes=lanes, vector_registers=regs, cheap_masks=masks, fpu=fpu,
        arm_fpu=arm_fpu,
        neon=(arch.startswith("aarch64") and lanes > 1) or "neon" in (arm_fpu or ""),
        mve=attrs.get(TAG_MVE_ARCH, 0) >= 1, mve_float=attrs.get(TAG_MVE_ARCH, 0) >= 2,
        dsp=m_profile and (attrs.get(TAG_CPU_ARCH) == CPU_ARCH_V7EM
                           or attrs.get(TAG_DSP_EXTENSION) == 1),
        fp_round=any(f in (arm_fpu or "") for f in ("fpv5", "armv8")),
        pointer_bits=spec.pointer_bits, memory_first=m_profile or arch == "riscv32",
        **(_x86_int(spec) if arch in ("x86_64", "i386") and lanes > 1 else {}),
        **_caches(spec, m_profile or arch == "riscv32"))


# CPUs whose AVX-512 integer instructions run as two 256-bit halves (AMD Zen 4): there the int8
# GEMM keeps 8 int32 lanes. Zen 4, native code, interleaved, 16 lanes against 8: ResNet-50
# int8 24.4 / 24.0 ms, ResNet-18 int8 11.24 / 10.80, EfficientNet-B0 int8 5.10 / 4.98,
# MobileNetV2 int8 3.12 / 3.17, and ResNet-50 int8 compiled in 34 CPU s against 21 (16 lanes
# unroll twice the code per tile). A Zen 5, whose 512-bit pipes are whole, ran ResNet-50 int8
# in 12.3 ms on 16 lanes against 20.5 on 8 (twenty-second session).
HALF_512 = ("znver4",)


def _x86_int(spec) -> dict:
    """{"pair_madd", "quad_madd", "byte_permute"} from the integer probe's assembly."""
    asm = _compile(spec, PROBE_X86_INT_IR)
    lanes = 16 if re.search(r"vpaddw\s+.*%zmm", asm) else \
        8 if re.search(r"vpaddd\s+.*%ymm", asm) else 4
    if spec.cpu in HALF_512:
        lanes = min(lanes, 8)
    return {"pair_madd": lanes,
            "quad_madd": "vpdpwssd" in asm, "byte_permute": bool(re.search(r"vperm[it]2b", asm))}


# Usual per-core data caches of a family when the target is not this machine: x86-64 and
# AArch64 application cores have 32-64 KiB of L1D and 0.5-2 MiB of L2 (the smaller figures:
# a plan for too small a cache costs little, one for too large a cache thrashes); 32-bit
# application cores 32 KiB and 256 KiB; microcontrollers run from TCM/SRAM (none).
FAMILY_CACHES = {"x86_64": (32 << 10, 512 << 10), "aarch64": (32 << 10, 512 << 10)}
SMALL_CORE_CACHES = (32 << 10, 256 << 10)


def _caches(spec, mcu: bool) -> dict:
    if mcu:
        return {"l1d_bytes": 0, "l2_bytes": 0}
    own = _host_caches(spec.cpu) if spec.is_host else None
    l1, l2 = own or FAMILY_CACHES.get(spec.arch.split("_be")[0], SMALL_CORE_CACHES)
    return {"l1d_bytes": l1, "l2_bytes": l2}


@functools.lru_cache(maxsize=4)
def _host_caches(cpu: str):
    """(L1D, L2) bytes of this machine's first CPU (Linux sysfs) when `cpu` is the host's own
    CPU (an explicit -mcpu for another CPU gets the family's figures); None elsewhere."""
    import glob
    import os
    import llvmlite.binding as llvm
    if cpu != llvm.get_host_cpu_name():
        return None
    sizes = {}
    for d in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        try:
            with open(os.path.join(d, "level")) as f:
                level = int(f.read())
            with open(os.path.join(d, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(d, "size")) as f:
                text = f.read().strip().upper()
        except (OSError, ValueError):
            continue
        mult = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
        digits = text.rstrip("KMB")
        if kind in ("Data", "Unified") and digits.isdigit():
            sizes[level] = int(digits) * mult
    return (sizes[1], sizes[2]) if 1 in sizes and 2 in sizes else None
