"""LiteRT's XNNPACK without its AVX-512 kernels, for AVX2 figures on an AVX-512 machine.

The issue quotes XNNPACK's figures from an AVX2-only Zen 3. On an AVX-512 host XNNPACK picks
its AVX-512 microkernels, and it has no switch to keep it to AVX2: it chooses once, when its
hardware configuration is first built, from cpuinfo's `cpuinfo_isa` (the feature flags cpuinfo
read from CPUID and XCR0). Both are compiled into LiteRT's `libpywrap_litert_common.so`, and the
library keeps its symbol table, so `use()` runs cpuinfo's initialization itself before the first
interpreter is made, clears the AVX-512 flags in `cpuinfo_isa` and leaves the rest alone.
XNNPACK then builds the configuration an AVX2 machine with this CPU's other features gets: its
AVX2/FMA3 microkernels, 8-float vectors. cpuinfo initializes once per process, so nothing sets
the flags back.

Unlike `ort_avx2.py` this patches memory, not a file. It checks what it relies on and stops
with an error otherwise: cpuinfo not yet initialized when it runs (XNNPACK has not read the
flags), and the flag bytes at the offsets cpuinfo's `struct cpuinfo_x86_isa` gives them in the
pinned LiteRT (2.3.0) agreeing with the CPU's flags in /proc/cpuinfo, AVX2 through AVX512_4FMAPS.

Checked on the Zen 4 this was written on (LiteRT 2.3.0, ResNet-18, `perf record`): as
installed, 87% of XNNPACK's time is in `xnn_f32_igemm_minmax_ukernel_7x32__avx512f_broadcast`;
after use(), 84% is in `xnn_f32_igemm_minmax_ukernel_5x16__fma3_broadcast_prfm`. XNNPACK's
hardware configuration then lacks its AVX-512 bits, too.
"""
from __future__ import annotations

import ctypes
import struct
import sys

LIB = "libpywrap_litert_common.so"
# byte offsets in cpuinfo's struct cpuinfo_x86_isa (x86-64 build), with Linux's flag names
ISA_FLAGS = {0x1c: "avx2", 0x1d: "avx512f", 0x1e: "avx512pf", 0x1f: "avx512er",
             0x20: "avx512cd", 0x21: "avx512dq", 0x22: "avx512bw", 0x23: "avx512vl",
             0x24: "avx512ifma", 0x25: "avx512vbmi", 0x26: "avx512_vbmi2",
             0x27: "avx512_bitalg", 0x28: "avx512_vpopcntdq", 0x29: "avx512_vnni",
             0x2a: "avx512_bf16", 0x2b: "avx512_fp16", 0x2c: "avx512_vp2intersect",
             0x2d: "avx512_4vnniw", 0x2e: "avx512_4fmaps"}
SYMBOLS = ("cpuinfo_initialize", "cpuinfo_is_initialized", "cpuinfo_isa")


def _symbols(path: str, names) -> dict[str, int]:
    """The addresses (relative to the load base) of `names` in an ELF64 file's .symtab."""
    with open(path, "rb") as f:
        elf = f.read()
    if elf[:5] != b"\x7fELF\x02":
        sys.exit(f"error: --xnnpack-avx2: {path} is not a 64-bit ELF file")
    phoff, shoff = struct.unpack_from("<QQ", elf, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", elf, 0x36)
    loads = [struct.unpack_from("<IIQQ", elf, phoff + i * phentsize) for i in range(phnum)]
    first = min(v for t, _, _, v in loads if t == 1)  # PT_LOAD's p_vaddr
    sections = [struct.unpack_from("<IIQQQQII", elf, shoff + i * shentsize) for i in range(shnum)]
    found = {}
    for _, kind, _, _, off, size, link, _ in sections:
        if kind != 2:  # SHT_SYMTAB
            continue
        stroff = sections[link][4]
        for at in range(off, off + size, 24):
            name, _, _, _, value, _ = struct.unpack_from("<IBBHQQ", elf, at)
            end = elf.index(b"\0", stroff + name)
            key = elf[stroff + name:end].decode()
            if key in names:
                found[key] = value - first
    missing = [n for n in names if n not in found]
    if missing:
        sys.exit(f"error: --xnnpack-avx2: {path} has no symbol {', '.join(missing)}; this LiteRT "
                 "build is not one it knows (pin ai-edge-litert==2.3.0)")
    return found


def addresses(lib: str, names) -> dict[str, int]:
    """Where `names` (symbols of the loaded library whose file name is `lib`, local ones too)
    are in this process: the symbol table's values plus the address the library was loaded
    at (its mapping of file offset 0)."""
    maps = [line.split() for line in open("/proc/self/maps") if line.rstrip().endswith("/" + lib)]
    starts = [int(m[0].split("-")[0], 16) for m in maps if int(m[2], 16) == 0]
    if not starts:
        sys.exit(f"error: --xnnpack-avx2: {lib} is not loaded")
    base = min(starts)
    return {k: base + v for k, v in _symbols(maps[0][-1], names).items()}


def use() -> str:
    """Clear cpuinfo's AVX-512 flags in LiteRT before XNNPACK reads them; say what was cleared."""
    import ai_edge_litert.interpreter  # noqa: F401  (loads the library)
    sym = addresses(LIB, SYMBOLS)
    if ctypes.c_bool.from_address(sym["cpuinfo_is_initialized"]).value:
        sys.exit("error: --xnnpack-avx2: cpuinfo was already initialized (an interpreter was "
                 "made before it ran), so XNNPACK has read the AVX-512 flags")
    if not ctypes.CFUNCTYPE(ctypes.c_bool)(sym["cpuinfo_initialize"])():
        sys.exit("error: --xnnpack-avx2: cpuinfo_initialize failed")
    flags = set()
    for line in open("/proc/cpuinfo"):
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    isa = (ctypes.c_ubyte * 0x30).from_address(sym["cpuinfo_isa"])
    wrong = [n for at, n in ISA_FLAGS.items() if bool(isa[at]) != (n in flags)]
    if wrong:
        sys.exit("error: --xnnpack-avx2: cpuinfo's flags in LiteRT disagree with /proc/cpuinfo "
                 f"at {', '.join(wrong)}; this LiteRT build is not one it knows")
    if "avx2" not in flags:
        sys.exit("error: --xnnpack-avx2: this CPU has no AVX2")
    cleared = [n for at, n in ISA_FLAGS.items() if n != "avx2" and isa[at]]
    for at, n in ISA_FLAGS.items():
        if n != "avx2":
            isa[at] = 0
    return (f"cleared {len(cleared)} AVX-512 flags in {LIB}'s cpuinfo"
            if cleared else "no AVX-512 on this CPU: nothing to clear")
