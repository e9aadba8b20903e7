"""Conv weights computed at run time, packed by the kernel itself.

StyleGAN2's modulated convolutions (the weights scaled per input channel by a style and
demodulated per output channel), CondConv's mixtures of expert filters and hypernetworks
compute a Conv's weights in the graph. The register-tiled kernels read weights in a layout
made at compile time from the constant (tiles._pack); without a constant these layers took
the scalar direct loop: Zen 4, AVX2 code, a StyleGAN2-style synthesis net 211 ms against
onnxruntime's 35, three CondConv-style 128 -> 128 3x3 layers on 56x56 149 ms against 28.

So such a Conv gets a scratch output of the weights' size in the activation region
(`add_scratch`, the backend's post-lowering step: the planner places it like any buffer, live
during its instruction only), and its kernel first copies the weights into it in the layout it
would have packed at compile time (`pack`: M x C x KH x KW loads and stores, against the
convolution's M x C x KH x KW x positions multiply-adds; on vector targets W x W tiles
transposed in registers). The channel-vectorized tiles
then run as on constant weights; without the scratch (memory-first targets) the pixel tiles
read the weights in the model's layout. Same layers, same machine: 42.5 and 34.4 ms through
the pixel tiles reading the model's layout, 29.8 and 25.8 ms packed (onnxruntime 34.9 and
27.8)."""
from __future__ import annotations

import numpy as np

from glowpy.codegen.kernels.tensor.movement import transposed
from glowpy.codegen.kernels.tiles import _blocks
from glowpy.codegen.kernels.vectors import Simd, Vec
from glowpy.ir.program import ACTIVATION, Buffer

SUFFIX = "_packed_weights"  # name suffix of the scratch output


def applies(ins) -> bool:
    """A float Conv instruction of 1-D or 2-D windows whose weights are not a constant."""
    if ins.op != "Conv" or ins.node is None or len(ins.inputs) < 2:
        return False
    x, w, y = ins.inputs[0], ins.inputs[1], ins.outputs[0]
    return all(np.dtype(b.dtype) == np.float32 for b in (x, w, y)) and \
        3 <= len(x.shape) <= 4 and (w.value is None or w.value.const is None)


def add_scratch(prog) -> None:
    """Each run-time-weights Conv gets its packing scratch as an extra output (before
    planning, as Winograd's transformed tiles do)."""
    for ins in prog.instrs:
        if applies(ins) and len(ins.outputs) == 1:
            w = ins.inputs[1]
            ins.outputs = [ins.outputs[0], Buffer(ins.name + SUFFIX, np.dtype(np.float32),
                                                  (int(np.prod(w.shape)),), ACTIVATION)]


def scratch(k):
    """The instruction's packing scratch, or None."""
    return next((b for b in k.instr.outputs[1:] if b.name.endswith(SUFFIX)), None)


def pack(k, s, mr: int, axes) -> object:
    """Copies the weights (input 1, (M, cg, KH, KW)) into the scratch in tiles._pack's layout
    -- per group and block of mr output channels (the last one smaller), the reduction dims in
    `axes` order (1 = ic, 2 = kh, 3 = kw), the block's channels innermost -- and returns the
    scratch's pointer."""
    b = k.b
    src, dst = k.inp(1), k.out(k.instr.outputs.index(scratch(k)))
    dims = {1: s.cg, 2: s.kh, 3: s.kw}
    full, tail = _blocks(s.mg, mr)
    vec = Vec(k, Simd.of(k.caps))
    w = vec.w

    def position(q):
        """Where reduction element q (the model's order: ic, kh, kw) goes in `axes` order."""
        taps = s.kh * s.kw
        at = {1: b.udiv(q, k.c(taps)), 2: b.udiv(b.urem(q, k.c(taps)), k.c(s.kw)),
              3: b.urem(q, k.c(s.kw))}
        pos = k.c(0)
        for a in axes:
            pos = b.add(b.mul(pos, k.c(dims[a])), at[a])
        return pos

    def block(gi, o0, r):
        first = b.mul(b.add(b.mul(gi, k.c(s.mg)), o0), k.c(s.ktot))
        if w > 1 and r % w == 0 and s.ktot % w == 0:
            # W channels x W reduction elements: W row loads, a register transpose, and W
            # stores of W channels each (2.8 cycles an element scalar on a Zen 4, a 256 ->
            # 256 3x3 layer's 590K weights 0.4 ms)
            with k.for_range(s.ktot // w, name="wq") as qb:
                q0 = b.mul(qb, k.c(w))
                for i0 in range(0, r, w):
                    rows = [vec.load(src, b.add(first, b.add(k.c((i0 + c) * s.ktot), q0)))
                            for c in range(w)]
                    for a, col in enumerate(transposed(b, rows)):
                        out = b.add(first, b.add(b.mul(position(b.add(q0, k.c(a))), k.c(r)), k.c(i0)))
                        vec.store(col, dst, out)
            return
        with k.for_range(s.ktot, name="wq") as q:  # element by element, the model's order
            out = b.add(first, b.mul(position(q), k.c(r)))
            for i in range(r):
                v = k.load(src, b.add(b.add(first, k.c(i * s.ktot)), q), np.float32)
                k.store(v, dst, b.add(out, k.c(i)))

    with k.for_range(s.g, name="wg") as gi:
        if full:
            with k.for_range(full, name="wb") as ob:
                block(gi, b.mul(ob, k.c(mr)), mr)
        if tail:
            block(gi, k.c(full * mr), tail)
    return dst
