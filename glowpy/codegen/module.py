"""Builds the LLVM module of a planned program and compiles it to an object file.

Each instruction becomes an internal kernel function specialised to its shapes, taking one
pointer per operand; the exported entry computes operand addresses from the three region bases
and calls the kernels in order."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen import mathfn
from glowpy.codegen.kernels import get_emitter
from glowpy.codegen.target import TargetSpec, initialize_llvm
from glowpy.ir.program import Buffer, Instr, Program
from glowpy.ir.planner import align

REGION_ARG = {"constant": 0, "mutable": 1, "activation": 2}


@dataclass
class Kernel:
    """What an emitter sees: the builder, the instruction, and one typed pointer per operand."""
    b: ir.IRBuilder
    instr: Instr
    args: list  # ir.Argument per operand (inputs then outputs; None operands skipped)
    intp: ir.IntType
    module: ir.Module
    prog: Program = None
    cbase: ir.Value = None  # the constant region's base (for tables added by the emitter)
    epilogue_done: bool = False  # set by kernels that applied the node's fused epilogue
    target: TargetSpec = None  # what the code is for (vector width, registers: gemm_micro.simd_of)

    @property
    def node(self):
        return self.instr.node

    @property
    def attrs(self):
        return self.instr.node.attrs if self.instr.node is not None else {}

    def _arg(self, buf):
        return self.args[[id(x) for x in self.operands].index(id(buf))]

    @property
    def operands(self):
        return [x for x in self.instr.inputs if x is not None] + list(self.instr.outputs)

    def inp(self, i):
        buf = self.instr.inputs[i] if i < len(self.instr.inputs) else None
        return None if buf is None else self._arg(buf)

    def out(self, i=0):
        return self._arg(self.instr.outputs[i])

    def in_buf(self, i) -> Buffer | None:
        return self.instr.inputs[i] if i < len(self.instr.inputs) else None

    def out_buf(self, i=0) -> Buffer:
        return self.instr.outputs[i]

    def const(self, i) -> np.ndarray | None:
        buf = self.in_buf(i)
        return None if buf is None else buf.value.const

    def add_table(self, array: np.ndarray, name: str):
        """A read-only table computed at compile time (per-position divisors, resize taps...).
        It is appended to the constant region, so the object keeps no data and needs no
        relocations; returns a pointer to it."""
        array = np.ascontiguousarray(array)
        buf = Buffer(f"{self.instr.name}_{name}", array.dtype, array.shape, "constant", data=array)
        buf.offset = align(self.prog.sizes["constant"])
        self.prog.sizes["constant"] = align(buf.offset + buf.nbytes)
        self.prog.constants.append(buf)
        return self.b.gep(self.cbase, [ir.Constant(self.intp, buf.offset)], inbounds=True,
                          source_etype=cg.I8)

    def c(self, value, ty=None):
        return cg.const(ty or self.intp, value)

    def for_range(self, stop, start=0, step=1, name="i"):
        return cg.for_range(self.b, stop, start, step, self.intp, name)

    def strided_loop(self, shape, strides_list, offsets=None, name="e"):
        return cg.strided_loop(self.b, shape, strides_list, offsets, self.intp, name)

    def loop_nest(self, shape, name="d"):
        return cg.loop_nest(self.b, shape, self.intp, name)

    def load(self, ptr, off, dtype):
        return cg.load(self.b, ptr, off, cg.llvm_type(dtype))

    def store(self, value, ptr, off):
        return cg.store(self.b, value, ptr, off)


def _operand_overlaps(bufs: list) -> list[bool]:
    """Per operand: does its memory overlap another operand's (so it may not be noalias)?"""
    spans = []
    for b in bufs:
        region, off = b.address
        spans.append((region, off, off + b.nbytes))
    return [any(i != j and s[0] == t[0] and s[1] < t[2] and t[1] < s[2]
                for j, t in enumerate(spans)) for i, s in enumerate(spans)]


def _soft_float(target: TargetSpec) -> bool:
    """No FPU instructions: -float-abi=soft, FPU-less Arm cores, RISC-V without F/D."""
    if target.arch in ("arm", "armeb", "thumb", "thumbeb"):
        return target.fpu is None
    if target.arch.startswith("riscv"):
        return not any(f in ("+f", "+d") for f in target.features.split(","))
    return False


def build_module(prog: Program, target: TargetSpec, entry_name: str) -> ir.Module:
    mod = ir.Module(name=prog.name)
    mod.triple = target.triple
    if _soft_float(target):
        mathfn.set_soft_float(mod)  # sqrt must not become a libm call there
    intp = ir.IntType(target.pointer_bits)
    entry = ir.Function(mod, ir.FunctionType(cg.I32, [cg.PTR] * 3), entry_name)
    for a, n in zip(entry.args, ("constantWeight", "mutableWeight", "activations")):
        a.name = n
        a.add_attribute("noalias")
        a.attributes.align = 64
    eb = ir.IRBuilder(entry.append_basic_block("entry"))
    for idx, ins in enumerate(prog.instrs):
        bufs = [x for x in ins.inputs if x is not None] + list(ins.outputs)
        # operands, then the constant region's base (tables the emitter adds live there)
        fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [cg.PTR] * (len(bufs) + 1)),
                         f"k{idx}_{ins.op}")
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        fn.attributes.add("noinline")
        for a, overlaps, buf in zip(fn.args, _operand_overlaps(bufs), bufs):
            if not overlaps:
                a.add_attribute("noalias")
            region, off = buf.address
            a.attributes.align = 64 if (off % 64 == 0 and buf.base is None) else \
                np.dtype(buf.dtype).itemsize
        cbase = fn.args[-1]
        kb = ir.IRBuilder(fn.append_basic_block("entry"))
        kern = Kernel(kb, ins, list(fn.args[:-1]), intp, mod, prog, cbase, target=target)
        get_emitter(ins.op)(kern)
        if ins.node is not None and ins.node.attrs.get("_epilogue") and not kern.epilogue_done:
            from glowpy.codegen.kernels.fused import epilogue_sweep
            epilogue_sweep(kern)  # a host kernel without its own epilogue hook
        kb.ret_void()
        ptrs = []
        for buf in bufs:
            region, off = buf.address
            ptrs.append(eb.gep(entry.args[REGION_ARG[region]], [ir.Constant(intp, off)],
                               inbounds=True, source_etype=cg.I8))
        eb.call(fn, ptrs + [entry.args[0]])
    eb.ret(ir.Constant(cg.I32, 0))
    return mod


def compile_module(mod: ir.Module, target: TargetSpec, opt: int = 3) -> bytes:
    initialize_llvm()
    tm = target.target_machine(opt=opt)
    mod.data_layout = str(tm.target_data)
    parsed = llvm.parse_assembly(str(mod))
    parsed.verify()
    if opt > 0:
        pto = llvm.create_pipeline_tuning_options(speed_level=opt)
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(parsed, pb)
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
