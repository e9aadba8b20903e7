"""Target triples: normalization to LLVM's four components and the short names -target takes.

Triples are normalized with a port of ``llvm::Triple::normalize`` (llvmlite does not export
it); component classification is delegated to LLVM's own parser through
``llvm.get_triple_parts``. A three-part triple such as ``thumbv7em-none-eabihf`` is misread by
LLVM's ``Triple`` constructor (the environment is lost, and with it the hard-float build
attributes), so every triple is normalized to four components."""
from __future__ import annotations

import functools

import llvmlite.binding as llvm

ARM_FAMILIES = ("arm", "armeb", "thumb", "thumbeb")

_OBJECT_FORMATS = {"elf", "coff", "macho", "wasm", "xcoff", "goff", "spirv",
                   "dxcontainer"}


@functools.lru_cache(maxsize=None)
def parts(triple: str):
    """LLVM's reading of a triple (Arch, SubArch, Vendor, OS, Env)."""
    return llvm.get_triple_parts(triple)


def is_arch(c: str) -> bool:
    return bool(c) and parts(c).Arch != "unknown"


def _is_vendor(c: str) -> bool:
    return bool(c) and not is_arch(c) and parts(c).Vendor != "unknown"


def _is_os(c: str) -> bool:
    if not c:
        return False
    if c.startswith(("cygwin", "msys", "mingw")):
        return True
    return not is_arch(c) and not _is_vendor(c) and parts(c).OS != "unknown"


def _is_env(c: str) -> bool:
    if not c:
        return False
    if c.lower() in _OBJECT_FORMATS:
        return True
    return (not is_arch(c) and not _is_vendor(c) and not _is_os(c)
            and parts(c).Env != "unknown")


_CLASSIFIERS = (is_arch, _is_vendor, _is_os, _is_env)


def normalize_triple(triple: str) -> str:
    """Normalize a target triple to LLVM's canonical four-component form.

    This is a port of ``llvm::Triple::normalize`` (components are permuted into
    arch-vendor-os-environment order, missing ones become ``unknown``, a
    middle ``none`` of a three-part triple is the OS), padded to four
    components: ``thumbv7em-none-eabihf`` -> ``thumbv7em-unknown-none-eabihf``,
    ``x86_64-linux-gnu`` -> ``x86_64-unknown-linux-gnu``.
    """
    comps = triple.strip().split("-")
    found = [i < len(comps) and _CLASSIFIERS[i](comps[i]) for i in range(4)]
    for pos in range(4):
        if found[pos]:
            continue
        for idx in range(len(comps)):
            if idx < 4 and found[idx]:
                continue
            comp = comps[idx]
            if not _CLASSIFIERS[pos](comp):
                continue
            if pos < idx:
                # Insert left, pushing the non-fixed components to the right.
                cur = comp
                comps[idx] = ""
                i = pos
                while cur:
                    while i < 4 and found[i]:
                        i += 1
                    if i >= len(comps):
                        comps.append("")
                    cur, comps[i] = comps[i], cur
                    i += 1
            elif pos > idx:
                # Push right by inserting empty components.
                while idx < pos:
                    cur = ""
                    i = idx
                    while i < len(comps):
                        cur, comps[i] = comps[i], cur
                        if not cur:
                            break
                        i += 1
                        while i < 4 and found[i]:
                            i += 1
                    if cur:
                        comps.append(cur)
                    idx += 1
                    while idx < 4 and found[idx]:
                        idx += 1
            found[pos] = True
            break
    while len(comps) < 4:
        comps.append("")
    if (found[0] and not found[1] and not found[2] and found[3]
            and comps[1] == "none" and comps[2] == ""):
        comps[1], comps[2] = comps[2], comps[1]
    comps = [c if c else "unknown" for c in comps]
    return "-".join(comps)


def host_triple() -> str:
    return normalize_triple(llvm.get_process_triple())


# Architecture names probed to list the targets this LLVM was built with.
ARCH_CANDIDATES = (
    "aarch64", "aarch64_be", "arm", "armeb", "thumb", "thumbeb", "x86_64",
    "i386", "i686", "riscv32", "riscv64", "mips", "mipsel", "mips64",
    "mips64el", "powerpc", "powerpcle", "powerpc64", "powerpc64le", "sparc",
    "sparcv9", "sparcel", "s390x", "wasm32", "wasm64", "nvptx", "nvptx64",
    "amdgcn", "r600", "avr", "msp430", "hexagon", "bpfel", "bpfeb", "lanai",
    "ve", "xcore", "loongarch32", "loongarch64", "spirv", "spirv32",
    "spirv64", "m68k", "csky", "arc", "xtensa",
)

# Short names (no '-') with a conventional full triple and default CPU.
# arm/thumb are handled separately (the CPU decides the sub-architecture).
SHORT_NAMES = {
    "aarch64": ("aarch64", "unknown", "linux", "gnu", "generic"),
    "arm64": ("aarch64", "unknown", "linux", "gnu", "generic"),
    "aarch64_be": ("aarch64_be", "unknown", "linux", "gnu", "generic"),
    "riscv32": ("riscv32", "unknown", "none", "elf", "generic-rv32"),
    "riscv64": ("riscv64", "unknown", "linux", "gnu", "generic-rv64"),
    "x86_64": ("x86_64", "unknown", "linux", "gnu", "x86-64"),
    "amd64": ("x86_64", "unknown", "linux", "gnu", "x86-64"),
    "x86": ("i686", "unknown", "linux", "gnu", "i686"),
    "i386": ("i386", "unknown", "linux", "gnu", "i386"),
    "i686": ("i686", "unknown", "linux", "gnu", "i686"),
}
