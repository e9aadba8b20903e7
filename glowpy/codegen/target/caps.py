"""What LLVM made of a target's CPU and features, read from the assembly of a probe compiled
for it."""
from __future__ import annotations

import functools
import re

from glowpy.codegen.target.machine import PROBE_FP_IR, create_tm


@functools.lru_cache(maxsize=64)
def probe_asm(spec) -> str:
    """Assembly of the float probe compiled for a TargetSpec (ARM build attributes, .fpu
    directive, RISC-V ISA string)."""
    _, asm = create_tm(spec.triple, spec.cpu, spec.features, opt=2,
                       reloc=spec.relocation_model, codemodel=spec.code_model,
                       abi=spec.abi, probe_ir=PROBE_FP_IR)
    return asm or ""


def arm_fpu_from_asm(asm: str) -> str | None:
    m = re.search(r"^\s*\.fpu\s+(\S+)", asm or "", re.M)
    if not m or m.group(1) in ("softvfp", "none"):
        return None
    return m.group(1)
