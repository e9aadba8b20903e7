"""Instrumented entries (-instrument-debug, -instrument-profile): what the entry adds around
each instruction, and the description of the instructions the compiler writes into NAME.json.

-instrument-debug: before (kind 0) and after (kind 1) each instruction the entry calls the
application's `void NAME_instrument(int kind, int instr_id, int num_operands,
uint8_t **operand_addresses, const uint64_t *operand_sizes)`. The declaration is weak: an
application that does not define it links and runs, and the entry skips the calls (one
compare per call site).

-instrument-profile: the entry reads a counter when it starts and after each instruction and
adds each difference to a uint64 table of N + 1 entries appended to the mutable region: N
per-instruction counts, then the number of entry calls. Consecutive readings are shared (one
instruction's end is the next one's start), so the counts add up to the whole entry but for
its prologue and epilogue: a per-op table that adds up, which two readings per instruction
(the gaps between them lost) would not. Counters (-instrument-profile-counter):
  cycles    llvm.readcyclecounter (x86: rdtsc); on AArch64 the virtual counter cntvct_el0
            (llvm.read_volatile_register: readcyclecounter would read PMCCNTR_EL0, which
            Linux traps at EL0, and this LLVM lowers readsteadycounter to nothing)
  dwt       Cortex-M DWT CYCCNT (0xE0001004, 32 bits; the application enables it through
            DEMCR.TRCENA and DWT_CTRL.CYCCNTENA); the default on M-profile cores
  callback  `uint64_t NAME_profile_counter(void)` from the application, e.g. a SysTick count
            (QEMU's MPS2 boards do not model DWT: examples/bundles/cortex_m7 uses SysTick
            under -icount)."""
from __future__ import annotations

import re

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.names import legalize
from glowpy.ir.macs import executed_macs, node_macs
from glowpy.ir.program import align

COUNTERS = ("auto", "cycles", "dwt", "callback")
AARCH64 = ("aarch64", "arm64", "aarch64_be")
READ_REGISTER = "llvm.read_volatile_register.i64"
DWT_CYCCNT = 0xE0001004
I64 = ir.IntType(64)


def counter_for(target, counter: str) -> str:
    """The counter `auto` means on `target`: DWT on M-profile Arm cores, else cycles."""
    if counter != "auto":
        return counter
    return "dwt" if re.match(r"thumbv\d+e?m", target.triple) else "cycles"


def emit_counter(mod: ir.Module, b: ir.IRBuilder, arch: str, counter: str, callback: str):
    """An i64 reading of `counter` (see the module docstring)."""
    if counter == "dwt":
        p = b.inttoptr(ir.Constant(ir.IntType(32), DWT_CYCCNT), cg.PTR)
        # an atomic (monotonic) load: llvmlite has no volatile loads, inline asm needs an
        # asm parser llvmlite does not register for cross targets, and LLVM keeps every
        # atomic load (on the M7 a plain ldr). 32 bits: the caller subtracts before
        # widening, so a wrap of the counter costs nothing
        return b.load_atomic(p, "monotonic", 4, typ=ir.IntType(32))
    if counter == "callback":
        fn = mod.globals.get(callback) or ir.Function(mod, ir.FunctionType(I64, []), callback)
        return b.call(fn, [])
    if arch in AARCH64:
        rr = mod.globals.get(READ_REGISTER) or ir.Function(
            mod, ir.FunctionType(I64, [ir.MetaDataType()]), READ_REGISTER)
        return b.call(rr, [mod.add_metadata([ir.MetaDataString(mod, "cntvct_el0")])])
    name = "llvm.readcyclecounter"
    fn = mod.globals.get(name) or ir.Function(mod, ir.FunctionType(I64, []), name)
    return b.call(fn, [])


def counter_text(arch: str) -> tuple[str, str]:
    """The cycles counter as LLVM IR text: (a call expression, its declarations)."""
    if arch in AARCH64:
        return (f"call i64 @{READ_REGISTER}(metadata !0)",
                f'declare i64 @{READ_REGISTER}(metadata)\n!0 = !{{!"cntvct_el0"}}')
    return "call i64 @llvm.readcyclecounter()", "declare i64 @llvm.readcyclecounter()"


def symbols(network: str) -> dict:
    n = legalize(network)
    return {"callback": f"{n}_instrument", "counter": f"{n}_profile_counter"}


class Instrumenter:
    """Adds the calls and counts to the entry while module.py builds it."""

    def __init__(self, mod, entry, eb, intp, prog, target, debug: bool, counter: str | None,
                 table_offset: int, network: str):
        self.mod, self.entry, self.eb, self.intp = mod, entry, eb, intp
        self.debug, self.counter, self.arch = debug, counter, target.arch
        self.n = len(prog.instrs)
        self.names = symbols(network)
        self.table_offset = table_offset
        if debug:
            fty = ir.FunctionType(ir.VoidType(), [cg.I32, cg.I32, cg.I32, cg.PTR, cg.PTR])
            self.cb = ir.Function(mod, fty, self.names["callback"])
            self.cb.linkage = "extern_weak"
            most = max([len(_operands(ins)) for ins in prog.instrs] or [1])
            self.addrs = eb.alloca(ir.ArrayType(cg.PTR, max(most, 1)), name="operands")
            self.sizes = eb.alloca(ir.ArrayType(I64, max(most, 1)), name="sizes")
        if counter:
            self.t = self._read()

    def _read(self):
        return emit_counter(self.mod, self.eb, self.arch, self.counter, self.names["counter"])

    def _slot(self, i: int):
        return self.eb.gep(self.entry.args[1], [ir.Constant(self.intp, self.table_offset + 8 * i)],
                           inbounds=True, source_etype=cg.I8)

    def _callback(self, kind: int, idx: int, ptrs: list, sizes: list):
        """The operand addresses and sizes go through two arrays on the entry's stack: a
        constant global for the sizes would be addressed absolutely (R_X86_64_32 in the
        static relocation model), which neither a PIE nor the in-process loader accepts."""
        b = self.eb
        for k, (p, n) in enumerate(zip(ptrs, sizes)):
            at = [ir.Constant(cg.I32, 0), ir.Constant(cg.I32, k)]
            b.store(p, b.gep(self.addrs, at, inbounds=True))
            b.store(ir.Constant(I64, n), b.gep(self.sizes, at, inbounds=True))
        present = b.icmp_unsigned("!=", self.cb, ir.Constant(cg.PTR, None))
        with b.if_then(present, likely=True):
            b.call(self.cb, [ir.Constant(cg.I32, kind), ir.Constant(cg.I32, idx),
                             ir.Constant(cg.I32, len(ptrs)), self.addrs, self.sizes])

    def call(self, idx: int, ins, slot_ptrs: list, index: list, emit_call):
        """Emits instruction `idx`'s kernel call (emit_call()) with the instrumentation."""
        ops = _operands(ins)
        ptrs = [slot_ptrs[i] for i in index]
        sizes = [b.nbytes for b in ops]
        if self.debug:
            self._callback(0, idx, ptrs, sizes)
            if self.counter:
                self.t = self._read()  # the callback's time is not the instruction's
        emit_call()
        if self.counter:
            b = self.eb
            t1 = self._read()
            d = b.sub(t1, self.t)
            if d.type != I64:
                d = b.zext(d, I64)
            slot = self._slot(idx)
            b.store(b.add(b.load(slot, typ=I64), d), slot)
            self.t = t1
        if self.debug:
            self._callback(1, idx, ptrs, sizes)

    def finish(self):
        if self.counter:
            slot = self._slot(self.n)
            self.eb.store(self.eb.add(self.eb.load(slot, typ=I64), ir.Constant(I64, 1)), slot)


def _operands(ins) -> list:
    """The operands the callback gets, in the order module.py passes them: inputs, outputs."""
    return [x for x in ins.inputs if x is not None] + list(ins.outputs)


def reserve_table(prog) -> int:
    """Appends the profile table (N + 1 uint64) to the mutable region; returns its offset."""
    off = align(prog.sizes["mutable"])
    prog.sizes["mutable"] = off + 8 * (len(prog.instrs) + 1)
    return off


def _macs(ins) -> int:
    """Multiply-accumulates of the op as defined (a Winograd kernel does fewer)."""
    if ins.node is None or not ins.outputs:
        return 0
    return node_macs(ins.node, ins.outputs[0].shape)


def describe(prog, kernels: list[str], info: dict) -> dict:
    """The manifest's "instrumentation": how the bundle was instrumented and, per instruction
    id, its op, node, kernel function, variant, MACs (as defined, and executed: fewer for a
    Winograd convolution), bytes and operands."""
    rows = []
    for idx, (ins, fn) in enumerate(zip(prog.instrs, kernels)):
        ops = _operands(ins)
        n_in = len(ops) - len(ins.outputs)
        variant = ins.attrs.get("variant")
        rows.append({
            "id": idx, "op": ins.op, "node": ins.name, "kernel": fn,
            **({"variant": variant["name"]} if isinstance(variant, dict) else {}),
            "macs": _macs(ins), "executed_macs": executed_macs(ins),
            "bytes_read": sum(b.nbytes for b in ops[:n_in]),
            "bytes_written": sum(b.nbytes for b in ops[n_in:]),
            "operands": [{"name": b.name, "role": "in" if k < n_in else "out",
                          "region": b.address[0], "offset": b.address[1], "bytes": b.nbytes,
                          "dtype": np.dtype(b.dtype).name, "shape": list(b.shape)}
                         for k, b in enumerate(ops)]})
    return {**info, "instructions": rows}


def bundle_description(prog, network: str, debug: bool, counter: str | None,
                       table: int | None, functions: dict) -> tuple[dict, dict]:
    """(the manifest's "instrumentation", the header's instrumentation block's context);
    functions: {function symbol: code bytes} of the object (elf.Elf.functions)."""
    syms = symbols(network)
    desc = describe(prog, prog.kernels, {
        "debug": debug, **({"callback": syms["callback"]} if debug else {}),
        "profile": None if not counter else {
            "counter": counter, "region": "mutable", "offset": table,
            "entries": len(prog.instrs) + 1,
            **({"counter_function": syms["counter"]} if counter == "callback" else {})}})
    for row in desc["instructions"]:
        row["code_bytes"] = int(functions.get(row["kernel"], 0))
    return desc, {**desc, "upper": legalize(network).upper(), **syms, "count": len(prog.instrs)}
