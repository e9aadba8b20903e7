"""FusedElementwise: an elementwise op and the epilogue steps fused into it, in one loop."""
from __future__ import annotations

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.elementwise.arith import interleave_for, scalar
from glowpy.codegen.kernels.epilogue import extras, immediate, run_steps
from glowpy.codegen.registry import emits
from glowpy.ir import epilogue


def fused_parts(k):
    """(the ops in order, the operands read, element(get)): the instruction's per-element code,
    get(j) giving operand j's element (scalars or vectors alike)."""
    node = k.node
    nb = epilogue.base_count(node)
    attrs = node.attrs
    if node.op == "Clip":
        attrs = dict(attrs, _bounds=epilogue._clip_bounds(node))
        base = [0]
    else:
        base = [j for j in range(nb) if k.in_buf(j) is not None]
    used = sorted(set(base) | set(extras(k)))
    ops = [node.op] + [st["op"] for st in epilogue.steps(node)]

    def element(get):
        acc = scalar(k.b, node.op, attrs, k.out_buf().dtype, [get(j) for j in base], k.caps)
        return run_steps(k, acc, get)
    return ops, used, element


@emits("FusedElementwise")
def emit_fused_elementwise(k):
    out = k.out_buf()
    ops, used, element = fused_parts(k)
    loaded = [j for j in used if immediate(k, j) is None]
    strides = [cg.broadcast_strides(k.in_buf(j).shape, out.shape) for j in loaded]
    with k.strided_loop(out.shape, strides + [cg.contiguous_strides(out.shape)],
                        interleave=interleave_for(k, ops, len(ops) > 1)) as offs:
        vals = {j: k.load(k.inp(j), o, k.in_buf(j).dtype) for j, o in zip(loaded, offs)}
        k.store(element(lambda j: vals[j] if j in vals else immediate(k, j)), k.out(), offs[-1])
    k.epilogue_done = True
