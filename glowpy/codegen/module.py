"""Builds the LLVM module of a planned program and compiles it to an object file.

Each instruction becomes an internal kernel function specialised to its shapes, taking one
pointer per operand; the exported entry computes operand addresses from the three region bases
and calls the kernels in order."""
from __future__ import annotations

import itertools
import re

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen import registry, reuse
from glowpy.codegen.kernel import Kernel
from glowpy.codegen.kernels import catalog  # noqa: F401  (registers every kernel)
from glowpy.codegen.kernels.epilogue import epilogue_sweep
from glowpy.codegen.kernels.vectors import Simd
from glowpy.codegen.optimize import optimize
from glowpy.codegen.target import TargetSpec, initialize_llvm
from glowpy.ir.program import Program

REGION_ARG = {"constant": 0, "mutable": 1, "activation": 2}


def _operand_slots(bufs: list):
    """Operands at one address share one pointer argument: an in-place output and the input
    it overwrites, or a tensor read twice. The kernel then indexes a single base pointer, so
    LLVM's dependence analysis sees `y[i] = f(x[i])` over the same memory and vectorizes it;
    with two arguments it could prove nothing about them and kept the loop scalar (a fused
    x * Sigmoid(x) in place on [1,96,112,112]: 9.8 ms, against 2.6 ms out of place).
    Returns (slot per operand, [(region, offset, end, align) per slot])."""
    slots, index = [], []
    for b in bufs:
        region, off = b.address
        align = 64 if (off % 64 == 0 and b.base is None) else np.dtype(b.dtype).itemsize
        for i, (r, o, end, al) in enumerate(slots):
            if (r, o) == (region, off):
                slots[i] = (r, o, max(end, off + b.nbytes), min(al, align))
                index.append(i)
                break
        else:
            index.append(len(slots))
            slots.append((region, off, off + b.nbytes, align))
    return index, slots


def _slot_overlaps(slots: list) -> list[bool]:
    """Per slot: does its memory overlap another slot's (so it may not be noalias)?"""
    return [any(i != j and s[0] == t[0] and s[1] < t[2] and t[1] < s[2]
                for j, t in enumerate(slots)) for i, s in enumerate(slots)]


def _share(mod: ir.Module, fn: ir.Function, helpers: list, shared: dict) -> ir.Function:
    """One function per distinct kernel: instructions with equal shapes, attributes, operand
    aliasing and epilogues generate the same text, and LLVM then optimizes and compiles each
    text once. Instructions are emitted as usual (their tables and packed weights are
    written), so sharing is exact by construction: only functions whose text is identical
    but for the alignment their pointer arguments promise are merged, and the one kept
    promises the smaller of the two. In 140 residual blocks of equal shape this took LLVM
    from 30.6 s to under 1 s; the text is kept and reused for the module's own text, so the
    check costs no second formatting. `helpers` are the functions the kernel made for itself
    (named after it, e.g. channel.py's store functions): they are part of the text compared
    and go with a kernel that is merged. Two of ResNet-18's 64-channel Winograd layers differ
    only in one argument's alignment: one compile less, 0.5 s of LLVM on an AVX2 EPYC."""
    group = [fn] + helpers
    texts = [str(f) for f in group]
    # references are quoted (@"k3_Conv", @"k3_Conv_store0"): the kernel's name blanked in all
    key = "".join(_ALIGN.sub("", t[:t.index("\n")]) + t[t.index("\n"):] for t in texts).replace(
        fn.get_reference()[:-1], '@"kernel')
    first = shared.get(key)
    if first is None:
        shared[key] = group
        _keep_texts(group, texts)
        return fn
    lowered = False
    for kept, twin in zip(first, group):
        for a, b in zip(kept.args, twin.args):
            if b.attributes.align < a.attributes.align:
                a.attributes.align, lowered = b.attributes.align, True
        del mod.globals[twin.name]
    if lowered:
        for kept in first:
            del kept.descr
        _keep_texts(first, [str(f) for f in first])
    return first[0]


_ALIGN = re.compile(r" align \d+")  # a pointer argument's alignment, in a function's first line


def _keep_texts(fns: list, texts: list):
    for f, text in zip(fns, texts):
        f.descr = lambda buf, t=text: buf.append(t)  # (llvmlite's Function.__str__ calls descr)


def build_module(prog: Program, target: TargetSpec, entry_name: str, instrument=None,
                 progress=None) -> ir.Module:
    """instrument: None, or a function (module, entry, builder, pointer type) -> an
    instrument.Instrumenter whose call() wraps each kernel call. progress(n, N): after each
    instruction's kernel. Sets prog.kernels: each instruction's kernel function name."""
    mod = ir.Module(name=prog.name)
    mod.triple = target.triple
    # Vector targets: the kernels unroll their register tiles and their edges themselves, so
    # LLVM's unrolling of the loops around them (tiles along a row, rows, segments) only
    # copies code: without it the objects shrink (AVX2 code: ResNet-18 211 -> 169 KB of
    # text, ResNet-50 int8 432 -> 416, HiFi-GAN 583 -> 567), and nine zoo models ran within
    # +-1.3% either way, interleaved (compile times moved within this Zen 3's 15% noise).
    # Loops of scalar code stay LLVM's (cgutils.set_unroll_default), and so do all loops of
    # scalar targets (the Cortex-M's): there unrolling a small loop amortizes the loop's own
    # instructions.
    cg.set_unroll_default(mod, Simd.of(target.caps).width == 1)
    intp = ir.IntType(target.caps.pointer_bits)
    entry = ir.Function(mod, ir.FunctionType(cg.I32, [cg.PTR] * 3), entry_name)
    for a, n in zip(entry.args, ("constantWeight", "mutableWeight", "activations")):
        a.name = n
        a.add_attribute("noalias")
        a.attributes.align = 64
    eb = ir.IRBuilder(entry.append_basic_block("entry"))
    shared: dict = {}  # kernel text (its name blanked) -> the function first emitted with it
    reused = reuse.Reuse()
    inst = instrument(mod, entry, eb, intp) if instrument else None
    prog.kernels.clear()
    for idx, ins in enumerate(prog.instrs):
        bufs = [x for x in ins.inputs if x is not None] + list(ins.outputs)
        index, slots = _operand_slots(bufs)
        # one pointer per operand address, then where the instruction's tables start in the
        # constant region (Kernel.add_table; the region base when it has none)
        fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [cg.PTR] * (len(slots) + 1)),
                         f"k{idx}_{ins.op}")
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        fn.attributes.add("noinline")
        overlapping = _slot_overlaps(slots)
        for a, overlaps, slot in zip(fn.args, overlapping, slots):
            if not overlaps:
                a.add_attribute("noalias")
            a.attributes.align = slot[3]
        cbase = fn.args[-1]
        if any(overlapping):
            # the tables are read-only (constant region): noalias holds. Elsewhere the noalias
            # output already keeps its stores from clobbering table loads; where the output
            # overlaps its input (streaming overlaps), this does, so LICM still hoists them.
            # M7, int8 with every overlap kept: VWW 9,998,960 -> 9,938,320 instructions (no
            # overlap: 9,928,010); a QAdd, depthwise, MaxPool, QAvgPool, depthwise chain at
            # 64x25x5 1,228,800 -> 1,218,040 (no overlap: 1,152,890, at 16,000 B against 8,384)
            cbase.add_attribute("noalias")
        kb = ir.IRBuilder(fn.append_basic_block("entry"))
        kern = Kernel(kb, ins, [fn.args[i] for i in index], intp, mod, prog, cbase,
                      target=target)
        rkey = reuse.key(ins, index, slots, overlapping)
        kept = rkey and ins.op in reuse.PURE and reused.find(kern, rkey)
        if kept:  # an equal kernel, not emitted again (reuse.py)
            del mod.globals[fn.name]
            fn, noted = kept
            ins.attrs.update(noted)  # what its emission noted on the instruction (the variant)
        else:
            trace = reused.tracing(kern) if rkey else []
            if rkey and ins.op in reuse.TABLED:  # its emitter may ask (Kernel.taken_over)
                kern.reuse_take = lambda kk, p, rk=rkey: reused.take(kk, rk, p)
            before = (len(prog.constants), prog.sizes.get("constant"))
            attrs = dict(ins.attrs)
            known = len(mod.globals)
            registry.emit(kern)
            if kern.taken is not None:  # its tables written, its code an earlier kernel's
                del mod.globals[fn.name]
                fn, noted = kern.taken
                ins.attrs.update(noted)
            else:
                if ins.node is not None and ins.node.attrs.get("_epilogue") and \
                        not kern.epilogue_done:
                    epilogue_sweep(kern)  # a host kernel without its own epilogue hook
                kb.ret_void()
                # what the kernel added to the module comes last in its (ordered) globals
                added = list(itertools.islice(reversed(mod.globals.items()),
                                              len(mod.globals) - known))
                helpers = [g for n, g in reversed(added)
                           if n.startswith(fn.name + "_") and isinstance(g, ir.Function)]
                fn = _share(mod, fn, helpers, shared)
                wrote = bool(helpers) or kern.tables["base"] is not None or \
                    before != (len(prog.constants), prog.sizes.get("constant"))
                noted = {a: v for a, v in ins.attrs.items() if attrs.get(a) is not v}
                if kern.reuse_key is not None:  # (its tables are part of the key)
                    reused.add(kern.reuse_key, trace, fn, noted, bool(helpers))
                else:
                    reused.add(rkey if ins.op in reuse.PURE else None, trace, fn, noted, wrote)
        prog.kernels.append(fn.name)
        ptrs = [eb.gep(entry.args[REGION_ARG[region]], [ir.Constant(intp, off)], inbounds=True,
                       source_etype=cg.I8) for region, off, _, _ in slots]
        tbase = entry.args[0] if kern.tables["base"] is None else eb.gep(
            entry.args[0], [ir.Constant(intp, kern.tables["base"])], inbounds=True,
            source_etype=cg.I8)  # the instruction's tables (Kernel.add_table)
        if inst:
            inst.call(idx, ins, ptrs, index, lambda f=fn, p=ptrs: eb.call(f, p + [tbase]))
        else:
            eb.call(fn, ptrs + [tbase])
        if progress:
            progress(idx + 1, len(prog.instrs))
    if inst:
        inst.finish()
    eb.ret(ir.Constant(cg.I32, 0))
    return mod


def compile_module(mod: ir.Module, target: TargetSpec, opt: int = 3) -> bytes:
    initialize_llvm()
    tm = target.target_machine(opt=opt)
    mod.data_layout = str(tm.target_data)
    if opt > 0:
        parsed = optimize(mod, target, opt)  # large modules: in parts, on several cores
    else:
        parsed = llvm.parse_assembly(str(mod))
        parsed.verify()
    return tm.emit_object(parsed)


def add_bundle_config(mod: ir.Module, config_name: str, sizes: dict, alignment: int, symbols):
    """The dynamic API's `BundleConfig NAME_config` and its symbol table.
    symbols: [(name, offset, elements, kind)]; names are already legal C identifiers."""
    entry_ty = ir.LiteralStructType([cg.PTR, cg.I64, cg.I64, cg.I8])
    cfg_ty = ir.LiteralStructType([cg.I64] * 5 + [cg.PTR])
    entries = []
    for i, (name, off, size, kind) in enumerate(symbols):
        data = bytearray(name.encode("ascii") + b"\0")
        s = ir.GlobalVariable(mod, ir.ArrayType(cg.I8, len(data)), f".glowpy.sym{i}")
        s.linkage, s.global_constant, s.unnamed_addr = "private", True, True
        s.initializer = ir.Constant(ir.ArrayType(cg.I8, len(data)), data)
        entries.append(ir.Constant(entry_ty, [s, ir.Constant(cg.I64, off), ir.Constant(cg.I64, size),
                                              ir.Constant(cg.I8, kind)]))
    table = ir.GlobalVariable(mod, ir.ArrayType(entry_ty, len(entries)), ".glowpy.symtab")
    # writable: the entries hold addresses, which a PIE or shared library relocates at load time
    table.linkage = "private"
    table.initializer = ir.Constant(ir.ArrayType(entry_ty, len(entries)), entries)
    cfg = ir.GlobalVariable(mod, cfg_ty, config_name)
    cfg.initializer = ir.Constant(cfg_ty, [ir.Constant(cg.I64, v) for v in (
        sizes["constant"], sizes["mutable"], sizes["activation"], alignment, len(entries))] + [table])
    return cfg
