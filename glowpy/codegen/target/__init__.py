"""Target selection: Glow-style target options -> TargetSpec -> an LLVM target machine, and
what the target offers the kernels (caps.py).

    triples.py     triple normalization, short names (-target=arm, x86_64, riscv32 ...)
    options.py     TargetError, the accepted choices, -mattr parsing
    llvm_setup.py  LLVM target registration, capture of LLVM's stderr warnings
    listing.py     backends, CPU and feature names of this LLVM (-mcpu=help in a child)
    machine.py     validated target machines, probe functions compiled with them
    caps.py        TargetCaps: what the target offers the kernels, read from what LLVM made
                   of CPU + features (the only place that reads the probes' assembly)
    spec.py        TargetSpec (triple, cpu, features, float ABI, relocation/code model)
    arm.py, riscv.py  the ARM and RISC-V rules (sub-architecture, float ABI)
    resolve.py     resolve_target, host_target

It imports only llvmlite and the standard library."""
from glowpy.codegen.target.listing import available_cpus, available_features, \
    available_targets
from glowpy.codegen.target.llvm_setup import initialize_llvm
from glowpy.codegen.target.options import CODE_MODELS, FLOAT_ABIS, RELOCATION_MODELS, \
    TargetError
from glowpy.codegen.target.caps import TargetCaps, caps_of
from glowpy.codegen.target.resolve import host_target, resolve_target
from glowpy.codegen.target.spec import TargetSpec
from glowpy.codegen.target.triples import normalize_triple

__all__ = [
    "TargetError",
    "TargetSpec",
    "TargetCaps",
    "caps_of",
    "resolve_target",
    "host_target",
    "initialize_llvm",
    "normalize_triple",
    "available_targets",
    "available_cpus",
    "available_features",
    "FLOAT_ABIS",
    "RELOCATION_MODELS",
    "CODE_MODELS",
]
