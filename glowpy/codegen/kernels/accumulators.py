"""Register tiles of MR x NV accumulators carried through reduction loops (Acc), and the
constant operands the register-blocked kernels read in their own packed order (pack_constant).
The vectors themselves (width, masked and strided loads) are in vectors.py."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.vectors import Vec, declare


class Acc:
    """MR x NV accumulator values, carried through reduction loops as phis (`loop`)."""

    def __init__(self, vec: Vec, mr: int, nv: int):
        self.vec, self.mr, self.nv = vec, mr, nv
        self.vals = [[vec.zero() for _ in range(nv)] for _ in range(mr)]
        ty = vec.ty
        name = f"llvm.fmuladd.{'f32' if vec.w == 1 else f'v{vec.w}f32'}"
        self.fmuladd = declare(vec.b.module, name, ir.FunctionType(ty, [ty, ty, ty]))

    def flat(self):
        return [v for row in self.vals for v in row]

    def set_flat(self, values):
        it = iter(values)
        self.vals = [[next(it) for _ in range(self.nv)] for _ in range(self.mr)]

    def loop(self, k, stop, start=0, name="r", body_fmas=None):
        """A reduction loop carrying the accumulators: `with acc.loop(k, n) as i: ...`.
        body_fmas: multiply-adds per iteration when the body is more than one tile step."""
        return _AccLoop(self, k, stop, start, name, body_fmas)

    def reduce(self, k, count: int, body, unroll: int = 1, name="r"):
        """body(i) for i in range(count) (count static), `unroll` bodies per loop iteration
        (fewer loop overheads per multiply-add), the remainder after the loop."""
        unroll = max(1, min(unroll, count))
        steps, rem = divmod(count, unroll)
        if steps == 1:
            for u in range(unroll):
                body(k.c(u))
        elif steps > 1:
            with self.loop(k, steps, name=name) as i:
                base = k.b.mul(i, k.c(unroll)) if unroll > 1 else i
                for u in range(unroll):
                    body(k.b.add(base, k.c(u)) if u else base)
        for u in range(rem):
            body(k.c(steps * unroll + u))

    def fma(self, a_vals, b_vecs):
        """acc[i][j] += a_vals[i] * b_vecs[j]; a None operand skips its row or column."""
        b = self.vec.b
        for i, a in enumerate(a_vals):
            if a is None:
                continue
            sa = a if a.type == self.vec.ty else self.vec.splat(a)  # (load_splat: already one)
            for j, v in enumerate(b_vecs):
                if v is not None:
                    self.vals[i][j] = b.call(self.fmuladd, [sa, v, self.vals[i][j]])

    def value(self, i, j):
        return self.vals[i][j]


class _AccLoop:
    def __init__(self, acc, k, stop, start, name, body_fmas):
        self.acc, self.k, self.stop, self.start, self.name = acc, k, stop, start, name
        self.body_fmas = body_fmas or acc.mr * acc.nv

    def __enter__(self):
        # vector targets: the body is already a register tile, copies only cost compile time
        # and code; scalar ones (Cortex-M7): unrolling a small body amortizes the loop's own
        # instructions (measured: fewer instructions up to 16 multiply-adds per iteration,
        # spills and more instructions beyond), as does copying a loop of up to 4 iterations.
        # Not on vector targets: there a copied loop over 3 input channels (an RGB stem) left
        # every weight broadcast of the tile invariant in the pixel loop around it, and LLVM
        # hoisted all of them out and spilled them (3x3 3 -> 16 + LeakyRelu on 416x416, AVX2
        # code, Zen 4: 3.39 -> 1.80 ms as a loop; + Relu 1.68 -> 1.62)
        acc = self.acc  # (soft float: every multiply-add is two library calls; no copies)
        short = 4 if acc.vec.w == 1 else 1
        unroll = (acc.vec.w == 1 and acc.vec.simd.fpu and self.body_fmas <= 16) or \
            (isinstance(self.stop, int) and isinstance(self.start, int) and self.stop - self.start <= short)
        self.cm = cg.for_range_carry(self.k.b, self.stop, acc.flat(), self.start,
                                     intp=self.k.intp, name=self.name, unroll=unroll)
        self.c = self.cm.__enter__()
        self.acc.set_flat(self.c.values)
        return self.c.index

    def __exit__(self, *exc):
        if exc[0] is None:
            self.c.carry(self.acc.flat())
        self.cm.__exit__(*exc)
        if exc[0] is None:
            self.acc.set_flat(self.c.results)
        return False


def _readers(prog) -> dict:
    """id(buffer) -> the instructions reading it (a band of a layer counted as the layer),
    indexed once per program: a scan of every instruction per packed constant made packing
    quadratic (4.4 of 49 s under cProfile compiling a 192-step quantized scan, 577 packed
    matrices)."""
    index = prog.memo.get("readers")
    if index is None or index[0] != len(prog.instrs):
        index = (len(prog.instrs), {})
        for ins in prog.instrs:
            key = ins.node.attrs.get("_band_of", id(ins)) if ins.node is not None else id(ins)
            for x in ins.inputs:
                index[1].setdefault(id(x), set()).add(key)
        prog.memo["readers"] = index
    return index[1]


def pack_constant(k, i: int, array: np.ndarray, name: str):
    """A pointer to `array` (a re-layout of constant input i) in the constant region. When the
    instruction is the constant's only reader the packed bytes replace the original ones (same
    size, so the region does not grow); otherwise they are appended as a table."""
    buf = k.in_buf(i)
    array = np.ascontiguousarray(array, dtype=buf.dtype)
    readers = _readers(k.prog).get(id(buf), ())
    if buf.region == "constant" and buf.base is None and len(readers) == 1 and \
            array.nbytes == buf.nbytes and not getattr(buf, "raw_read", False):
        # the only reader, or the bands of one layer (patch-based execution): the first packs
        # in place; a band packing the same bytes reads them there, a band packing others
        # gets a table, a band reading the model's layout a copy of it (Kernel.inp)
        if buf.layout is None:
            buf.data = array.reshape(-1)
            buf.layout = {"layout": name, "for": k.instr.name,
                          **({"shared": True} if k.instr.node.attrs.get("_band_of") else {})}
            return k._arg(buf)
        if buf.layout.get("shared") and buf.layout["layout"] == name and \
                np.array_equal(buf.data, array.reshape(-1)):
            return k._arg(buf)
    return k.add_table(array.reshape(-1), name)


def pack_panels(bmat: np.ndarray, nb: int) -> np.ndarray:
    """B (K, N) -> panels of nb columns (the last may be narrower), each (K, cols) row-major;
    the panel starting at column n0 starts at element n0 * K."""
    kk, n = bmat.shape
    return np.concatenate([np.ascontiguousarray(bmat[:, n0:n0 + nb]).reshape(-1)
                           for n0 in range(0, n, nb)])


def const_input(k, i: int):
    """Constant input i as a numpy array (its original layout), or None."""
    buf = k.in_buf(i)
    if buf is None or buf.value is None or buf.value.const is None:
        return None
    return np.asarray(buf.value.const)
