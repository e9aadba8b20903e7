"""Kernel: what a code generator sees of one instruction (the builder, the instruction, one
typed pointer per operand, the target) and the helpers it builds code with."""
from __future__ import annotations

import hashlib

from dataclasses import dataclass, field

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.target import TargetCaps, TargetSpec
from glowpy.ir.program import ALIGN, Buffer, Instr, Program, align


SHARED_TABLE = 1024  # bytes from which vector targets store an equal table once
_NUMBERS = "_numbers"  # Kernel.scalars: the constant holding runtime_int's numbers


@dataclass
class Kernel:
    """What an emitter sees: the builder, the instruction, and one typed pointer per operand."""
    b: ir.IRBuilder
    instr: Instr
    # ir.Argument per operand (inputs then outputs; None operands skipped); operands at one
    # address share one argument (module.build_module)
    args: list
    intp: ir.IntType
    module: ir.Module
    prog: Program = None
    # where the tables the emitter adds start (an instruction's tables are appended to the
    # constant region one after another): the kernel addresses them relative to this pointer,
    # so equal kernels with tables at other offsets are byte-identical and share one function
    # (module._share); tables["base"] is the region offset the caller passes it at
    cbase: ir.Value = None
    epilogue_done: bool = False  # set by kernels that applied the node's fused epilogue
    target: TargetSpec = None  # what the code is for
    # {"base": region offset of the first table}, shared with the kernel's helper kernels
    tables: dict = field(default_factory=lambda: {"base": None})
    scalars: dict = field(default_factory=dict)  # runtime_int's tables: name -> region offset
    layout: list = field(default_factory=list)  # the tables added: (offset from base, bytes)
    # reuse.Reuse.take for this instruction (module.build_module), or None; the key it filed
    # the instruction under; what it found: (function, attributes noted), or None
    reuse_take: object = None
    reuse_key: tuple = None
    taken: tuple = None

    @property
    def caps(self) -> TargetCaps:
        """What the target offers (vector lanes and registers, FPU, DSP...: target/caps.py)."""
        return self.target.caps

    @property
    def node(self):
        return self.instr.node

    @property
    def attrs(self):
        return self.instr.node.attrs if self.instr.node is not None else {}

    @property
    def params(self) -> list:
        """The distinct pointer arguments (one per operand address), in order of first use;
        a helper function the kernel calls takes these."""
        seen = {}
        for a in self.args:
            seen.setdefault(id(a), a)
        return list(seen.values())

    def args_from(self, params) -> list:
        """Per-operand arguments for another function whose leading parameters mirror
        `self.params` (the same operand-to-address mapping)."""
        index = {id(p): i for i, p in enumerate(self.params)}
        return [params[index[id(a)]] for a in self.args]

    def _arg(self, buf):
        return self.args[[id(x) for x in self.operands].index(id(buf))]

    @property
    def operands(self):
        return [x for x in self.instr.inputs if x is not None] + list(self.instr.outputs)

    def inp(self, i):
        buf = self.instr.inputs[i] if i < len(self.instr.inputs) else None
        if buf is not None and buf.layout and buf.layout.get("shared") and \
                buf.layout.get("for") != self.instr.name:
            # another band of this layer re-laid the constant out in place (pack_constant):
            # this kernel reads the model's layout, so it gets a copy of that
            return self.add_table(np.asarray(buf.value.const).reshape(-1), "original")
        if buf is not None and buf.region == "constant" and self.instr.node is not None and \
                self.instr.node.attrs.get("_band_of"):
            buf.raw_read = True  # no later band may re-lay it out in place (pack_constant)
        return None if buf is None else self._arg(buf)

    def out(self, i=0):
        return self._arg(self.instr.outputs[i])

    def in_buf(self, i) -> Buffer | None:
        return self.instr.inputs[i] if i < len(self.instr.inputs) else None

    def out_buf(self, i=0) -> Buffer:
        return self.instr.outputs[i]

    def readable(self, buf, floats: int) -> tuple[bool, bool]:
        """Whether the `floats` floats before and those after `buf` lie inside its memory
        region, which the application allocates whole: a load whose window strays that far
        past the buffer's ends (the masked-off lanes of an edge tile) reads memory that exists,
        and a blend may drop those lanes instead of a masked load."""
        region, off = buf.address
        margin = 4 * floats
        return off >= margin, off + buf.nbytes + margin <= self.prog.sizes.get(region, 0)

    def room_around(self, ptr, floats: int) -> bool:
        """`ptr` is an operand's argument (or an address computed from it) and every buffer the
        argument points to has `floats` floats of its region before and after it (readable):
        a window of that many floats with at least one element inside the buffer may be read
        whole."""
        while isinstance(ptr, ir.GEPInstr):  # an address computed from the argument
            ptr = ptr.pointer
        bufs = [b for b, a in zip(self.operands, self.args) if a is ptr]
        return bool(bufs) and all(all(self.readable(b, floats)) for b in bufs)

    def const(self, i) -> np.ndarray | None:
        buf = self.in_buf(i)
        return None if buf is None else buf.value.const

    def add_table(self, array: np.ndarray, name: str, shared: bool = True):
        """A read-only table computed at compile time (per-position divisors, resize taps...).
        It is appended to the constant region, so the object keeps no data and needs no
        relocations; returns a pointer to it. shared=False: this instruction's own, even
        where an equal table is already there (runtime_int)."""
        array = np.ascontiguousarray(array)
        # the same table for several instructions (the bands of one layer under patch-based
        # execution pack the same weights) is stored once: VWW int8 on the Cortex-M7 in 12
        # bands kept its constant region instead of growing it by 23 KB
        key = (array.dtype.str, array.shape, hashlib.sha1(array.tobytes()).digest())
        # ... but where bytes are cheap (vector targets), a small table stays the instruction's
        # own: an equal one elsewhere moved its offset from the instruction's other tables,
        # and equal kernels then differed in the code (DenseNet-121 int8's 3x3 layers, with
        # zero biases, did not share; Kernel.runtime_int)
        shared = shared and (self.caps.float_lanes == 1 or array.nbytes >= SHARED_TABLE)
        offset = self.prog.tables.get(key) if shared else None
        if offset is not None:
            if self.tables["base"] is None:
                self.tables["base"] = offset
            self.layout.append((offset - self.tables["base"], array.nbytes))
            return self.b.gep(self.cbase, [ir.Constant(self.intp, offset - self.tables["base"])],
                              inbounds=True, source_etype=cg.I8)
        buf = Buffer(f"{self.instr.name}_{name}", array.dtype, array.shape, "constant", data=array,
                     layout={"layout": name, "for": self.instr.name})
        buf.offset = align(self.prog.sizes["constant"])
        self.prog.sizes["constant"] = align(buf.offset + buf.nbytes)
        self.prog.constants.append(buf)
        if shared:
            self.prog.tables[key] = buf.offset
        if self.tables["base"] is None:
            self.tables["base"] = buf.offset
        self.layout.append((buf.offset - self.tables["base"], array.nbytes))
        return self.b.gep(self.cbase, [ir.Constant(self.intp, buf.offset - self.tables["base"])],
                          inbounds=True, source_etype=cg.I8)

    def taken_over(self, params) -> bool:
        """Asked by an emitter of a reuse.TABLED op once it has written its tables and before
        it emits code: True when an equal kernel laid out its tables the same way, whose
        function this instruction then calls (the emitter stops; module.build_module)."""
        self.taken = self.reuse_take(self, params) if self.reuse_take else None
        return self.taken is not None

    def runtime_int(self, value: int, name: str):
        """An i32 read from the constant region instead of an immediate in the code: kernels
        that differ only in such values (the int8 layers of one shape in a repeated block,
        each with its output zero point) are then byte-identical and compile once
        (module._share). The instruction's own 4 bytes, one per name, at the same place among
        its tables in every equal kernel (its numbers side by side in one table); the load is
        emitted where it is asked for (LLVM hoists it out of the loops: the constant region is
        read-only)."""
        at = self.scalars.get(name)
        if at is None:
            # the instruction's numbers share a 64-byte slot while they fit: one slot each
            # grew a 192-step quantized scan's constants by 16% (four numbers a QMul)
            block = self.scalars.get(_NUMBERS)
            if block is not None and block is self.prog.constants[-1] and \
                    block.nbytes < ALIGN and \
                    self.layout[-1] == (block.offset - self.tables["base"], block.nbytes):
                block.data = np.append(block.data, np.int32(value))
                block.shape = block.data.shape
                self.layout[-1] = (self.layout[-1][0], block.nbytes)
                at = block.offset + block.nbytes - 4
            else:
                self.add_table(np.array([value], np.int32), "numbers", shared=False)
                block = self.scalars[_NUMBERS] = self.prog.constants[-1]
                at = block.offset
            self.scalars[name] = at
        ptr = self.b.gep(self.cbase, [ir.Constant(self.intp, at - self.tables["base"])],
                         inbounds=True, source_etype=cg.I8)
        return self.b.load(ptr, typ=cg.I32, align=4)

    def c(self, value, ty=None):
        return cg.const(ty or self.intp, value)

    def for_range(self, stop, start=0, step=1, name="i"):
        return cg.for_range(self.b, stop, start, step, self.intp, name)

    def strided_loop(self, shape, strides_list, offsets=None, name="e", interleave=0,
                     unroll=None):
        return cg.strided_loop(self.b, shape, strides_list, offsets, self.intp, name, interleave,
                               unroll)

    def loop_nest(self, shape, name="d"):
        return cg.loop_nest(self.b, shape, self.intp, name)

    def load(self, ptr, off, dtype):
        return cg.load(self.b, ptr, off, cg.llvm_type(dtype))

    def store(self, value, ptr, off):
        if self.caps.float_lanes > 1 and not self.caps.cheap_masks:
            # LLVM 22 turns the vectorized store(select(c, v, load p), p) of an in-place Relu
            # or LeakyRelu into a masked store of v: AVX2's vmaskmovps, microcode on AMD cores
            # (the load side: Vec.load). A frozen value is not a select to it, and the Relu
            # becomes vmaxps. Zen 4, -mcpu=znver3, -instrument-profile: the 1D TCN's in-place
            # Relus on 128 x 400 floats 55 -> 4.7 K cycles, the model 3-6%. (Vec.store's
            # explicit vector kernels had no such stores in the 40 benchmark models.)
            value = cg.freeze(self.b, value)
        return cg.store(self.b, value, ptr, off)
