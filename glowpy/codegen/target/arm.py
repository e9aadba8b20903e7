"""ARM (32-bit) target resolution: the sub-architecture a CPU or -march implies, and the float
ABI.

LLVM's ARM backend uses the hard-float calling convention and emits ``Tag_ABI_VFP_args``
exactly when the triple environment is ``*eabihf`` (llvmlite does not expose
``TargetOptions``). ``hard`` therefore rewrites the environment to ``eabihf``/``gnueabihf``
(resolve.py checks that the CPU has FP registers), ``soft`` rewrites it to ``eabi``/``gnueabi``
and adds ``-fpregs,+soft-float`` so that no FPU instruction is emitted (GCC's
``-mfloat-abi=soft``: the object links into and runs on firmware built without FPU support).
``softfp`` (GCC's name; LLVM's own ``soft``) keeps the base calling convention but lets the
CPU's FPU be used."""
from __future__ import annotations

import re

from glowpy.codegen.target.caps import TAG_CPU_ARCH, TAG_CPU_ARCH_PROFILE, arm_attributes, \
    arm_fpu_from_asm, probe_asm
from glowpy.codegen.target.listing import llvm_help
from glowpy.codegen.target.machine import PROBE_INT_IR, create_tm
from glowpy.codegen.target.options import TargetError, join_features, suggest
from glowpy.codegen.target.spec import TargetSpec
from glowpy.codegen.target.triples import parts

# Tag_CPU_arch (ARM build attribute 6) -> triple sub-architecture.
_ARM_TAG_SUBARCH = {
    1: "v4", 2: "v4t", 3: "v5t", 4: "v5te", 5: "v5tej", 6: "v6", 7: "v6kz",
    8: "v6t2", 9: "v6k", 11: "v6m", 12: "v6m", 13: "v7em", 14: "v8a",
    15: "v8r", 16: "v8m.base", 17: "v8m.main", 18: "v8.1a", 19: "v8.2a",
    20: "v8.3a", 21: "v8.1m.main", 22: "v9a",
}


def _arm_cpu_arch(cpu: str, features: str):
    """(sub-architecture, profile letter) LLVM assigns to an ARM CPU.

    Read from the build attributes LLVM writes for that CPU (Tag_CPU_arch and
    Tag_CPU_arch_profile), so every CPU LLVM knows is covered.
    """
    _, asm = create_tm("thumb-unknown-none-eabi", cpu, features, opt=0,
                       probe_ir=PROBE_INT_IR)
    attrs = arm_attributes(asm)
    profile = chr(attrs[TAG_CPU_ARCH_PROFILE]) if TAG_CPU_ARCH_PROFILE in attrs else ""
    value = attrs.get(TAG_CPU_ARCH)
    if value is None:
        return None, profile
    if value == 10:  # v7: the profile decides
        return {"M": "v7m", "R": "v7r"}.get(profile, "v7a"), profile or "A"
    return _ARM_TAG_SUBARCH.get(value), profile


def _arm_profile_of_subarch(sub: str) -> str:
    if re.search(r"m(\.main|\.base)?$", sub):
        return "M"
    if sub.endswith("r"):
        return "R"
    return "A"


def _arm_march(march: str, triple_for_errors: str):
    """-march=armv7e-m -> ('v7em', 'M'); validated against LLVM."""
    m = march.strip().lower()
    # LLVM knows architectures as ARM features named like armv7e-m.
    feature = m if m.startswith("arm") else "arm" + m
    if "-" not in feature:
        # armv7em / armv8m.main style: insert the dash LLVM's feature name has
        mm = re.fullmatch(r"armv(\d+(?:\.\d+)?)(e?)([amr])(\.main|\.base)?", feature)
        if mm:
            feature = f"armv{mm.group(1)}{mm.group(2)}-{mm.group(3)}{mm.group(4) or ''}"
    try:
        create_tm(triple_for_errors, "generic", "+" + feature)
    except TargetError:
        arches = [f for f in llvm_help(triple_for_errors)[1]
                  if re.fullmatch(r"armv[\d.]+[a-z]*-[amr](\.main|\.base)?", f)]
        raise TargetError(
            f"-march={march} is not an ARM architecture LLVM knows"
            f"{suggest(feature, arches)}; valid: {', '.join(arches)}") from None
    sub = feature[3:].replace("-", "")          # v7e-m -> v7em, v8.1-m.main -> v8.1m.main
    return sub, _arm_profile_of_subarch(sub)


def resolve_arm(comps, short, cpu, march, user_feats, fa):
    m = re.fullmatch(r"(arm|thumb)(eb)?(v\d.*)?", comps[0])
    if m:  # llvm.get_triple_parts loses the sub-architecture of e.g. armv6m (parsed as thumb)
        family, sub = m.group(1) + (m.group(2) or ""), m.group(3) or ""
    else:
        p = parts("-".join(comps))
        family, sub = p.Arch, p.SubArch
    cpu = cpu or "generic"
    probe_triple = f"{family}-unknown-none-eabi"
    create_tm(probe_triple, cpu, join_features(user_feats))  # validates cpu/mattr early
    profile = None
    if march:
        sub, profile = _arm_march(march, probe_triple)
    elif sub:
        pass  # the triple names the sub-architecture
    elif cpu != "generic":
        sub, profile = _arm_cpu_arch(cpu, join_features(user_feats))
        sub = sub or ""
    if not profile or profile not in "AMR":
        profile = _arm_profile_of_subarch(sub) if sub else "A"
    # M-profile cores execute only Thumb.
    if profile == "M" and family in ("arm", "armeb"):
        family = "thumbeb" if family == "armeb" else "thumb"
    arch = family + sub

    if short:
        vendor, os_ = "unknown", ("linux" if profile == "A" and (sub or cpu != "generic") else "none")
        env = "gnueabi" if os_ == "linux" else "eabi"
    else:
        vendor, os_, env = comps[1], comps[2], comps[3]
    triple_env_hard = env.endswith("hf")

    def with_env(hard: bool) -> str:
        e = env
        if e.endswith("hf"):
            e = e[:-2]
        if e in ("unknown", ""):
            e = "gnueabi" if os_ == "linux" else "eabi"
        if not e.endswith("eabi"):
            raise TargetError(
                f"-float-abi={fa}: the environment '{env}' of the triple has no "
                f"{'hard' if hard else 'soft'}-float variant; use an *eabi or "
                f"*eabihf environment")
        return f"{arch}-{vendor}-{os_}-{e}{'hf' if hard else ''}"

    soft_feats = ["-fpregs", "+soft-float"]
    if fa in (None, "default"):
        if triple_env_hard:
            resolved, triple, feats = "hard", with_env(True), list(user_feats)
        elif short and profile == "A":
            # Linux-style A-profile default: hard float when the CPU has an FPU.
            trial = TargetSpec(with_env(False), cpu, join_features(user_feats),
                               "default", "static", "small")
            if arm_fpu_from_asm(probe_asm(trial)):
                resolved, triple = "hard", with_env(True)
            else:
                resolved, triple = "default", with_env(False)
            feats = list(user_feats)
        else:
            resolved, triple, feats = "default", f"{arch}-{vendor}-{os_}-{env}", list(user_feats)
    elif fa == "hard":
        resolved, triple, feats = "hard", with_env(True), list(user_feats)
    elif fa == "softfp":
        resolved, triple, feats = "softfp", with_env(False), list(user_feats)
    else:  # soft
        resolved, triple, feats = "soft", with_env(False), list(user_feats) + soft_feats
    return triple, cpu, feats, resolved, ""
