"""Fused epilogues in kernels (the IR form is glowpy/ir/epilogue.py), and the kernels that
only exist because of fusion or in-place lowering.

Hooks for host kernels (each sets `k.epilogue_done`):
  * `apply_at(k, acc, idx)`  -- the epilogue on one value whose full output index is `idx`
    (Gemm's per-element finish);
  * `epilogue_block(k, lead)` -- in place over the output block whose leading indices are
    `lead` (Conv per output plane; with no `lead`, the whole output: the generic sweep that
    module.py runs after any host kernel that did not apply its epilogue itself);
  * `init_plane(k, init, base, count)` -- a Conv output plane's initial value, which is the
    residual already in the output buffer plus the bias when lowering chose "accumulate".
Kernels: FusedElementwise (an elementwise op and its steps in one loop) and
ConvPointwiseInPlace (1x1 convolution writing over its input, a tile at a time)."""
from __future__ import annotations

import numpy as np

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels import emits
from glowpy.codegen.kernels.elementwise import scalar
from glowpy.ir import epilogue


def _immediate(k, j):
    """Operand j as an immediate if it is a one-element constant, else None."""
    buf = k.in_buf(j)
    c = buf.value.const if buf.value is not None else None
    if c is not None and c.size == 1:
        return cg.const(cg.llvm_type(buf.dtype), c.item())
    return None


def _skip(k) -> int:
    """Epilogue steps the kernel's initialization already did (the accumulated residual)."""
    return 1 if k.instr.attrs.get("accumulate") is not None else 0


def _extras(k, skip=0) -> list[int]:
    return sorted({a for st in epilogue.steps(k.node)[skip:] for a in st["args"] if a is not None})


def run_steps(k, acc, get, skip=0):
    """acc after the node's epilogue steps; get(j) gives operand j's element value."""
    dtype = k.out_buf().dtype
    for st in epilogue.steps(k.node)[skip:]:
        args = [acc if a is None else get(a) for a in st["args"]]
        acc = scalar(k.b, st["op"], st["attrs"], dtype, args)
    return acc


def apply_at(k, acc, idx):
    """The epilogue on `acc`, the output element at full index idx (IR values)."""
    if k.node is None or not epilogue.steps(k.node):
        return acc
    out = k.out_buf()
    k.epilogue_done = True

    def get(j):
        imm = _immediate(k, j)
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
    extras = [j for j in _extras(k, skip) if _immediate(k, j) is None]
    bst = {j: cg.broadcast_strides(k.in_buf(j).shape, out.shape) for j in extras}
    offsets = [cg.linear(b, lead, ost[:nl], 0, k.intp)] + \
        [cg.linear(b, lead, bst[j][:nl], 0, k.intp) for j in extras]
    with k.strided_loop(out.shape[nl:] or (1,), [ost[nl:] or [0]] + [bst[j][nl:] or [0] for j in extras],
                        offsets) as offs:
        where = dict(zip(extras, offs[1:]))
        acc = k.load(k.out(), offs[0], out.dtype)

        def get(j):
            imm = _immediate(k, j)
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


@emits("FusedElementwise")
def emit_fused_elementwise(k):
    node = k.node
    out = k.out_buf()
    nb = epilogue.base_count(node)
    attrs = node.attrs
    if node.op == "Clip":
        attrs = dict(attrs, _bounds=epilogue._clip_bounds(node))
        base = [0]
    else:
        base = [j for j in range(nb) if k.in_buf(j) is not None]
    used = sorted(set(base) | set(_extras(k)))
    loaded = [j for j in used if _immediate(k, j) is None]
    strides = [cg.broadcast_strides(k.in_buf(j).shape, out.shape) for j in loaded]
    with k.strided_loop(out.shape, strides + [cg.contiguous_strides(out.shape)]) as offs:
        vals = {j: k.load(k.inp(j), o, k.in_buf(j).dtype) for j, o in zip(loaded, offs)}

        def get(j):
            return vals[j] if j in vals else _immediate(k, j)

        acc = scalar(k.b, node.op, attrs, out.dtype, [get(j) for j in base])
        k.store(run_steps(k, acc, get), k.out(), offs[-1])
    k.epilogue_done = True


def _spatial_offset(k, p, shape, strides):
    """Offset of flat spatial position p (IR) for an operand with these spatial strides."""
    b = k.b
    if all(s == 0 for s in strides):
        return k.c(0)
    if list(strides) == cg.contiguous_strides(shape):
        return p
    idx, rem = [], p
    for d, st in zip(shape, cg.contiguous_strides(shape)):
        q = b.udiv(rem, k.c(st)) if st > 1 else rem
        rem = b.urem(rem, k.c(st)) if st > 1 else k.c(0)
        idx.append(q)
    return cg.linear(b, idx, strides, 0, k.intp)


@emits("ConvPointwiseInPlace")
def emit_conv_pointwise_inplace(k):
    """y = W x + B for a 1x1 convolution whose output overwrites its (dying) input.

    For each tile of `tile` spatial positions: every output channel's tile is accumulated into
    the scratch buffer from the input tile of every channel, the epilogue runs, and the result
    is written back. Writing y[oc, tile] clobbers only x[oc, tile] (already read) or bytes past
    the input (lowering checks N == 1 or M <= C), so it is safe in place. Tile lengths are
    static (full tiles, then one tail) so the innermost loop unrolls and its accumulators stay
    in registers across the input-channel loop."""
    b = k.b
    x, y = k.in_buf(0), k.out_buf(0)
    n_, c = x.shape[:2]
    m = y.shape[1]
    sp = x.shape[2:]
    plane = int(np.prod(sp))
    tile = int(k.instr.attrs["tile"])
    with k.for_range(n_, name="n") as n:
        full = plane // tile
        if full:
            with k.for_range(full, name="tile") as ti:
                _pointwise_tile(k, n, b.mul(ti, k.c(tile)), tile, c, m, plane, sp)
        if plane % tile:
            _pointwise_tile(k, n, k.c(full * tile), plane % tile, c, m, plane, sp)
    k.epilogue_done = True


def _pointwise_tile(k, n, t0, tl: int, c: int, m: int, plane: int, sp):
    b = k.b
    x, w, y = k.in_buf(0), k.in_buf(1), k.out_buf(0)
    scratch = k.out(1)
    tile = int(k.instr.attrs["tile"])
    dt = y.dtype
    f = cg.llvm_type(dt)
    bias = k.inp(2)
    xb = b.add(b.mul(n, k.c(c * plane)), t0)
    yb = b.add(b.mul(n, k.c(m * plane)), t0)
    extras = [j for j in _extras(k) if _immediate(k, j) is None]
    bst = {j: cg.broadcast_strides(k.in_buf(j).shape, y.shape) for j in extras}
    ocb = 4 if m % 4 == 0 else 2 if m % 2 == 0 else 1  # output channels sharing each x load
    with k.for_range(m // ocb, name="ocb") as ob:
        oc0 = b.mul(ob, k.c(ocb))
        for j in range(ocb):
            oc = b.add(oc0, k.c(j))
            init = k.load(bias, oc, dt) if bias is not None else cg.const(f, 0)
            for t in range(tl):
                k.store(init, scratch, b.add(b.mul(oc, k.c(tile)), k.c(t)))
        with k.for_range(c, name="ic") as ic:
            ws = [k.load(k.inp(1), b.add(b.mul(b.add(oc0, k.c(j)), k.c(c)), ic), w.dtype)
                  for j in range(ocb)]
            xrow = b.add(xb, b.mul(ic, k.c(plane)))
            for t in range(tl):
                xv = k.load(k.inp(0), b.add(xrow, k.c(t)), x.dtype)
                for j in range(ocb):
                    si = b.add(b.mul(b.add(oc0, k.c(j)), k.c(tile)), k.c(t))
                    k.store(b.fadd(k.load(scratch, si, dt), b.fmul(ws[j], xv, flags=("contract",)),
                                   flags=("contract",)), scratch, si)
    with k.for_range(m, name="oc") as oc:
        row = b.mul(oc, k.c(tile))
        yrow = b.add(yb, b.mul(oc, k.c(plane)))
        with k.for_range(tl, name="t") as t:
            v = k.load(scratch, b.add(row, t), dt)
            p = b.add(t0, t)

            def get(j, oc=oc, p=p):
                imm = _immediate(k, j)
                if imm is not None:
                    return imm
                st = bst[j]
                off = b.add(cg.linear(b, [n, oc], st[:2], 0, k.intp), _spatial_offset(k, p, sp, st[2:]))
                return k.load(k.inp(j), off, k.in_buf(j).dtype)

            k.store(run_steps(k, v, get), k.out(0), b.add(yrow, t))
