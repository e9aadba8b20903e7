"""Einsum kernel: a loop nest over the output labels, and inside it a loop nest over the summed
labels accumulating the product of the operands (strides from the op's EinsumPlan)."""
from __future__ import annotations

from glowpy.codegen import cgutils as cg
from glowpy.codegen.registry import emits
from glowpy.ir.ops.einsum import plan


@emits("Einsum")
def emit_einsum(k):
    b = k.b
    p = plan(k.node)
    y = k.out_buf()
    if y.nbytes == 0:
        return
    dt = y.dtype
    ety = cg.llvm_type(dt)
    floaty = cg.is_float(dt)
    mul, add = (b.fmul, b.fadd) if floaty else (b.mul, b.add)
    n = len(k.instr.inputs)
    acc_p = cg.alloca_in_entry(b, ety, "acc")
    out_st = p.out_strides + [cg.contiguous_strides(p.out_sizes)]
    with k.strided_loop(p.out_sizes or [1], [s or [0] for s in out_st], name="o") as offs:
        b.store(cg.const(ety, 0), acc_p)
        with k.strided_loop(p.sum_sizes or [1], [s or [0] for s in p.sum_strides], offs[:n],
                            name="s") as ioffs:
            prod = None
            for j, off in enumerate(ioffs):
                v = k.load(k.inp(j), off, dt)
                prod = v if prod is None else mul(prod, v)
            b.store(add(b.load(acc_p), prod), acc_p)
        k.store(b.load(acc_p), k.out(), offs[n])
