"""LLVM target machines, created with validation: LLVM reports an unknown CPU or feature only as
a warning on stderr and then ignores it, so file descriptor 2 is captured while the machine is
created and every such message becomes a TargetError. Optionally a probe function is compiled
with the new machine, and its assembly says what LLVM really made of CPU + features (read by
caps.py)."""
from __future__ import annotations

import re

import llvmlite.binding as llvm

from glowpy.codegen.target.listing import available_targets, feature_list_text, llvm_help
from glowpy.codegen.target.llvm_setup import capture_fd2, initialize_llvm
from glowpy.codegen.target.options import TargetError, split_features, suggest

PROBE_INT_IR = """
define i32 @glowpy_target_probe(i32 %a, i32 %b) {
  %r = add i32 %a, %b
  ret i32 %r
}
"""

PROBE_FP_IR = """
define float @glowpy_target_probe_f(float %a, float %b) {
  %m = fmul float %a, %b
  %r = fadd float %m, 1.0
  ret float %r
}
define double @glowpy_target_probe_d(double %a, double %b) {
  %m = fmul double %a, %b
  ret double %m
}
"""

# A 16-float addition: the registers LLVM uses for it show the float vector width.
PROBE_VECTOR_IR = """
define void @probe(ptr noalias %a, ptr noalias %b) {
  %x = load <16 x float>, ptr %a, align 64
  %y = load <16 x float>, ptr %b, align 64
  %z = fadd <16 x float> %x, %y
  store <16 x float> %z, ptr %a, align 64
  ret void
}
"""

# x86 integer vectors: an 8 x int32 addition (ymm registers: AVX2's integer instructions; AVX
# alone splits it into xmm halves), a 32 x int16 one (zmm registers: AVX512BW's 512-bit
# integer instructions, pmaddwd among them; AVX512F alone splits it), pmaddwd's sums added to
# an accumulator, which LLVM fuses into one vpdpwssd exactly where the target has VNNI
# (AVX512-VNNI or AVX-VNNI), and a shuffle of the bytes of two 64-byte vectors:
# vpermi2b/vpermt2b exactly where it has AVX512-VBMI.
_BYTES = ", ".join(f"i32 {(37 * i + 11) % 128}" for i in range(64))
PROBE_X86_INT_IR = """
declare <4 x i32> @llvm.x86.sse2.pmadd.wd(<8 x i16>, <8 x i16>)
define void @probe_int(ptr noalias %a, ptr noalias %b) {
  %x = load <8 x i32>, ptr %a, align 32
  %y = load <8 x i32>, ptr %b, align 32
  %z = add <8 x i32> %x, %y
  store <8 x i32> %z, ptr %a, align 32
  ret void
}
define void @probe_bw(ptr noalias %a, ptr noalias %b) {
  %x = load <32 x i16>, ptr %a, align 64
  %y = load <32 x i16>, ptr %b, align 64
  %z = add <32 x i16> %x, %y
  store <32 x i16> %z, ptr %a, align 64
  ret void
}
define <4 x i32> @probe_vnni(<8 x i16> %a, <8 x i16> %b, <4 x i32> %c) {
  %m = call <4 x i32> @llvm.x86.sse2.pmadd.wd(<8 x i16> %a, <8 x i16> %b)
  %s = add <4 x i32> %m, %c
  ret <4 x i32> %s
}
define void @probe_vbmi(ptr noalias %a, ptr noalias %b) {
  %x = load <64 x i8>, ptr %a, align 64
  %y = load <64 x i8>, ptr %b, align 64
  %z = shufflevector <64 x i8> %x, <64 x i8> %y, <64 x i32> <BYTES>
  store <64 x i8> %z, ptr %a, align 64
  ret void
}
""".replace("BYTES", _BYTES)

_RE_BAD_CPU = re.compile(r"'([^']*)' is not a recognized processor")
_RE_BAD_FEATURE = re.compile(r"'([^']*)' is not a recognized feature")


def get_target(triple: str):
    initialize_llvm()
    try:
        return llvm.Target.from_triple(triple)
    except RuntimeError:
        raise TargetError(
            f"unknown -target '{triple}': LLVM has no backend for it; "
            f"available: {', '.join(available_targets())}") from None


def _raise_for_llvm_messages(text: str, triple: str, cpu: str,
                             what_cpu: str = "-mcpu") -> None:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return
    for ln in lines:
        m = _RE_BAD_CPU.search(ln)
        if m:
            bad = m.group(1)
            cpus = llvm_help(triple)[0]
            listing = ", ".join(cpus) if cpus else "(LLVM gave no list)"
            raise TargetError(
                f"{what_cpu}={bad} is not a recognized processor for "
                f"{triple}{suggest(bad, cpus)}; valid CPUs: {listing}")
    for ln in lines:
        m = _RE_BAD_FEATURE.search(ln)
        if m:
            bad = m.group(1)
            name = bad.lstrip("+-")
            feats = llvm_help(triple)[1]
            raise TargetError(
                f"-mattr feature '{bad}' is not a recognized feature for "
                f"{triple}{suggest(name, feats)}; valid features (prefix "
                f"with + or -): {feature_list_text(triple)}")
    raise TargetError(f"LLVM rejected the target options for {triple} "
                      f"(cpu {cpu}): {' | '.join(lines)}")


def create_tm(triple, cpu, features, opt=3, reloc="static",
              codemodel="small", abi="", probe_ir=None, what_cpu="-mcpu"):
    """Create a target machine, turning LLVM's stderr warnings into errors.

    If probe_ir is given it is compiled to assembly with the new machine and
    the assembly text is returned too (ARM build attributes and the .fpu
    directive, RISC-V ISA string: what LLVM really made of cpu + features).
    """
    if cpu == "help" or any(f.lstrip("+-") in ("help", "cpuhelp")
                            for f in split_features(features)):
        cpus, feats = llvm_help(triple)
        raise TargetError(f"help requested for {triple}: CPUs: "
                          f"{', '.join(cpus)}; features: {', '.join(feats)}")
    target = get_target(triple)
    sink: list = []
    err = None
    with capture_fd2(sink):
        try:
            tm = target.create_target_machine(
                cpu=cpu, features=features, opt=opt, reloc=reloc,
                codemodel=codemodel, abiname=abi)
        except RuntimeError as exc:
            tm, err = None, exc
    # Unknown CPUs/features must be rejected before anything is compiled: some
    # backends hit fatal errors with them (x86-64 with an unknown CPU exits the
    # process with "64-bit code requested on a subtarget that doesn't support it").
    _raise_for_llvm_messages("".join(sink), triple, cpu, what_cpu)
    if tm is None:
        raise TargetError(f"LLVM cannot create a target machine for {triple} "
                          f"(cpu {cpu}, features '{features}'): {err}")
    asm = None
    if probe_ir is not None:
        # Not captured on purpose: with validated CPU and features LLVM prints
        # nothing here, and should a backend still hit a fatal error (it calls
        # exit()), its message must reach the user instead of a temp file.
        try:
            mod = llvm.parse_assembly(probe_ir)
            mod.triple = triple
            mod.data_layout = str(tm.target_data)
            asm = tm.emit_assembly(mod)
        except RuntimeError as exc:
            raise TargetError(f"LLVM cannot compile for {triple} (cpu {cpu}, "
                              f"features '{features}'): {exc}") from None
    return tm, asm
