"""RISC-V target resolution: -march ISA strings as LLVM features, and the float ABI as LLVM's
ABI name (``ilp32``/``ilp32f``/``ilp32d``, ``lp64``/``lp64f``/``lp64d``), passed as the target
machine's ``abiname``."""
from __future__ import annotations

import re

from glowpy.codegen.target.caps import probe_asm, riscv_extensions
from glowpy.codegen.target.options import TargetError, join_features, split_features
from glowpy.codegen.target.spec import TargetSpec

# Default -march for riscv short names when neither -mcpu, -march nor -mattr is
# given: what the usual GNU toolchains default to.
_RISCV_SHORT_DEFAULT_FEATURES = {
    "riscv32": "+m,+a,+c",          # rv32imac, ilp32 (bare metal)
    "riscv64": "+m,+a,+f,+d,+c",    # rv64gc, lp64d (Linux)
}


def _riscv_march_features(march: str, xlen: int):
    m = march.strip().lower()
    mm = re.fullmatch(r"rv(32|64)([a-z0-9_]*)", m)
    if not mm:
        raise TargetError(f"-march={march} is not a RISC-V ISA string "
                          f"(expected e.g. rv{xlen}imac or rv{xlen}gc_zba)")
    if int(mm.group(1)) != xlen:
        raise TargetError(f"-march={march} is rv{mm.group(1)} but the target "
                          f"is riscv{xlen}")
    body = mm.group(2)
    head, *multi = body.split("_")
    head = re.sub(r"\d+(p\d+)?", "", head)  # drop version numbers (2p1)
    if not head or head[0] not in "ieg":
        raise TargetError(f"-march={march}: the ISA string must start with "
                          f"rv{xlen}i, rv{xlen}e or rv{xlen}g")
    feats = []
    for ch in head:
        if ch == "i":
            continue
        if ch == "g":
            feats += ["+m", "+a", "+f", "+d", "+zicsr", "+zifencei"]
        else:
            feats.append("+" + ch)
    for ext in multi:
        ext = re.sub(r"\d+(p\d+)?$", "", ext)
        if ext:
            feats.append("+" + ext)
    return feats


def resolve_riscv(comps, short, cpu, march, user_feats, fa, family):
    xlen = 32 if family == "riscv32" else 64
    cpu = cpu or f"generic-rv{xlen}"
    triple = "-".join(comps)
    base_feats = []
    if march:
        base_feats = _riscv_march_features(march, xlen)
    elif short and cpu == f"generic-rv{xlen}":
        base_feats = split_features(_RISCV_SHORT_DEFAULT_FEATURES[family])
    feats = base_feats + list(user_feats)
    if fa is None and short:
        fa = "hard" if xlen == 64 else "soft"
    if fa in (None, "default"):
        return triple, cpu, feats, "default", ""
    if fa == "softfp":
        raise TargetError("-float-abi=softfp is an ARM float ABI; RISC-V "
                          "takes soft, hard or default")
    trial = TargetSpec(triple, cpu, join_features(feats), "default", "static", "small")
    exts = riscv_extensions(probe_asm(trial))
    embedded = "e" in exts and "i" not in exts
    prefix = "ilp32" if xlen == 32 else "lp64"
    if fa == "soft":
        return triple, cpu, feats, "soft", prefix + ("e" if embedded else "")
    # hard
    if "d" in exts:
        return triple, cpu, feats, "hard", prefix + "d"
    if "f" in exts:
        return triple, cpu, feats, "hard", prefix + "f"
    raise TargetError(
        f"-float-abi=hard needs the F or D extension, but {cpu} with features "
        f"'{join_features(feats)}' has no FPU; add -mattr=+f or +d, or use "
        f"-float-abi=soft")
