"""What this LLVM offers: its backends, and per target the CPU and feature names.

The CPU and feature lists come from LLVM itself (``-mcpu=help``) in a child process, because
LLVM prints that help only once per process."""
from __future__ import annotations

import functools
import subprocess
import sys

import llvmlite.binding as llvm

from glowpy.codegen.target.llvm_setup import initialize_llvm
from glowpy.codegen.target.triples import ARCH_CANDIDATES, SHORT_NAMES, host_triple, \
    normalize_triple


@functools.lru_cache(maxsize=None)
def available_targets() -> tuple:
    """Architecture names accepted by ``-target`` with this llvmlite's LLVM."""
    initialize_llvm()
    names = []
    for arch in ARCH_CANDIDATES:
        try:
            llvm.Target.from_triple(arch + "-unknown-unknown")
        except RuntimeError:
            continue
        names.append(arch)
    for short, full in SHORT_NAMES.items():
        if full[0] in names and short not in names:
            names.append(short)
    return tuple(sorted(names))


_HELP_SCRIPT = (
    "import sys\n"
    "import llvmlite.binding as llvm\n"
    "llvm.initialize_all_targets()\n"
    "llvm.Target.from_triple(sys.argv[1]).create_target_machine(cpu='help')\n"
)


@functools.lru_cache(maxsize=None)
def llvm_help(triple: str):
    """(CPU names, feature names) LLVM lists for the triple."""
    try:
        proc = subprocess.run([sys.executable, "-c", _HELP_SCRIPT, triple],
                              capture_output=True, text=True, timeout=120)
        text = proc.stderr + proc.stdout
    except (OSError, subprocess.SubprocessError):
        return (), ()
    cpus, feats, section = [], [], None
    for line in text.splitlines():
        if line.startswith("Available CPUs"):
            section = cpus
        elif line.startswith("Available features"):
            section = feats
        elif section is not None and line.startswith("  "):
            name = line.split(" - ")[0].strip()
            if name:
                section.append(name)
        elif line.strip() and section is feats and feats:
            section = None
    return tuple(cpus), tuple(feats)


def available_cpus(target: str | None = None) -> tuple:
    """CPU names LLVM knows for the target (a triple or short name)."""
    triple = _triple_for_listing(target)
    return llvm_help(triple)[0]


def available_features(target: str | None = None) -> tuple:
    """Feature names (without +/-) LLVM knows for the target."""
    triple = _triple_for_listing(target)
    return llvm_help(triple)[1]


def _triple_for_listing(target):
    if target is None:
        return host_triple()
    if "-" not in target:
        if target in ("arm", "thumb", "armeb", "thumbeb"):
            return f"{target}-unknown-none-eabi"
        if target in SHORT_NAMES:
            a, v, o, e, _ = SHORT_NAMES[target]
            return f"{a}-{v}-{o}-{e}"
        return f"{target}-unknown-unknown-unknown"
    return normalize_triple(target)


def feature_list_text(triple):
    feats = llvm_help(triple)[1]
    return ", ".join(feats) if feats else "(LLVM gave no list)"
