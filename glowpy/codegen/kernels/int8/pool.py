"""int8/uint8 MaxPool and QAvgPool on vector targets: the float pools' window loops
(pool/vector.py: NV vectors of output columns a tile, the window's valid rows a run-time range,
each row's input span loaded as whole pieces and the kernel columns picked out by shuffles)
over integer folds.

- MaxPool folds bytes: the maximum of w-byte vectors (one vpmaxub/vpmaxsb a piece and row).
- QAvgPool folds sums: each byte piece widened to int32 lanes and added (exact). At the store
  the taps' zero points come off, then either the requantization of the integer GEMMs (different
  scales) or the division by the count. That division is one float division a vector: sums and
  counts are exact in float32, and for counts up to MAX_COUNT the correctly rounded quotient
  keeps every half-integer on its side (see `divide`), so the rounding of qops.div_round
  follows exactly.

The scalar kernels did one integer division an output (QAvgPool, int8/quant.py) or a
compare-and-select a tap (MaxPool, pool/direct.py): Inception int8's two 3x3 stride-1
QAvgPools took 6.6M and 1.7M ticks (Zen 5), 1.1x onnxruntime's whole model with them.
Scalar targets keep those kernels: their integer division is cheap next to float division
(Cortex-M7: SDIV 2-12 cycles, VDIV.F32 14) and they have no vectors to fill.

Planes stay the outermost loop and each output plane is written within its own iteration,
reading only its own input plane (masked-off lanes may load neighbouring bytes of the region and
drop them): the streaming order inplace.INT_STREAMING_OPS grants overlaps for."""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.int8.quant import I32, clamp, qavg_store, requantize
from glowpy.codegen.kernels.pool.vector import covers_plane, emit_pool
from glowpy.codegen.kernels.vectors import Vec, load_bytes, store_runs
from glowpy.codegen.registry import variant
from glowpy.ir import qmath

I8 = ir.IntType(8)
# the largest tap count divided in float (`divide`): quotients below 512 in magnitude carry an
# error of at most 2**-16, and a quotient d/c that is not a half-integer lies at least 1/(2c)
# from one; 1/(2 * 16384) = 2**-15 keeps them apart with room. Larger windows (a global pool
# of a 128x128 plane) keep the integer division of the scalar kernel.
MAX_COUNT = 16384


def plan(k):
    """{} for int8/uint8 MaxPool (no indices output) and QAvgPool with int8/uint8 outputs of
    1-D and 2-D windows on vector targets, whose input span per vector stays within the vector
    cap (the piece loads; wider spans come only from absurd strides or dilations, or a window
    over the whole plane, which is reduced as one run) and whose counts MAX_COUNT allows, else
    None."""
    x, y = k.in_buf(0), k.out_buf()
    if k.caps.float_lanes == 1 or len(k.instr.outputs) > 1:
        return None
    if np.dtype(x.dtype) not in (np.dtype(np.int8), np.dtype(np.uint8)) or \
            np.dtype(y.dtype) not in (np.dtype(np.int8), np.dtype(np.uint8)):
        return None
    node = k.node
    win = node.opdef.window(node)
    if len(win.in_size) not in (1, 2):
        return None
    w = k.caps.float_lanes
    span = (w - 1) * win.strides[-1] + (win.kernel[-1] - 1) * win.dilations[-1] + 1
    if span > 16 * max(w, 4) and not covers_plane(win):
        return None
    if node.op == "QAvgPool" and (int(node.opdef.counts(node).max()) > MAX_COUNT
                                  or int(node.opdef.taps(node).max()) > MAX_COUNT):
        return None
    if node.op == "MaxPool" and x.dtype != y.dtype:
        return None
    return {}


@variant("MaxPool", "int8_vector", rank=20, plan=plan)
def emit_maxpool(k, params):
    emit_pool(k, lambda vec, s: ByteFold(k, vec, s, True))


@variant("QAvgPool", "vector", rank=10, plan=plan)
def emit_qavgpool(k, params):
    emit_pool(k, lambda vec, s: ByteFold(k, vec, s, False))


class ByteFold:
    """The fold of an int8 pool for pool/vector.py's window loops (FloatFold's interface):
    bytes and their maximum (MaxPool), or int32 sums of the widened bytes (QAvgPool)."""

    def __init__(self, k, vec: Vec, s, is_max: bool):
        self.k, self.b, self.vec, self.s, self.is_max = k, k.b, vec, s, is_max
        self.x_dtype, self.y_dtype = k.in_buf(0).dtype, k.out_buf().dtype
        w = vec.w
        self.signed = signed = cg.is_signed(self.x_dtype)
        # masked-off lanes stray at most a vector's bytes past the row (pool/vector.py's pieces)
        self.room = k.room_around(k.inp(0), math.ceil(w / 4))
        if is_max:
            self.fill = int(np.iinfo(self.x_dtype).min)
            self.identity = cg.const(ir.VectorType(I8, w), self.fill)
            cmp = k.b.icmp_signed if signed else k.b.icmp_unsigned
            self.op = lambda a, c: k.b.select(cmp(">", a, c), a, c)
        else:
            self.fill = 0
            self.identity = cg.const(vec.ity, 0)
            self.op = k.b.add
            self._sums_setup()

    def load(self, off, mask):
        v = load_bytes(self.k, self.k.inp(0), off, self.vec.w, mask, self.fill, self.room)
        if self.is_max:
            return v
        return (self.b.sext if self.signed else self.b.zext)(v, self.vec.ity)

    def load_strided(self, off, stride: int, mask):
        raise AssertionError("plan() keeps int8 pools on the piece loads")

    def store(self, pos, base, vals, store):
        b, k, w = self.b, self.k, self.vec.w
        for j, val in enumerate(vals):
            if not any(store[j]):
                continue
            if not self.is_max:
                val = self._average(b.add(pos, k.c(j * w)), val, store[j])
            if val.type.element != cg.llvm_type(self.y_dtype):
                val = b.trunc(val, ir.VectorType(cg.llvm_type(self.y_dtype), w))
            at = cg.gep(b, k.out(), b.add(base, k.c(j * w)), val.type.element)
            if all(store[j]):
                b.store(val, at, align=1)
            else:
                store_runs(b, val, at, store[j])

    def store_plane(self, p, val):
        if self.is_max:
            self.b.store(val, cg.gep(self.b, self.k.out(), p, I8), align=1)
            return
        t = self.k.attrs
        cnt, taps = int(self.counts.flat[0]), int(self.taps.flat[0])
        s = self.b.sub(val, ir.Constant(I32, taps * t["x_zp"]))
        qavg_store(self.k, s, ir.Constant(I32, cnt), p)

    # QAvgPool: the zero points of the taps inside the input, and the division or requantization

    def _sums_setup(self):
        k, node, t = self.k, self.k.node, self.k.attrs
        s = self.s
        self.counts = node.opdef.counts(node).reshape(s.ho, s.wo)
        self.taps = node.opdef.taps(node).reshape(s.ho, s.wo)
        zps = (self.taps * t["x_zp"]).astype(np.int32)
        self.zp_table = k.add_table(zps.reshape(-1), "zero_point_taps") \
            if len(set(zps.flat)) > 1 else None
        self.count_table = k.add_table(self.counts.astype(np.int32).reshape(-1), "counts") \
            if len(set(self.counts.flat)) > 1 else None
        if not t["same_scale"]:
            bound = int(np.abs(zps).max() + self.taps.max() * 255)
            self.wide = t["mode"] == "even" and t["s"] <= -2
            self.ties = qmath.ties_possible(bound, t["q"], t["s"])

    def _per_position(self, table, values, pos, store):
        """An int32 vector of a per-position table's lanes at pos... (lanes past the row read
        1), or the splat of its one value."""
        vec, b = self.vec, self.b
        if table is None:
            return cg.const(vec.ity, int(values.flat[0]))
        at = cg.gep(b, table, pos, I32)
        if all(store):
            return b.load(at, typ=vec.ity, align=4)
        # the table's last row ends at the plane's last position: read lanes inside it only
        v = cg.const(vec.ity, 1)
        for lane, keep in enumerate(store):
            if keep:
                v = b.insert_element(v, b.load(cg.gep(b, at, lane, I32), typ=I32, align=4),
                                     ir.Constant(I32, lane))
        return v

    def _average(self, pos, sums, store):
        b, t, vec = self.b, self.k.attrs, self.vec
        d = b.sub(sums, self._per_position(self.zp_table, self.taps * t["x_zp"], pos, store))
        if not t["same_scale"]:
            return clamp(b, requantize(b, d, t["q"], t["s"], t["mode"], self.wide, self.ties), t)
        cnt = self._per_position(self.count_table, self.counts, pos, store)
        if t["mode"] == "away":  # (d + c*y_zp +- c//2) / c, truncated (qops.div_round)
            num = b.add(d, b.mul(cnt, cg.const(vec.ity, t["y_zp"])))
            half = b.ashr(cnt, cg.const(vec.ity, 1))
            num = b.select(b.icmp_signed(">", num, cg.const(vec.ity, 0)), b.add(num, half),
                           b.sub(num, half))
            return clamp(b, b.fptosi(divide(b, vec, num, cnt), vec.ity), dict(t, y_zp=0))
        # half to even: the quotient plus and minus 1.5 * 2**23 rounds it in the float unit's
        # own mode (ties to even) to an integer, exactly for magnitudes below 2**22
        magic = cg.const(vec.ty, 1.5 * 2 ** 23)
        q = b.fsub(b.fadd(divide(b, vec, d, cnt), magic), magic)
        return clamp(b, b.fptosi(q, vec.ity), t)


def divide(b, vec, num, cnt):
    """num / cnt (int32 vectors, |num| < 2**24, 0 < cnt <= MAX_COUNT) as the correctly rounded
    float quotient. Its error is at most half an ulp of the quotient (2**-16 below 512); an
    exact quotient k or k + 1/2 is representable and comes out exact, and any other lies at
    least 1/cnt from an integer and 1/(2 cnt) from a half-integer, further than the error: so
    truncating it or rounding it to an integer gives what the integer division would."""
    return b.fdiv(b.sitofp(num, vec.ty), b.sitofp(cnt, vec.ty))
