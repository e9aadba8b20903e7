"""Fused epilogues on accumulator vectors: the node's epilogue steps (glowpy/ir/epilogue.py,
run with epilogue.run_steps, whose per-element code is vector-safe) applied to whole vectors of
output elements before the single store, with the operands the steps read loaded as vectors
(contiguous, broadcast or gathered according to their broadcast strides)."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.epilogue import run_steps
from glowpy.codegen.kernels.vectors import Vec
from glowpy.ir import epilogue


# ops whose per-element code (elementwise.scalar) builds valid IR on vectors (checked for
# every epilogue op; Abs declares llvm.fabs through llvmlite, which names scalar types only)
VECTOR_SAFE = epilogue.SCALAR_OPS - {"Abs"}


class Finisher:
    """Writes accumulator vectors to the output through the node's fused epilogue.

    `lead` are the IR indices of the output dims before the lane dims, `lane_shape` the dims
    the lanes run over (flattened), p0 the flat position of lane 0 within them."""

    def __init__(self, k, vec: Vec, lane_shape):
        self.k, self.vec = k, vec
        self.out = k.out_buf()
        self.lane_shape = tuple(lane_shape)
        self.accumulate = k.instr.attrs.get("accumulate") is not None
        self.skip = 1 if self.accumulate else 0
        self.steps = epilogue.steps(k.node)[self.skip:] if k.node is not None else []
        extras = {a for st in self.steps for a in st["args"] if a is not None}
        self.vector_ok = all(st["op"] in VECTOR_SAFE for st in self.steps) and all(
            k.in_buf(j).dtype == np.float32 for j in extras)
        if k.node is not None and epilogue.steps(k.node) and self.vector_ok:
            k.epilogue_done = True  # else module.py's sweep runs the steps after the kernel

    def _scalar(self, j):
        buf = self.k.in_buf(j)
        c = buf.value.const if buf.value is not None else None
        return float(c.reshape(-1)[0]) if c is not None and c.size == 1 else None

    def uniform(self) -> bool:
        """Every step's operands are single constants (Relu, Clip, LeakyRelu, x * 0.5, ...):
        the steps are the same function at every output element, so they may run on values
        whose lanes are laid out in any order (before a transpose, not after it)."""
        return bool(self.steps) and self.vector_ok and all(
            a is None or self._scalar(a) is not None for st in self.steps for a in st["args"])

    def apply_uniform(self, acc, vec: Vec):
        """The steps (uniform()) on a vector of `vec`'s type, stored by the caller."""
        return run_steps(self.k, acc, lambda j: cg.const(vec.ty, self._scalar(j)), self.skip)

    def operand(self, j, lead, p0, mask):
        """Operand j of the epilogue at the lanes, as a vector."""
        k, vec, b = self.k, self.vec, self.k.b
        buf = k.in_buf(j)
        if self._scalar(j) is not None:
            return cg.const(vec.ty, self._scalar(j))
        base, tail = self._at(j, lead)
        if all(s == 0 for s in tail):
            return vec.splat(k.load(k.inp(j), base, buf.dtype))
        if self._contiguous(tail):
            return vec.load(k.inp(j), b.add(base, p0), mask)
        return self._gather(j, base, p0, tail)  # another broadcast pattern: lane by lane

    def _at(self, j, lead):
        """(offset of operand j at the lead indices, its strides along the lane dims)."""
        st = cg.broadcast_strides(self.k.in_buf(j).shape, self.out.shape)
        return cg.linear(self.k.b, lead, st[:len(lead)], 0, self.k.intp), st[len(lead):]

    def _contiguous(self, tail) -> bool:
        return list(tail) == cg.contiguous_strides(self.lane_shape)

    def _gather(self, j, base, p0, tail):
        k, vec, b = self.k, self.vec, self.k.b
        buf = k.in_buf(j)
        val = ir.Constant(vec.ty, ir.Undefined) if vec.w > 1 else None
        for l in range(vec.w):
            rem, off = b.add(p0, k.c(l)), base
            for d, s, ts in zip(self.lane_shape, cg.contiguous_strides(self.lane_shape), tail):
                q = b.udiv(rem, k.c(s)) if s > 1 else rem
                rem = b.urem(rem, k.c(s)) if s > 1 else k.c(0)
                q = b.urem(q, k.c(d))  # lanes past the end (masked later) stay in range
                off = b.add(off, b.mul(q, k.c(ts)))
            x = k.load(k.inp(j), off, buf.dtype)
            if vec.w == 1:
                return x
            val = b.insert_element(val, x, ir.Constant(cg.I32, l))
        return val

    def prefetch(self, lead, p0, out_off):
        """Prefetches what finish() at these lanes touches, to be issued a reduction ahead of
        it: the output vector, for writing, and each residual operand read contiguously."""
        k, b = self.k, self.k.b
        self.vec.prefetch(k.out(), out_off, write=True)
        if not (self.steps and self.vector_ok):
            return
        for j in sorted({a for st in self.steps for a in st["args"] if a is not None}):
            if self._scalar(j) is not None:
                continue
            base, tail = self._at(j, lead)
            if self._contiguous(tail):
                self.vec.prefetch(k.inp(j), b.add(base, p0))

    def finish(self, acc, lead, p0, out_off, mask=None):
        """Stores acc (+ the residual already in the output, + the epilogue) at out[out_off]."""
        k, vec, b = self.k, self.vec, self.k.b
        if self.accumulate:
            acc = b.fadd(acc, vec.load(k.out(), out_off, mask))
        if self.steps and self.vector_ok:
            acc = run_steps(k, acc, lambda j: self.operand(j, lead, p0, mask), self.skip)
        vec.store(acc, k.out(), out_off, mask)


class LaneFinisher(Finisher):
    """Finisher for lanes that step along one output dim (`lane_dim`, e.g. the channels of a
    channel-vectorized Conv): lanes are gathered and scattered at that dim's stride."""

    def __init__(self, k, vec: Vec, lane_dim: int):
        super().__init__(k, vec, ())
        self.lane_dim = lane_dim
        self.ost = cg.contiguous_strides(self.out.shape)

    def finish_at(self, acc, idx, mask=None):
        """acc holds out[idx with idx[lane_dim] + l] for lane l (idx: IR values, all dims)."""
        k, vec, b = self.k, self.vec, self.k.b
        d = self.lane_dim
        off = cg.linear(b, idx, self.ost, 0, k.intp)
        lanes = [l * self.ost[d] for l in range(vec.w)]
        if self.accumulate:
            acc = b.fadd(acc, vec.gather(k.out(), off, lanes, mask))
        if self.steps and self.vector_ok:
            def get(j):
                buf = k.in_buf(j)
                if self._scalar(j) is not None:
                    return cg.const(vec.ty, self._scalar(j))
                st = cg.broadcast_strides(buf.shape, self.out.shape)
                base = cg.linear(b, idx, st, 0, k.intp)
                if st[d] == 0:
                    return vec.splat(k.load(k.inp(j), base, buf.dtype))
                return vec.gather(k.inp(j), base, [l * st[d] for l in range(vec.w)], mask)
            acc = run_steps(k, acc, get, self.skip)
        vec.scatter(acc, k.out(), off, lanes, mask)
