"""resolve_target: Glow-style target options (-target, -mcpu, -march, -mattr, -float-abi,
-relocation-model, -code-model) -> a validated TargetSpec. The ARM and RISC-V rules live in
arm.py and riscv.py; every other architecture is resolved here."""
from __future__ import annotations

import re

import llvmlite.binding as llvm

from glowpy.codegen.target.arm import resolve_arm
from glowpy.codegen.target.caps import arm_fpu_from_asm
from glowpy.codegen.target.listing import available_targets
from glowpy.codegen.target.llvm_setup import initialize_llvm
from glowpy.codegen.target.machine import PROBE_FP_IR, create_tm, get_target
from glowpy.codegen.target.options import CODE_MODELS, FLOAT_ABIS, RELOCATION_MODELS, \
    TargetError, check_choice, check_name, join_features, parse_mattr, split_features
from glowpy.codegen.target.riscv import resolve_riscv
from glowpy.codegen.target.spec import TargetSpec
from glowpy.codegen.target.triples import ARM_FAMILIES, SHORT_NAMES, host_triple, is_arch, \
    normalize_triple, parts


def resolve_target(target=None, mcpu=None, march=None, mattr=None,
                   float_abi=None, relocation_model="static",
                   code_model="small") -> TargetSpec:
    """Resolve Glow-style target options into a validated :class:`TargetSpec`.

    target: a full LLVM triple (normalized here) or a short architecture name
        (arm, thumb, aarch64/arm64, riscv32, riscv64, x86_64, x86/i386/i686, or
        any other LLVM architecture name); None means the host.
    mcpu: CPU name (validated against LLVM's list).
    march: architecture: ARM ``armv7e-m``/``armv8-a``/..., AArch64
        ``armv8.2-a``, RISC-V ``rv32imac``; for other targets a CPU name.
    mattr: LLVM features, "+a,-b" or a list of them (validated).
    float_abi: soft | hard | default (or None), plus ARM softfp.
    """
    initialize_llvm()
    for value, option in ((target, "-target"), (mcpu, "-mcpu"), (march, "-march")):
        check_name(value, option)
    fa = check_choice(float_abi, FLOAT_ABIS, "-float-abi")
    reloc = check_choice(relocation_model or "static", RELOCATION_MODELS,
                         "-relocation-model")
    cmodel = check_choice(code_model or "small", CODE_MODELS, "-code-model")
    user_feats = parse_mattr(mattr)
    mcpu = mcpu.strip() if isinstance(mcpu, str) and mcpu.strip() else None
    march = march.strip() if isinstance(march, str) and march.strip() else None

    host = target is None or (isinstance(target, str) and target.strip() in ("", "host", "native"))
    if host:
        comps = host_triple().split("-")
        short = False
    else:
        name = str(target).strip()
        if "-" not in name:
            short = True
            if name in SHORT_NAMES:
                comps = list(SHORT_NAMES[name][:4])
            elif is_arch(name):
                if parts(name).Arch in ARM_FAMILIES:
                    comps = [name, "unknown", "none", "eabi"]
                else:
                    comps = [name, "unknown", "unknown", "unknown"]
            else:
                raise TargetError(
                    f"unknown -target '{name}'; available: "
                    f"{', '.join(available_targets())} (or a full LLVM triple)")
        else:
            short = False
            comps = normalize_triple(name).split("-")
            if parts("-".join(comps)).Arch == "unknown":
                raise TargetError(
                    f"-target={name}: unknown architecture '{name.split('-')[0]}'; "
                    f"available: {', '.join(available_targets())}")
    family = parts("-".join(comps)).Arch
    get_target("-".join(comps))  # is the backend compiled in?

    abi = ""
    if family in ARM_FAMILIES:
        triple, cpu, feats, resolved_fa, abi = resolve_arm(
            comps, short, mcpu, march, user_feats, fa)
    elif family in ("riscv32", "riscv64"):
        triple, cpu, feats, resolved_fa, abi = resolve_riscv(
            comps, short, mcpu, march, user_feats, fa, family)
    else:
        triple = "-".join(comps)
        feats = list(user_feats)
        if family in ("aarch64", "aarch64_be"):
            default_cpu = "generic"
            if march:
                mm = re.fullmatch(r"(?:arm)?v(\d+)(?:\.(\d+))?-?a", march.lower())
                if not mm:
                    raise TargetError(
                        f"-march={march} is not an AArch64 architecture "
                        f"(expected e.g. armv8-a, armv8.2-a, armv9-a)")
                major, minor = mm.group(1), mm.group(2)
                minor = f".{minor}" if minor and minor != "0" else ""
                feats = [f"+v{major}{minor}a"] + feats
        else:
            default_cpu = {"x86_64": "x86-64", "i386": "i686"}.get(family, "generic")
            if short and target in SHORT_NAMES:
                default_cpu = SHORT_NAMES[target][4]
            if march:
                if mcpu and mcpu != march:
                    raise TargetError(
                        f"-march={march} and -mcpu={mcpu}: for {family} -march "
                        f"names a CPU; give only one of them")
                mcpu = march
        if host:
            cpu = mcpu or llvm.get_host_cpu_name()
            if mcpu is None:
                try:
                    host_feats = split_features(llvm.get_host_cpu_features().flatten())
                except RuntimeError:
                    host_feats = []
                feats = host_feats + feats
        else:
            cpu = mcpu or default_cpu
        if fa in (None, "default"):
            resolved_fa = "default"
        elif fa == "hard" and family in ("aarch64", "aarch64_be", "x86_64", "i386"):
            resolved_fa = "hard"  # floating point is passed in FP/SIMD registers already
        else:
            raise TargetError(
                f"-float-abi={fa} is not supported for {family}; only ARM and "
                f"RISC-V targets have a selectable float ABI (use default)")

    spec = TargetSpec(triple=triple, cpu=cpu, features=join_features(feats),
                      float_abi=resolved_fa, relocation_model=reloc,
                      code_model=cmodel, abi=abi)
    _validate(spec, explicit_fa=fa)
    return spec


def _validate(spec: TargetSpec, explicit_fa) -> None:
    """Create the machine and compile a probe; check the float ABI took effect."""
    family = spec.arch
    probe = PROBE_FP_IR if family in ARM_FAMILIES else None
    _, asm = create_tm(spec.triple, spec.cpu, spec.features, opt=2,
                       reloc=spec.relocation_model, codemodel=spec.code_model,
                       abi=spec.abi, probe_ir=probe)
    if family in ARM_FAMILIES:
        fpu = arm_fpu_from_asm(asm)
        if spec.float_abi == "hard" and fpu is None:
            raise TargetError(
                f"-float-abi=hard needs an FPU, but -mcpu={spec.cpu} (features "
                f"'{spec.features}') has none; use -float-abi=soft or a CPU "
                f"with an FPU (e.g. cortex-m4, cortex-m7, cortex-m33)")
        if spec.float_abi == "soft" and fpu is not None:  # pragma: no cover
            raise TargetError(f"-float-abi=soft: LLVM still uses the {fpu} FPU "
                              f"for {spec.cpu}")


def host_target() -> TargetSpec:
    """The host: process triple, host CPU name and host CPU features."""
    return resolve_target()
