"""Fused epilogues in kernels (the IR form is glowpy/ir/epilogue.py).

Hooks for host kernels (each sets `k.epilogue_done`):
  * `apply_at(k, acc, idx)`  -- the epilogue on one value whose full output index is `idx`
    (Gemm's per-element finish);
  * `epilogue_block(k, lead)` -- in place over the output block whose leading indices are
    `lead` (Conv per output plane; with no `lead`, the whole output: the generic sweep that
    module.py runs after any host kernel that did not apply its epilogue itself);
  * `init_plane(k, init, base, count)` -- a Conv output plane's initial value, which is the
    residual already in the output buffer plus the bias when lowering chose "accumulate".
The kernels that exist because of fusion: FusedElementwise (elementwise/fused.py) and
ConvPointwiseInPlace (conv/pointwise_inplace.py)."""
from __future__ import annotations


from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.elementwise.arith import scalar
from glowpy.ir import epilogue


def immediate(k, j):
    """Operand j as an immediate if it is a one-element constant, else None."""
    buf = k.in_buf(j)
    c = buf.value.const if buf.value is not None else None
    if c is not None and c.size == 1:
        return cg.const(cg.llvm_type(buf.dtype), c.item())
    return None


def _skip(k) -> int:
    """Epilogue steps the kernel's initialization already did (the accumulated residual)."""
    return 1 if k.instr.attrs.get("accumulate") is not None else 0


def extras(k, skip=0) -> list[int]:
    return sorted({a for st in epilogue.steps(k.node)[skip:] for a in st["args"] if a is not None})


def run_steps(k, acc, get, skip=0):
    """acc after the node's epilogue steps; get(j) gives operand j's element value."""
    dtype = k.out_buf().dtype
    for st in epilogue.steps(k.node)[skip:]:
        args = [acc if a is None else get(a) for a in st["args"]]
        acc = scalar(k.b, st["op"], st["attrs"], dtype, args, k.caps)
    return acc


def apply_at(k, acc, idx):
    """The epilogue on `acc`, the output element at full index idx (IR values)."""
    if k.node is None or not epilogue.steps(k.node):
        return acc
    out = k.out_buf()
    k.epilogue_done = True

    def get(j):
        imm = immediate(k, j)
        if imm is not None:
            return imm
        st = cg.broadcast_strides(k.in_buf(j).shape, out.shape)
        return k.load(k.inp(j), cg.linear(k.b, idx, st, 0, k.intp), k.in_buf(j).dtype)

    return run_steps(k, acc, get, _skip(k))


def epilogue_block(k, lead=()):
    """Applies the epilogue in place to out[lead..., :, ...]."""
    if k.node is None or not epilogue.steps(k.node):
        return
    k.epilogue_done = True
    skip = _skip(k)
    out = k.out_buf()
    b = k.b
    lead = list(lead)
    nl = len(lead)
    ost = cg.contiguous_strides(out.shape)
    loaded = [j for j in extras(k, skip) if immediate(k, j) is None]
    bst = {j: cg.broadcast_strides(k.in_buf(j).shape, out.shape) for j in loaded}
    offsets = [cg.linear(b, lead, ost[:nl], 0, k.intp)] + \
        [cg.linear(b, lead, bst[j][:nl], 0, k.intp) for j in loaded]
    with k.strided_loop(out.shape[nl:] or (1,), [ost[nl:] or [0]] + [bst[j][nl:] or [0] for j in loaded],
                        offsets) as offs:
        where = dict(zip(loaded, offs[1:]))
        acc = k.load(k.out(), offs[0], out.dtype)

        def get(j):
            imm = immediate(k, j)
            return imm if imm is not None else k.load(k.inp(j), where[j], k.in_buf(j).dtype)

        val = run_steps(k, acc, get, skip)
        k.store(val, k.out(), offs[0])


def epilogue_sweep(k):
    epilogue_block(k, ())


def init_plane(k, init, base, count):
    """out[base:base+count] = init, or += init when the output holds the residual to add."""
    b = k.b
    acc = k.instr.attrs.get("accumulate") is not None
    with k.for_range(count, name="z") as z:
        i = b.add(base, z)
        k.store(b.fadd(k.load(k.out(), i, k.out_buf().dtype), init) if acc else init, k.out(), i)
