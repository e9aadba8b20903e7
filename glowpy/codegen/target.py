"""Target selection: Glow-style target options -> an LLVM target machine.

This module turns the command-line options ``-target``, ``-mcpu``, ``-march``,
``-mattr``, ``-float-abi``, ``-relocation-model`` and ``-code-model`` into a
:class:`TargetSpec` (a fully normalized triple plus CPU, features and ABI) and
creates the llvmlite ``TargetMachine`` for it.  It imports only llvmlite and
the standard library.

How the pieces map onto LLVM (llvmlite does not expose ``TargetOptions``):

* The ARM float ABI is chosen by the triple environment: LLVM's ARM backend
  uses the hard-float calling convention and emits ``Tag_ABI_VFP_args`` exactly
  when the environment is ``*eabihf``.  ``hard`` therefore rewrites the
  environment to ``eabihf``/``gnueabihf`` (and checks that the CPU has FP
  registers), ``soft`` rewrites it to ``eabi``/``gnueabi`` and adds
  ``-fpregs,+soft-float`` so that no FPU instruction is emitted (GCC's
  ``-mfloat-abi=soft``: the object links into and runs on firmware built
  without FPU support).  ``softfp`` (GCC's name; LLVM's own ``soft``) keeps the
  base calling convention but lets the CPU's FPU be used.
* RISC-V float ABIs are LLVM ABI names (``ilp32``/``ilp32f``/``ilp32d``,
  ``lp64``/``lp64f``/``lp64d``), passed as the target machine's ``abiname``.
* LLVM reports an unknown CPU or feature only as a warning on stderr and then
  ignores it.  We capture file descriptor 2 while creating the target machine
  and turn every such message into a :class:`TargetError`.  What LLVM really
  made of CPU + features (ARM architecture and FPU, RISC-V ISA string) is read
  from the assembly of a small probe function.  The lists of valid CPUs and features are obtained from
  LLVM itself (``-mcpu=help``) in a child process, because LLVM prints that
  help only once per process.
* Triples are normalized with a port of ``llvm::Triple::normalize`` (llvmlite
  does not export it); component classification is delegated to LLVM's own
  parser through ``llvm.get_triple_parts``.  A three-part triple such as
  ``thumbv7em-none-eabihf`` is misread by LLVM's ``Triple`` constructor (the
  environment is lost, and with it the hard-float build attributes), so every
  triple is normalized to four components.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import os
import re
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass

import llvmlite.binding as llvm

__all__ = [
    "TargetError",
    "TargetSpec",
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


class TargetError(Exception):
    """A target option is wrong.

    The message is one line and user-facing: it says which option is wrong and
    what is available.
    """


FLOAT_ABIS = ("default", "soft", "softfp", "hard")
RELOCATION_MODELS = ("static", "pic")
CODE_MODELS = ("small", "kernel", "medium", "large", "default")

# --------------------------------------------------------------------------
# LLVM initialization


_init_lock = threading.Lock()
_initialized = False


def initialize_llvm() -> None:
    """Register all targets, their MC layers and asm printers (idempotent).

    llvmlite 0.50 initializes the LLVM core by itself (``llvm.initialize()``
    now raises), but targets and asm printers must still be registered before
    ``Target.from_triple`` and object emission work for non-native targets.
    """
    global _initialized
    if _initialized:
        return
    with _init_lock:
        if not _initialized:
            llvm.initialize_all_targets()
            llvm.initialize_all_asmprinters()
            _initialized = True


# --------------------------------------------------------------------------
# stderr capture (LLVM writes its warnings to file descriptor 2)


_capture_lock = threading.RLock()
@contextlib.contextmanager
def _capture_fd2(sink: list):
    """Redirect file descriptor 2 into a temporary file; append its text to sink."""
    with _capture_lock:
        try:
            sys.stderr.flush()
        except Exception:  # pragma: no cover - exotic stderr replacements
            pass
        with tempfile.TemporaryFile() as tmp:
            saved = os.dup(2)
            try:
                os.dup2(tmp.fileno(), 2)
                try:
                    yield
                finally:
                    os.dup2(saved, 2)
            finally:
                os.close(saved)
            tmp.seek(0)
            sink.append(tmp.read().decode("utf-8", errors="replace"))


# --------------------------------------------------------------------------
# Triples


_OBJECT_FORMATS = {"elf", "coff", "macho", "wasm", "xcoff", "goff", "spirv",
                   "dxcontainer"}


@functools.lru_cache(maxsize=None)
def _parts(triple: str):
    return llvm.get_triple_parts(triple)


def _is_arch(c: str) -> bool:
    return bool(c) and _parts(c).Arch != "unknown"


def _is_vendor(c: str) -> bool:
    return bool(c) and not _is_arch(c) and _parts(c).Vendor != "unknown"


def _is_os(c: str) -> bool:
    if not c:
        return False
    if c.startswith(("cygwin", "msys", "mingw")):
        return True
    return not _is_arch(c) and not _is_vendor(c) and _parts(c).OS != "unknown"


def _is_env(c: str) -> bool:
    if not c:
        return False
    if c.lower() in _OBJECT_FORMATS:
        return True
    return (not _is_arch(c) and not _is_vendor(c) and not _is_os(c)
            and _parts(c).Env != "unknown")


_CLASSIFIERS = (_is_arch, _is_vendor, _is_os, _is_env)


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


# Architecture names probed to list the targets this LLVM was built with.
_ARCH_CANDIDATES = (
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
_SHORT_NAMES = {
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

# Default -march for riscv short names when neither -mcpu, -march nor -mattr is
# given: what the usual GNU toolchains default to.
_RISCV_SHORT_DEFAULT_FEATURES = {
    "riscv32": "+m,+a,+c",          # rv32imac, ilp32 (bare metal)
    "riscv64": "+m,+a,+f,+d,+c",    # rv64gc, lp64d (Linux)
}


@functools.lru_cache(maxsize=None)
def available_targets() -> tuple:
    """Architecture names accepted by ``-target`` with this llvmlite's LLVM."""
    initialize_llvm()
    names = []
    for arch in _ARCH_CANDIDATES:
        try:
            llvm.Target.from_triple(arch + "-unknown-unknown")
        except RuntimeError:
            continue
        names.append(arch)
    for short, full in _SHORT_NAMES.items():
        if full[0] in names and short not in names:
            names.append(short)
    return tuple(sorted(names))


def _get_target(triple: str):
    initialize_llvm()
    try:
        return llvm.Target.from_triple(triple)
    except RuntimeError:
        raise TargetError(
            f"unknown -target '{triple}': LLVM has no backend for it; "
            f"available: {', '.join(available_targets())}") from None


# --------------------------------------------------------------------------
# CPU / feature lists (from LLVM's own -mcpu=help, in a child process)

_HELP_SCRIPT = (
    "import sys\n"
    "import llvmlite.binding as llvm\n"
    "llvm.initialize_all_targets()\n"
    "llvm.Target.from_triple(sys.argv[1]).create_target_machine(cpu='help')\n"
)


@functools.lru_cache(maxsize=None)
def _llvm_help(triple: str):
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
    return _llvm_help(triple)[0]


def available_features(target: str | None = None) -> tuple:
    """Feature names (without +/-) LLVM knows for the target."""
    triple = _triple_for_listing(target)
    return _llvm_help(triple)[1]


def _triple_for_listing(target):
    if target is None:
        return normalize_triple(llvm.get_process_triple())
    if "-" not in target:
        if target in ("arm", "thumb", "armeb", "thumbeb"):
            return f"{target}-unknown-none-eabi"
        if target in _SHORT_NAMES:
            a, v, o, e, _ = _SHORT_NAMES[target]
            return f"{a}-{v}-{o}-{e}"
        return f"{target}-unknown-unknown-unknown"
    return normalize_triple(target)


def _suggest(word: str, choices) -> str:
    close = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def _feature_list_text(triple):
    feats = _llvm_help(triple)[1]
    return ", ".join(feats) if feats else "(LLVM gave no list)"


# --------------------------------------------------------------------------
# Target machine creation with validation


_PROBE_INT_IR = """
define i32 @glowpy_target_probe(i32 %a, i32 %b) {
  %r = add i32 %a, %b
  ret i32 %r
}
"""

_PROBE_FP_IR = """
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

_RE_BAD_CPU = re.compile(r"'([^']*)' is not a recognized processor")
_RE_BAD_FEATURE = re.compile(r"'([^']*)' is not a recognized feature")


def _raise_for_llvm_messages(text: str, triple: str, cpu: str,
                             what_cpu: str = "-mcpu") -> None:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return
    for ln in lines:
        m = _RE_BAD_CPU.search(ln)
        if m:
            bad = m.group(1)
            cpus = _llvm_help(triple)[0]
            listing = ", ".join(cpus) if cpus else "(LLVM gave no list)"
            raise TargetError(
                f"{what_cpu}={bad} is not a recognized processor for "
                f"{triple}{_suggest(bad, cpus)}; valid CPUs: {listing}")
    for ln in lines:
        m = _RE_BAD_FEATURE.search(ln)
        if m:
            bad = m.group(1)
            name = bad.lstrip("+-")
            feats = _llvm_help(triple)[1]
            raise TargetError(
                f"-mattr feature '{bad}' is not a recognized feature for "
                f"{triple}{_suggest(name, feats)}; valid features (prefix "
                f"with + or -): {_feature_list_text(triple)}")
    raise TargetError(f"LLVM rejected the target options for {triple} "
                      f"(cpu {cpu}): {' | '.join(lines)}")


def _create_tm(triple, cpu, features, opt=3, reloc="static",
               codemodel="small", abi="", probe_ir=None, what_cpu="-mcpu"):
    """Create a target machine, turning LLVM's stderr warnings into errors.

    If probe_ir is given it is compiled to assembly with the new machine and
    the assembly text is returned too (ARM build attributes and the .fpu
    directive, RISC-V ISA string: what LLVM really made of cpu + features).
    """
    if cpu == "help" or any(f.lstrip("+-") in ("help", "cpuhelp")
                            for f in _split_features(features)):
        cpus, feats = _llvm_help(triple)
        raise TargetError(f"help requested for {triple}: CPUs: "
                          f"{', '.join(cpus)}; features: {', '.join(feats)}")
    target = _get_target(triple)
    sink: list = []
    err = None
    with _capture_fd2(sink):
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


def _split_features(features: str):
    return [f for f in (x.strip() for x in features.split(",")) if f]


def _parse_mattr(mattr) -> list:
    if mattr is None:
        return []
    if isinstance(mattr, str):
        items = mattr.split(",")
    else:
        items = [x for item in mattr for x in str(item).split(",")]
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        if item[0] not in "+-":
            item = "+" + item
        if len(item) == 1 or not re.fullmatch(r"[+-][A-Za-z0-9_.\-]+", item):
            raise TargetError(f"-mattr: malformed feature '{item}' (expected "
                              f"+name or -name, comma separated)")
        out.append(item)
    return out


def _join_features(*groups) -> str:
    return ",".join(f for g in groups for f in g)


# --------------------------------------------------------------------------
# TargetSpec


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
        mine = _parts(self.triple)
        host = _parts(normalize_triple(llvm.get_process_triple()))
        return ((mine.Arch, mine.SubArch, mine.OS, mine.Env)
                == (host.Arch, host.SubArch, host.OS, host.Env))

    @property
    def arch(self) -> str:
        """LLVM architecture family: arm, thumb, aarch64, x86_64, riscv32, ..."""
        return _parts(self.triple).Arch

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
        if self.arch not in ("arm", "armeb", "thumb", "thumbeb"):
            return None
        asm = _probe_asm(self)
        return _arm_fpu_from_asm(asm)

    def target_machine(self, opt: int = 3) -> "llvm.TargetMachine":
        """Create the LLVM target machine (cpu, features, relocation and code
        model, and the float ABI through triple/features/ABI name)."""
        if not isinstance(opt, int) or not 0 <= opt <= 3:
            raise TargetError(f"optimization level must be 0..3, got {opt!r}")
        tm, _ = _create_tm(self.triple, self.cpu, self.features, opt=opt,
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


@functools.lru_cache(maxsize=64)
def _data_layout(spec: TargetSpec) -> str:
    return str(spec.target_machine(opt=0).target_data)


@functools.lru_cache(maxsize=64)
def _probe_asm(spec: TargetSpec) -> str:
    _, asm = _create_tm(spec.triple, spec.cpu, spec.features, opt=2,
                        reloc=spec.relocation_model, codemodel=spec.code_model,
                        abi=spec.abi, probe_ir=_PROBE_FP_IR)
    return asm or ""


# --------------------------------------------------------------------------
# ARM


_ARM_FAMILIES = ("arm", "armeb", "thumb", "thumbeb")

# Tag_CPU_arch (ARM build attribute 6) -> triple sub-architecture.
_ARM_TAG_SUBARCH = {
    1: "v4", 2: "v4t", 3: "v5t", 4: "v5te", 5: "v5tej", 6: "v6", 7: "v6kz",
    8: "v6t2", 9: "v6k", 11: "v6m", 12: "v6m", 13: "v7em", 14: "v8a",
    15: "v8r", 16: "v8m.base", 17: "v8m.main", 18: "v8.1a", 19: "v8.2a",
    20: "v8.3a", 21: "v8.1m.main", 22: "v9a",
}


def _arm_fpu_from_asm(asm: str) -> str | None:
    m = re.search(r"^\s*\.fpu\s+(\S+)", asm or "", re.M)
    if not m or m.group(1) in ("softvfp", "none"):
        return None
    return m.group(1)


def _arm_cpu_arch(cpu: str, features: str):
    """(sub-architecture, profile letter) LLVM assigns to an ARM CPU.

    Read from the build attributes LLVM writes for that CPU (Tag_CPU_arch and
    Tag_CPU_arch_profile), so every CPU LLVM knows is covered.
    """
    _, asm = _create_tm("thumb-unknown-none-eabi", cpu, features, opt=0,
                        probe_ir=_PROBE_INT_IR)
    tag = re.search(r"\.eabi_attribute\s+6,\s*(\d+)", asm or "")
    prof = re.search(r"\.eabi_attribute\s+7,\s*(\d+)", asm or "")
    profile = chr(int(prof.group(1))) if prof else ""
    if not tag:
        return None, profile
    value = int(tag.group(1))
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
        _create_tm(triple_for_errors, "generic", "+" + feature)
    except TargetError:
        arches = [f for f in _llvm_help(triple_for_errors)[1]
                  if re.fullmatch(r"armv[\d.]+[a-z]*-[amr](\.main|\.base)?", f)]
        raise TargetError(
            f"-march={march} is not an ARM architecture LLVM knows"
            f"{_suggest(feature, arches)}; valid: {', '.join(arches)}") from None
    sub = feature[3:].replace("-", "")          # v7e-m -> v7em, v8.1-m.main -> v8.1m.main
    return sub, _arm_profile_of_subarch(sub)


def _resolve_arm(comps, short, cpu, march, user_feats, fa):
    m = re.fullmatch(r"(arm|thumb)(eb)?(v\d.*)?", comps[0])
    if m:  # llvm.get_triple_parts loses the sub-architecture of e.g. armv6m (parsed as thumb)
        family, sub = m.group(1) + (m.group(2) or ""), m.group(3) or ""
    else:
        parts = _parts("-".join(comps))
        family, sub = parts.Arch, parts.SubArch
    cpu = cpu or "generic"
    probe_triple = f"{family}-unknown-none-eabi"
    _create_tm(probe_triple, cpu, _join_features(user_feats))  # validates cpu/mattr early
    profile = None
    if march:
        sub, profile = _arm_march(march, probe_triple)
    elif sub:
        pass  # the triple names the sub-architecture
    elif cpu != "generic":
        sub, profile = _arm_cpu_arch(cpu, _join_features(user_feats))
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
            trial = TargetSpec(with_env(False), cpu, _join_features(user_feats),
                               "default", "static", "small")
            if _arm_fpu_from_asm(_probe_asm(trial)):
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


# --------------------------------------------------------------------------
# RISC-V


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


def _resolve_riscv(comps, short, cpu, march, user_feats, fa, family):
    xlen = 32 if family == "riscv32" else 64
    cpu = cpu or f"generic-rv{xlen}"
    triple = "-".join(comps)
    base_feats = []
    if march:
        base_feats = _riscv_march_features(march, xlen)
    elif short and cpu == f"generic-rv{xlen}":
        base_feats = _split_features(_RISCV_SHORT_DEFAULT_FEATURES[family])
    feats = base_feats + list(user_feats)
    if fa is None and short:
        fa = "hard" if xlen == 64 else "soft"
    if fa in (None, "default"):
        return triple, cpu, feats, "default", ""
    if fa == "softfp":
        raise TargetError("-float-abi=softfp is an ARM float ABI; RISC-V "
                          "takes soft, hard or default")
    trial = TargetSpec(triple, cpu, _join_features(feats), "default", "static", "small")
    asm = _probe_asm(trial)
    isa = re.search(r'\.attribute\s+5,\s*"([^"]+)"', asm)
    exts = set()
    if isa:
        name = isa.group(1)
        exts = {re.sub(r"\d+p\d+$", "", e) for e in name[4:].split("_")}
        first = name[4:].split("_")[0]
        exts.add(re.sub(r"\d+p\d+$", "", first)[:1])
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
        f"'{_join_features(feats)}' has no FPU; add -mattr=+f or +d, or use "
        f"-float-abi=soft")


# --------------------------------------------------------------------------
# resolve_target


def _check_choice(value, choices, option):
    if value is None:
        return None
    v = str(value).strip().lower()
    if v not in choices:
        raise TargetError(f"{option}={value} is not valid; available: "
                          f"{', '.join(choices)}")
    return v


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
    fa = _check_choice(float_abi, FLOAT_ABIS, "-float-abi")
    reloc = _check_choice(relocation_model or "static", RELOCATION_MODELS,
                          "-relocation-model")
    cmodel = _check_choice(code_model or "small", CODE_MODELS, "-code-model")
    user_feats = _parse_mattr(mattr)
    mcpu = mcpu.strip() if isinstance(mcpu, str) and mcpu.strip() else None
    march = march.strip() if isinstance(march, str) and march.strip() else None

    host = target is None or (isinstance(target, str) and target.strip() in ("", "host", "native"))
    if host:
        comps = normalize_triple(llvm.get_process_triple()).split("-")
        short = False
    else:
        name = str(target).strip()
        if "-" not in name:
            short = True
            if name in _SHORT_NAMES:
                comps = list(_SHORT_NAMES[name][:4])
            elif _is_arch(name):
                if _parts(name).Arch in _ARM_FAMILIES:
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
            if _parts("-".join(comps)).Arch == "unknown":
                raise TargetError(
                    f"-target={name}: unknown architecture '{name.split('-')[0]}'; "
                    f"available: {', '.join(available_targets())}")
    family = _parts("-".join(comps)).Arch
    _get_target("-".join(comps))  # is the backend compiled in?

    abi = ""
    if family in _ARM_FAMILIES:
        triple, cpu, feats, resolved_fa, abi = _resolve_arm(
            comps, short, mcpu, march, user_feats, fa)
    elif family in ("riscv32", "riscv64"):
        triple, cpu, feats, resolved_fa, abi = _resolve_riscv(
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
            if short and target in _SHORT_NAMES:
                default_cpu = _SHORT_NAMES[target][4]
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
                    host_feats = _split_features(llvm.get_host_cpu_features().flatten())
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

    spec = TargetSpec(triple=triple, cpu=cpu, features=_join_features(feats),
                      float_abi=resolved_fa, relocation_model=reloc,
                      code_model=cmodel, abi=abi)
    _validate(spec, explicit_fa=fa)
    return spec


def _validate(spec: TargetSpec, explicit_fa) -> None:
    """Create the machine and compile a probe; check the float ABI took effect."""
    family = spec.arch
    probe = _PROBE_FP_IR if family in _ARM_FAMILIES else None
    _, asm = _create_tm(spec.triple, spec.cpu, spec.features, opt=2,
                        reloc=spec.relocation_model, codemodel=spec.code_model,
                        abi=spec.abi, probe_ir=probe)
    if family in _ARM_FAMILIES:
        fpu = _arm_fpu_from_asm(asm)
        if spec.float_abi == "hard" and fpu is None:
            raise TargetError(
                f"-float-abi=hard needs an FPU, but -mcpu={spec.cpu} (features "
                f"'{spec.features}') has none; use -float-abi=soft or a CPU "
                f"with an FPU (e.g. cortex-m4, cortex-m7, cortex-m33)")
        if spec.float_abi == "soft" and fpu is not None:  # pragma: no cover
            raise TargetError(f"-float-abi=soft: LLVM still uses the {fpu} FPU "
                              f"for {spec.cpu}")


def soft_float(target: "TargetSpec") -> bool:
    """No FPU instructions: -float-abi=soft, FPU-less Arm cores, RISC-V without F/D."""
    if target.arch in ("arm", "armeb", "thumb", "thumbeb"):
        return target.fpu is None
    if target.arch.startswith("riscv"):
        return not any(f in ("+f", "+d") for f in target.features.split(","))
    return False


def host_target() -> TargetSpec:
    """The host: process triple, host CPU name and host CPU features."""
    return resolve_target()


if __name__ == "__main__":  # pragma: no cover - small manual helper
    import argparse
    import json

    ap = argparse.ArgumentParser(description="resolve glowpy target options")
    ap.add_argument("-target")
    ap.add_argument("-mcpu")
    ap.add_argument("-march")
    ap.add_argument("-mattr")
    ap.add_argument("-float-abi", dest="float_abi")
    ap.add_argument("-relocation-model", dest="reloc", default="static")
    ap.add_argument("-code-model", dest="cmodel", default="small")
    a = ap.parse_args()
    try:
        s = resolve_target(a.target, a.mcpu, a.march, a.mattr, a.float_abi,
                           a.reloc, a.cmodel)
    except TargetError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    print(json.dumps(dict(s.describe(), pointer_bits=s.pointer_bits,
                          is_host=s.is_host, fpu=s.fpu), indent=2))
