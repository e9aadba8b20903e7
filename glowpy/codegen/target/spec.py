"""TargetSpec: a fully resolved target (normalized triple, CPU, features, float ABI, relocation
and code model), and the LLVM target machine made from it."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import llvmlite.binding as llvm

from glowpy.codegen.target.caps import TargetCaps, caps_of
from glowpy.codegen.target.machine import create_tm
from glowpy.codegen.target.options import TargetError
from glowpy.codegen.target.triples import host_triple, parts


@dataclass(frozen=True)
class TargetSpec:
    """A fully resolved target: everything needed to create the machine."""

    triple: str              # fully normalized, e.g. thumbv7em-unknown-none-eabihf
    cpu: str                 # e.g. cortex-m7; the host CPU name by default
    features: str            # LLVM feature string "+a,-b" (may be "")
    float_abi: str           # "hard" | "soft" | "softfp" | "default"
    relocation_model: str    # "static" | "pic"
    code_model: str          # "small" | "kernel" | "medium" | "large" | "default"
    abi: str = ""            # LLVM ABI name (RISC-V: ilp32, lp64d, ...); "" = default

    @property
    def is_host(self) -> bool:
        """True if objects for this target link and run in this process's OS/arch."""
        mine = parts(self.triple)
        host = parts(host_triple())
        return ((mine.Arch, mine.SubArch, mine.OS, mine.Env)
                == (host.Arch, host.SubArch, host.OS, host.Env))

    @property
    def arch(self) -> str:
        """LLVM architecture family: arm, thumb, aarch64, x86_64, riscv32, ..."""
        return parts(self.triple).Arch

    @property
    def data_layout(self) -> str:
        return _data_layout(self)

    @property
    def pointer_bits(self) -> int:
        for item in self.data_layout.split("-"):
            m = re.fullmatch(r"p0?:(\d+):.*", item)
            if m:
                return int(m.group(1))
        return 64  # LLVM's default when the layout has no p: entry

    @property
    def fpu(self) -> str | None:
        """ARM only: LLVM's name of the FPU the code may use (e.g. fpv5-d16,
        usable as GCC's -mfpu), or None when no FPU instruction is emitted."""
        return self.caps.arm_fpu

    @property
    def caps(self) -> TargetCaps:
        """What the target offers the kernels (caps.py; computed once per spec)."""
        return caps_of(self)

    def target_machine(self, opt: int = 3) -> "llvm.TargetMachine":
        """Create the LLVM target machine (cpu, features, relocation and code
        model, and the float ABI through triple/features/ABI name)."""
        if not isinstance(opt, int) or not 0 <= opt <= 3:
            raise TargetError(f"optimization level must be 0..3, got {opt!r}")
        tm, _ = create_tm(self.triple, self.cpu, codegen_features(self), opt=opt,
                          reloc=self.relocation_model,
                          codemodel=self.code_model, abi=self.abi)
        return tm

    def describe(self) -> dict:
        """Target description for the bundle's JSON manifest."""
        d = {
            "triple": self.triple,
            "cpu": self.cpu,
            "features": self.features,
            "float_abi": self.float_abi,
            "relocation_model": self.relocation_model,
            "code_model": self.code_model,
        }
        if self.abi:
            d["abi"] = self.abi
        return d


def codegen_features(spec: TargetSpec) -> str:
    """The features the machine is created with: the spec's, and the backend's one rewrite of
    them. x86: no SSE4a. LLVM picks its insertq/extrq for some byte shuffles on AMD CPUs
    (znver*), legacy-SSE encodings amid AVX code, and on the Zen 3 each cost like a state
    transition: one 6x6 stride-2 depthwise QConv layer on 128 channels ran in 28.0 us with
    them and 11.1 without; keyword spotting int8 107 -> 77 us, VWW int8 307 -> 258 us
    (-mcpu=znver3, interleaved). Their work is a pshufb or two otherwise."""
    if spec.arch in ("x86_64", "x86"):
        return ",".join(f for f in (spec.features, "-sse4a") if f)
    return spec.features


@functools.lru_cache(maxsize=64)
def _data_layout(spec: TargetSpec) -> str:
    return str(spec.target_machine(opt=0).target_data)
