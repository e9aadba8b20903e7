"""The in-process path: the bundle's relocatable object is loaded into this process by LLVM's
object loader (llvmlite's MCJIT execution engine, `add_object_file`), with no C compiler and no
linker, and its entry is called through ctypes, which releases the GIL for the call.

Memory follows the bundle contract (DESIGN.md): three regions, 64-byte aligned. The constant
region is read from NAME.weights.bin once per loaded object into pages that are then made
read-only (mprotect), so any number of sessions of that bundle share it and a kernel that wrote
to it would fault instead of corrupting the others. Each Session owns a mutable and an
activation region, so sessions run concurrently from several threads.

Measured on mnist8 (AMD EPYC Zen 3, benchmarks/runtime_overhead.py, thread CPU time, 10,000
calls): 19.7 us per inference in a C loop; through ctypes the raw entry adds 0.9 us,
Session.run (dict in, input copied in) 3.3 us, Bundle.run (and a copy of the output) 4.5 us.
Loading a bundle takes about 3 ms."""
from __future__ import annotations

import ctypes
import mmap
import os
import threading
import time

import llvmlite.binding as llvm
import numpy as np

from glowpy import elf
from glowpy.runtime import trace
from glowpy.ir.dtypes import named
from glowpy.runtime.harness import RuntimeError_, placeholder_views, write_inputs

_ENTRY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_LOAD_LOCK = threading.Lock()  # LLVM's symbol table and target registry are process-wide
_ALIGN = 64


def host_refusal(target: dict) -> str | None:
    """Why a bundle built for `target` (the manifest's) cannot run in this process, or None."""
    from glowpy.codegen.target.triples import host_triple, parts
    triple = target.get("triple", "?")
    mine, host = parts(triple), parts(host_triple())
    if (mine.Arch, mine.SubArch, mine.OS, mine.Env) != (host.Arch, host.SubArch, host.OS, host.Env):
        return f"is built for {triple} (-mcpu={target.get('cpu')}), not this host ({host_triple()})"
    have = llvm.get_host_cpu_features()
    missing = [f[1:] for f in target.get("features", "").split(",")
               if f.startswith("+") and f[1:] in have and not have[f[1:]]]
    if missing:
        return (f"is built for -mcpu={target.get('cpu')} and needs CPU features this host "
                f"({llvm.get_host_cpu_name()}) lacks: {', '.join(missing)}")
    if target.get("cpu") == llvm.get_host_cpu_name():
        return None
    # another CPU (-mcpu=x86-64-v4, ...) implies features the feature string does not list:
    # compare the vectors LLVM generates for it (TargetCaps) with the host's
    from glowpy.codegen.target import TargetSpec, host_target
    fields = ("triple", "cpu", "features", "float_abi", "relocation_model", "code_model", "abi")
    mine = TargetSpec(**{k: target[k] for k in fields if k in target}).caps
    have = host_target().caps
    if mine.float_lanes > have.float_lanes or mine.cheap_masks > have.cheap_masks:
        return (f"is built for -mcpu={target.get('cpu')} ({mine.float_lanes}-lane float "
                f"vectors{', mask registers' if mine.cheap_masks else ''}), more than this "
                f"host ({llvm.get_host_cpu_name()}, {have.float_lanes} lanes) executes")
    return None


def _aligned(nbytes: int) -> np.ndarray:
    """A zeroed uint8 array of nbytes (at least 1) whose data is 64-byte aligned."""
    raw = np.zeros(max(nbytes, 1) + _ALIGN, np.uint8)
    skip = -raw.ctypes.data % _ALIGN
    return raw[skip:skip + max(nbytes, 1)]


def _read_only_image(path: str, nbytes: int, what: str):
    """The file's bytes in fresh page-aligned memory made read-only: (array, address)."""
    mm = mmap.mmap(-1, max(nbytes, 1))
    try:
        size = os.stat(path).st_size
    except OSError as e:
        raise RuntimeError_(f"{what}: cannot read {path}: {e.strerror}") from None
    if size != nbytes:
        raise RuntimeError_(f"{what}: {os.path.basename(path)} has {size} bytes, the manifest's "
                            f"constant region {nbytes}; recompile the bundle")
    with open(path, "rb") as f:
        f.readinto(mm)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    libc = ctypes.CDLL(None, use_errno=True)
    if hasattr(libc, "mprotect"):
        libc.mprotect(ctypes.c_void_p(addr), ctypes.c_size_t(len(mm)), mmap.PROT_READ)
    arr = np.frombuffer(mm, np.uint8, nbytes)
    arr.flags.writeable = False
    return arr, addr


class Loaded:
    """A bundle's object linked into this process and its shared constant region."""

    def __init__(self, directory: str, name: str, manifest: dict):
        what = f"bundle '{name}'"
        obj = os.path.join(directory, name + ".o")
        try:
            with open(obj, "rb") as f:
                data = f.read()
            image = elf.Elf(data)
            needs, relocs = image.undefined(), image.relocation_types()
            # weak references (-instrument-debug's callback) may stay unresolved: LLVM's
            # loader makes them null, and the entry then skips the calls
            weak = {s.name for s in image.symbols() if s.bind == "weak" and not s.defined}
        except (OSError, elf.ElfError) as e:
            raise RuntimeError_(f"{what}: cannot read {obj}: {getattr(e, 'strerror', None) or e}") from None
        if image.machine == "x86_64" and any(t in relocs for t in elf.X86_64_ABS32):
            bad = ", ".join(elf.X86_64_ABS32[t] for t in elf.X86_64_ABS32 if t in relocs)
            raise RuntimeError_(f"{what}: its object has absolute 32-bit relocations ({bad}), "
                                "which need it loaded below 2 GiB; compile it with "
                                "-relocation-model=pic to run it in process")
        desc = manifest.get("instrumentation") or {}
        if desc.get("debug"):
            trace.register(desc["callback"])
        libc = ctypes.CDLL(None)
        for sym in needs:  # LLVM aborts the process on a symbol it cannot resolve: check first
            if llvm.address_of_symbol(sym) is None and sym not in weak:
                fn = getattr(libc, sym, None)
                if fn is None:
                    raise RuntimeError_(f"{what}: its object needs '{sym}', which this process "
                                        "does not have")
                llvm.add_symbol(sym, ctypes.cast(fn, ctypes.c_void_p).value)
        with _LOAD_LOCK:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            machine = llvm.Target.from_default_triple().create_target_machine()
            module = llvm.parse_assembly("")
            module.triple = llvm.get_process_triple()
            self._engine = llvm.create_mcjit_compiler(module, machine)
            self._engine.add_object_file(llvm.ObjectFileRef.from_data(data))
            self._engine.finalize_object()
            addr = self._engine.get_function_address(manifest["entry"])
        if not addr:
            raise RuntimeError_(f"{what}: its object does not define the entry "
                                f"'{manifest['entry']}'")
        self.entry = _ENTRY(addr)
        self.constant, self.constant_addr = _read_only_image(
            os.path.join(directory, name + ".weights.bin"), manifest["memory"]["constant"], what)


_TIMED = ctypes.CFUNCTYPE(ctypes.c_uint64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                          ctypes.c_void_p)
_timed = None  # (engine, function): built once per process


def timed_entry():
    """`uint64_t timed(entry, c, m, a)`: calls entry(c, m, a) between two readings of the
    counter -instrument-profile's cycles counter reads (codegen/instrument.py), so a profile's
    per-instruction counts and the whole call are measured with one clock. JIT-compiled once."""
    global _timed
    with _LOAD_LOCK:
        if _timed is None:
            from glowpy.codegen.instrument import counter_text
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            machine = llvm.Target.from_default_triple().create_target_machine()
            clock, decl = counter_text(llvm.get_process_triple().split("-")[0])
            text = f"""
define i64 @glowpy_timed(ptr %f, ptr %c, ptr %m, ptr %a) {{
  %t0 = {clock}
  %r = call i32 %f(ptr %c, ptr %m, ptr %a)
  %t1 = {clock}
  %d = sub i64 %t1, %t0
  ret i64 %d
}}
{decl}
"""
            engine = llvm.create_mcjit_compiler(llvm.parse_assembly(text), machine)
            engine.finalize_object()
            _timed = (engine, _TIMED(engine.get_function_address("glowpy_timed")))
    return _timed[1]


class Session:
    """One mutable and one activation region of a bundle, sharing the bundle's constant region.
    A session runs one inference at a time; give each thread its own (Bundle.session()).

    `inputs` and `outputs` map each placeholder's model name to a numpy view of its bytes in the
    mutable region (zero copy): write inputs into them and call invoke(), or pass arrays to
    run(), which copies them in. Output views are overwritten by the next call; run() returns
    copies unless copy=False."""

    def __init__(self, loaded: Loaded, name: str, manifest: dict):
        self._loaded, self.name, self.manifest = loaded, name, manifest
        mem = manifest["memory"]
        self.mutable = _aligned(mem["mutable"])
        self.activations = _aligned(mem["activations"])
        self.inputs = placeholder_views(manifest, self.mutable, ("inputs",))
        self.outputs = placeholder_views(manifest, self.mutable, ("outputs",))
        self._args = (ctypes.c_void_p(loaded.constant_addr), ctypes.c_void_p(self.mutable.ctypes.data),
                      ctypes.c_void_p(self.activations.ctypes.data))
        self.best_ns = None

    def profile_counts(self, inputs: dict, repeat: int = 1) -> tuple[np.ndarray, int]:
        """Runs an -instrument-profile bundle `repeat` times on `inputs` from zeroed counters:
        (its counter table: per-instruction ticks then the call count, and the ticks of the
        whole calls measured around the entry with the same counter). One uncounted call goes
        first: the regions' pages are mapped on their first write, and counted, that first
        touch fell on whichever instructions wrote a page first (DETR's first encoder layer,
        AVX2 code on a Zen 5, five counted calls: its 850x850 scores' MatMul and Softmax at
        30.3M and 28.3M ticks against the later layers' 7.9M and 5.8M)."""
        prof = (self.manifest.get("instrumentation") or {}).get("profile")
        if not prof:
            raise RuntimeError_(f"bundle '{self.name}' has no profile counters; compile it "
                                "with -instrument-profile")
        if prof["counter"] != "cycles":
            raise RuntimeError_(f"bundle '{self.name}' counts with {prof['counter']}; in "
                                "process only -instrument-profile-counter=cycles (auto on "
                                "this host) runs")
        write_inputs(self.manifest, self.inputs, inputs)
        table = self.mutable[prof["offset"]:prof["offset"] + 8 * prof["entries"]].view(np.uint64)
        timed, entry = timed_entry(), ctypes.cast(self._loaded.entry, ctypes.c_void_p)
        timed(entry, *self._args)
        table[:] = 0
        total = sum(int(timed(entry, *self._args)) for _ in range(repeat))
        return table.copy(), total

    def trace(self, inputs: dict) -> list[dict]:
        """Runs an -instrument-debug bundle once on `inputs`; returns per instruction, in
        order, {"id", "op", "node", "kernel", "outputs": {buffer name: array copy}}: every
        intermediate tensor as its instruction left it (the manifest's "instrumentation")."""
        desc = self.manifest.get("instrumentation") or {}
        if not desc.get("debug"):
            raise RuntimeError_(f"bundle '{self.name}' has no instrumentation callbacks; "
                                "compile it with -instrument-debug")
        rows = desc["instructions"]
        out = []

        def after(kind, idx, addrs, sizes):
            if kind != 1:
                return
            r = rows[idx]
            tensors = {}
            for o, addr, n in zip(r["operands"], addrs, sizes):
                if o["role"] == "out":
                    raw = ctypes.string_at(addr, n)
                    tensors[o["name"]] = np.frombuffer(raw, named(o["dtype"])).reshape(o["shape"])
            out.append({k: r[k] for k in ("id", "op", "node", "kernel")} | {"outputs": tensors})

        write_inputs(self.manifest, self.inputs, inputs)
        with trace.handling(after):
            self.invoke()
        return out

    def invoke(self) -> None:
        """Runs the entry on what the input views hold."""
        rc = self._loaded.entry(*self._args)
        if rc:
            raise RuntimeError_(f"bundle '{self.name}' returned {rc}")

    def run(self, inputs: dict, copy: bool = True, repeat: int = 1) -> dict:
        """Copies `inputs` ({model name or symbol: array}, cast and reshaped to the placeholders')
        in, runs the entry `repeat` times (best_ns: the fastest) and returns {output name:
        array}: copies, or with copy=False the output views themselves."""
        write_inputs(self.manifest, self.inputs, inputs)
        best = None
        for _ in range(repeat):
            t0 = time.perf_counter_ns()
            self.invoke()
            dt = time.perf_counter_ns() - t0
            best = dt if best is None or dt < best else best
        self.best_ns = float(best)
        if not copy:
            return dict(self.outputs)
        return {k: v.copy() for k, v in self.outputs.items()}
