"""The transforms of Winograd F(m x m, r x r) (Lavin & Gray, 2015): alpha = m + r - 1 input
points per dimension, Y = A^T [(G g G^T) . (B^T d B)] A. F(2, 3), F(4, 3) and F(2, 5).

F(2, 3) interpolates at 0, 1, -1 and infinity; F(4, 3) and F(2, 5) at 0, 1, -1, 2, -2 and
infinity: the same six points, so the same B^T (it depends on the points alone); G evaluates
the kernel at the points (row i: f_i p_i^j, the scale f_i that B^T's normalization leaves)
and A^T the output polynomial (row j: p_i^j, the point at infinity in the last row only).
fp32 error: a few units in the 7th digit of the largest output on deep channels, see
tests/test_winograd.py. The matrices (`BT` by alpha, `G` and `AT` by (m, r)) are the
definition and what the weight transform and the tests use; `input_1d` and `output_1d` apply
B^T and A^T factored (shared sums and differences, multiply-adds for the 2/4/5/8 coefficients:
the six-point B^T in 12 operations instead of the matrix's 20, F4's A^T in 10 instead of 14).
They are written against an arithmetic (`Ir` emits LLVM IR, `Count` counts operations for the
cost model, numpy arrays work through `Numeric`), so the code the kernel runs is the code the
tests check against the matrices."""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.vectors import declare

BT = {4: np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], float),
      6: np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                   [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], float)}
G = {(2, 3): np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]]),
     (4, 3): np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                       [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]]),
     (2, 5): np.array([[1 / 4, 0, 0, 0, 0], [-1 / 6] * 5, [-1 / 6, 1 / 6, -1 / 6, 1 / 6, -1 / 6],
                       [1 / 24, 1 / 12, 1 / 6, 1 / 3, 2 / 3],
                       [1 / 24, -1 / 12, 1 / 6, -1 / 3, 2 / 3], [0, 0, 0, 0, 1]])}
AT = {(2, 3): np.array([[1, 1, 1, 0], [0, 1, -1, -1]], float),
      (4, 3): np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
                        [0, 1, -1, 8, -8, 1]], float),
      (2, 5): np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 1]], float)}
# output tile sizes m per kernel size r. F(4, 5) would take eight points (+-1/2 too), 64 values a
# tile in registers and its weights' error grows with the points' spread; not built
SIZES = {3: (2, 4), 5: (2,)}


def alpha(m: int, r: int = 3) -> int:
    return m + r - 1


def input_1d(ar, d: list) -> list:
    """B^T d for alpha values d (a column or a row of an input tile)."""
    if len(d) == 4:
        return [ar.sub(d[0], d[2]), ar.add(d[1], d[2]), ar.sub(d[2], d[1]), ar.sub(d[1], d[3])]
    a, b = ar.fma(-4, d[2], d[4]), ar.fma(-4, d[1], d[3])  # rows 1, 2: a +- b
    c, e = ar.sub(d[4], d[2]), ar.sub(d[3], d[1])  # rows 3, 4: c +- 2e
    return [ar.fma(4, d[0], ar.fma(-5, d[2], d[4])), ar.add(a, b), ar.sub(a, b),
            ar.fma(2, e, c), ar.fma(-2, e, c), ar.fma(4, d[1], ar.fma(-5, d[3], d[5]))]


def output_1d(m: int, ar, x: list) -> list:
    """A^T x for alpha values x (a column or a row of a tile of GEMM results): m of them."""
    if len(x) == 4:
        return [ar.add(ar.add(x[0], x[1]), x[2]), ar.sub(ar.sub(x[1], x[2]), x[3])]
    s1, d1 = ar.add(x[1], x[2]), ar.sub(x[1], x[2])
    s2, d2 = ar.add(x[3], x[4]), ar.sub(x[3], x[4])
    if m == 2:  # F(2, 5)
        return [ar.add(ar.add(x[0], s1), s2), ar.add(ar.fma(2, d2, d1), x[5])]
    return [ar.add(ar.add(x[0], s1), s2), ar.fma(2, d2, d1), ar.fma(4, s2, s1),
            ar.add(ar.fma(8, d2, d1), x[5])]


def input_2d(ar, d: list) -> list:
    """B^T d B of an alpha x alpha tile d[row][col], as rows."""
    a = len(d)
    t = [input_1d(ar, [d[r][e] for r in range(a)]) for e in range(a)]  # B^T d, by column
    return [input_1d(ar, [t[e][r] for e in range(a)]) for r in range(a)]


def output_2d(m: int, ar, x: list) -> list:
    """A^T x A of an alpha x alpha tile x[row][col], as m rows of m values."""
    a = len(x)
    t = [output_1d(m, ar, [x[r][e] for r in range(a)]) for e in range(a)]  # A^T x: m x alpha
    return [output_1d(m, ar, [t[e][r] for e in range(a)]) for r in range(m)]


class Numeric:
    """The transforms on numbers or numpy arrays (tests, reference)."""

    @staticmethod
    def add(x, y):
        return x + y

    @staticmethod
    def sub(x, y):
        return x - y

    @staticmethod
    def fma(c, x, y):
        return c * x + y


class Count(Numeric):
    """The transforms' operation count, one per add, subtract or multiply-add (the cost model)."""

    def __init__(self):
        self.ops = 0

    def add(self, x, y):
        self.ops += 1

    sub = add

    def fma(self, c, x, y):
        self.ops += 1


def ops(m: int, r: int = 3) -> tuple[int, int]:
    """Vector operations of one tile's (input, output) transform."""
    x = [[None] * alpha(m, r) for _ in range(alpha(m, r))]
    c_in, c_out = Count(), Count()
    input_2d(c_in, x)
    output_2d(m, c_out, x)
    return c_in.ops, c_out.ops


class Ir:
    """The transforms as LLVM IR on vectors of `vec` (multiply-adds as llvm.fmuladd: fused
    where the target has FMA)."""

    def __init__(self, vec):
        self.vec, self.b = vec, vec.b
        name = f"llvm.fmuladd.{'f32' if vec.w == 1 else f'v{vec.w}f32'}"
        self.fmuladd = declare(vec.b.module, name, ir.FunctionType(vec.ty, [vec.ty] * 3))

    def add(self, x, y):
        return self.b.fadd(x, y)

    def sub(self, x, y):
        return self.b.fsub(x, y)

    def fma(self, c, x, y):
        return self.b.call(self.fmuladd, [cg.const(self.vec.ty, float(c)), x, y])


def weights(w: np.ndarray, m: int, mr: int, points_outer: bool = False) -> np.ndarray:
    """U = G g G^T per (k, c) (r x r kernels g), packed [K/MR][alpha^2][C][MR] (K padded with
    zeros to MR), in the GEMM's read order; `points_outer`: [alpha^2][K/MR][C][MR]
    (winograd_plan.points_outer)."""
    kk, c, r = w.shape[:3]
    a2 = alpha(m, r) ** 2
    g = G[(m, r)]
    u = np.einsum("ai,kcij,bj->kcab", g, w.astype(np.float64), g).reshape(kk, c, a2)
    nkb = math.ceil(kk / mr)
    p = np.zeros((nkb * mr, c, a2))
    p[:kk] = u
    return p.reshape(nkb, mr, c, a2).transpose((3, 0, 2, 1) if points_outer else (0, 3, 2, 1)
                                               ).astype(np.float32)
