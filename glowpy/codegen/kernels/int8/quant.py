"""Quantization kernels: QuantizeLinear and DequantizeLinear (float <-> int8/uint8, per tensor
or per axis), and the small integer ops of ir/ops/qops.py: Requantize, QTable, QAdd, QMul,
QAvgPool, QSoftmax. `requantize` is the fixed-point step every integer kernel ends with; it
emits, instruction for instruction, ir/qmath.requantize."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen import mathfn
from glowpy.codegen.mathfn.core import intrinsic
from glowpy.codegen.kernels.int8.taps import tap_loops
from glowpy.codegen.registry import emits
from glowpy.ir import qmath

I32, I64 = cg.I32, cg.I64


def _v(ty, x):
    return ir.Constant(ty, int(x)) if isinstance(x, (int, np.integer)) else x


def widen(b, v, dtype, ty=I32):
    """An int8/uint8/int16/int32 value as `ty` (sign- or zero-extended per dtype)."""
    if v.type.width == ty.width:
        return v
    if v.type.width > ty.width:
        return b.trunc(v, ty)
    return b.sext(v, ty) if cg.is_signed(dtype) else b.zext(v, ty)


def _like(ty, width):
    """The integer type of `width` bits shaped like ty (a scalar or a vector type)."""
    it = ir.IntType(width)
    return ir.VectorType(it, ty.count) if isinstance(ty, ir.VectorType) else it


def _paired(ty) -> bool:
    """Vectors of 8 or 16 int32 lanes (AVX2, AVX-512) take mulhi. On 4-lane vectors the sext
    form is the better one: NEON's smull, smull2 and uzp2 against 14 instructions, SSE2's
    emulated signed product 16 against 42 (llc, one function)."""
    return isinstance(ty, ir.VectorType) and ty.count >= 8 and ty.count % 2 == 0 and \
        ty.element.width == 32


def mulhi(b, a, q):
    """The high words of the signed 64-bit products of two i32 vectors of an even lane count,
    computed in place on the 64-bit halves: the even lanes sign-extended inside them, the odd
    lanes shifted down, and the two products' high words blended back into their lanes. What
    sext -> mul <n x i64> -> ashr 32 -> trunc of a per-channel q (a splat of a loaded word)
    became, inside the int8 kernels' epilogues on AVX2, vpmovzxdq twice, vextracti128, vshufps
    and vpermpd around the two vpmuldq (cross-lane moves at 3 cycles each); this is two
    vpshufd, two vpmuldq and a vpblendd, all within 128-bit lanes. MobileNetV2 int8, AVX2 code
    on the Zen 4 (interleaved): 5,648 -> 5,459 us."""
    n = a.type.count
    t64 = ir.VectorType(I64, n // 2)
    c = cg.const(t64, 32)

    def low(v):  # each 64-bit half's low word, sign-extended: what vpmuldq reads
        v64 = b.bitcast(v, t64)
        return b.ashr(b.shl(v64, c), c)

    def halves(v):  # (the even lanes, the odd lanes moved down onto them)
        odd = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, n),
                                                 [i | 1 for i in range(n)]))
        return low(v), low(odd)
    (ae, ao), (qe, qo) = halves(a), halves(q)
    pe = b.bitcast(b.mul(ae, qe), a.type)
    po = b.bitcast(b.mul(ao, qo), a.type)
    return b.shuffle_vector(pe, po, ir.Constant(ir.VectorType(I32, n), [
        i + 1 if i % 2 == 0 else n + i for i in range(n)]))


def requantize(b, acc, q, shift, mode: str, wide: bool = False, ties: bool = True):
    """acc (i32, or a vector of them) * q * 2**(shift-31) rounded per `mode`
    (qmath.requantize); q and shift are Python ints (per-tensor) or i32 values of acc's shape
    (per-channel, loaded from a table). Returns i64, or i32 with `wide` (the caller knows
    shift <= -2: then 33+ bits are dropped and the rounding works on the high word of the
    product alone, which 32-bit targets do in a few instructions); `wide` and not `ties`: the
    caller has proven that no rounding tie can occur (qmath.ties_possible), and the tie
    correction is left out. Where no tie can occur, the scalar kernels use requant_fast."""
    p_q, p_s = isinstance(q, (int, np.integer)), isinstance(shift, (int, np.integer))
    t32, t64 = _like(acc.type, 32), _like(acc.type, 64)
    c32, c64 = (lambda x: cg.const(t32, x)), (lambda x: cg.const(t64, x))  # noqa: E731
    a64 = b.sext(acc, t64)
    q64 = c64(q) if p_q else b.sext(q, t64)
    i1 = _like(acc.type, 1)
    if mode == "even" and wide:
        if _paired(acc.type):
            hi = mulhi(b, acc, cg.const(t32, int(q)) if p_q else q)
        else:
            hi = b.trunc(b.ashr(b.mul(a64, q64), c64(32)), t32)
        lo = b.mul(acc, c32(q) if p_q else q)  # the product's low word, where ties are checked
        m = c32(-1 - int(shift)) if p_s else b.sub(c32(-1), shift)
        one = c32(1)
        half = b.shl(one, b.sub(m, one))
        r = b.ashr(b.add(hi, half), m)
        if not ties:
            return r
        tie = b.and_(b.icmp_signed("==", lo, c32(0)),
                     b.icmp_signed("==", b.and_(hi, b.sub(b.shl(one, m), one)), half))
        return b.sub(r, b.zext(b.and_(tie, b.trunc(r, i1)), t32))
    if mode == "even":
        n = c64(31 - int(shift)) if p_s else b.sub(c64(31), b.sext(shift, t64))
        one = c64(1)
        half = b.shl(one, b.sub(n, one))
        p = b.mul(a64, q64)
        r = b.ashr(b.add(p, half), n)
        tie = b.icmp_signed("==", b.and_(p, b.sub(b.shl(one, n), one)), half)
        odd = b.trunc(r, i1)
        return b.sub(r, b.zext(b.and_(tie, odd), t64))
    # "away": SaturatingRoundingDoublingHighMul, then RoundingDivideByPOT
    if p_s:
        left, right = max(int(shift), 0), max(-int(shift), 0)
        x = b.shl(a64, c64(left)) if left else a64
        right = c64(right)
    else:
        s64 = b.sext(shift, t64)
        zero = c64(0)
        left = b.select(b.icmp_signed(">", s64, zero), s64, zero)
        right = b.select(b.icmp_signed("<", s64, zero), b.neg(s64), zero)
        x = b.shl(a64, left)
    lim = (1 << 31) - 1
    x = b.select(b.icmp_signed(">", x, c64(lim)), c64(lim), x)
    x = b.select(b.icmp_signed("<", x, c64(-lim - 1)), c64(-lim - 1), x)
    ab = b.mul(x, q64)
    neg = b.icmp_signed("<", ab, c64(0))
    t = b.add(ab, b.select(neg, c64(1 - (1 << 30)), c64(1 << 30)))
    t = b.add(t, b.select(b.icmp_signed("<", t, c64(0)), c64((1 << 31) - 1), c64(0)))
    hi = b.ashr(t, c64(31))
    mask = b.sub(b.shl(c64(1), right), c64(1))
    rem = b.and_(hi, mask)
    thr = b.add(b.ashr(mask, c64(1)), b.zext(b.icmp_signed("<", hi, c64(0)), t64))
    return b.add(b.ashr(hi, right), b.zext(b.icmp_signed(">", rem, thr), t64))


def clamp(b, v, attrs):
    """v + y_zp clamped to [lo, hi] (a scalar or a vector); y_zp an int or an IR value
    (runtime_zp)."""
    zp = attrs["y_zp"]
    if isinstance(zp, ir.Value):
        v = b.add(v, zp if zp.type == v.type else b.sext(zp, v.type))
    elif zp:
        v = b.add(v, cg.const(v.type, zp))
    v = smax(b, v, cg.const(v.type, attrs["lo"]))
    return smin(b, v, cg.const(v.type, attrs["hi"]))


def runtime_zp(k, splat) -> dict:
    """k.attrs with a nonzero output zero point read at run time (Kernel.runtime_int), made a
    vector of the sums by `splat`: the vector kernels of the int8 layers of one shape, which
    differ in little but their output zero points, then compile once (module._share).
    DenseNet-121 int8: 58 3x3 QConv kernels in 4 shapes; the clamp's bounds stay immediates
    (a fused Relu's lower bound is the zero point: those layers still differ), which keeps
    LLVM's saturating truncations where they are the type's own."""
    zp = k.attrs["y_zp"]
    return k.attrs if not zp else dict(k.attrs, y_zp=splat(k.runtime_int(zp, "y_zp")))


def clamp_store(k, v64, attrs, ptr, off, dtype):
    """v + y_zp clamped to [lo, hi], stored as `dtype`."""
    k.store(k.b.trunc(clamp(k.b, v64, attrs), cg.llvm_type(dtype)), ptr, off)


def smax(b, x, y):
    return b.select(b.icmp_signed(">", x, y), x, y)


def smin(b, x, y):
    return b.select(b.icmp_signed("<", x, y), x, y)


def finish(k, acc, q, s, ptr, off, dtype, wide: bool = False):
    """requantize(acc) + y_zp, clamped and stored (ops/qops.finish)."""
    a = k.attrs
    wide = wide and a["mode"] == "even"
    clamp_store(k, requantize(k.b, acc, q, s, a["mode"], wide), a, ptr, off, dtype)


def _per_axis_strides(node, buf_shape, param):
    """Element strides of a scale / zero point (scalar or per-axis) over the data's shape."""
    if param is None or int(np.prod(param.shape)) == 1:
        return [0] * len(buf_shape)
    ax = node.opdef.axis(node)
    st = [0] * len(buf_shape)
    st[ax] = 1
    return st


@emits("QuantizeLinear")
def emit_quantize(k):
    b = k.b
    x, s, y = k.in_buf(0), k.in_buf(1), k.out_buf()
    z = k.in_buf(2)
    ps = _per_axis_strides(k.node, x.shape, s)
    st = cg.contiguous_strides(x.shape)
    info = np.iinfo(y.dtype)
    arm = k.caps.arm_fpu is not None
    with k.strided_loop(x.shape, [st, ps, st]) as (xi, si, yi):
        v = b.fdiv(k.load(k.inp(0), xi, x.dtype), k.load(k.inp(1), si, np.float32))
        zi = None if z is None else widen(b, k.load(k.inp(2), si, z.dtype), z.dtype)
        i = _quantize_arm(k, v, zi, info) if arm else \
            _quantize_clamped(b, v, zi, info) if info.bits <= 16 else _quantize_wide(b, v, zi, info)
        k.store(b.trunc(i, cg.llvm_type(y.dtype)), k.out(), yi)


def _quantize_wide(b, v, zi, info):
    """round(v) + zp saturated to a 32-bit output type (NaN -> 0), as int32."""
    r = mathfn.round_half_even(b, v)
    if zi is not None:
        r = b.fadd(r, b.sitofp(zi, cg.F32))
    r = mathfn.fmax(b, r, cg.const(cg.F32, info.min))
    r = mathfn.fmin(b, r, cg.const(cg.F32, info.max))
    r = b.select(b.fcmp_unordered("uno", r, r), cg.const(cg.F32, 0), r)  # NaN -> 0
    return b.fptosi(r, I32)


def _quantize_arm(k, v, zi, info):
    """round(v) + zp saturated to the output type, as int32: VCVT's saturation (NaN -> 0) then
    SSAT / USAT give what the float clamp gives, in 2 instructions instead of ~12 (the AD
    autoencoder's 640 inputs on the M7: 21,160 -> 5,410 instructions with VRINTN)."""
    b = k.b
    r = _round_arm(k, v)
    if zi is not None:
        r = b.fadd(r, b.sitofp(zi, cg.F32))
    i = b.call(_fptosi_sat(k), [r])
    i = smin(b, i, ir.Constant(I32, int(info.max)))
    return smax(b, i, ir.Constant(I32, int(info.min)))


ROUNDER = 1.5 * 2.0 ** 23  # x + ROUNDER - ROUNDER: x rounded half to even, for |x| <= 2**22


def _quantize_clamped(b, v, zi, info):
    """round(v) + zp saturated to an output type of 16 bits or fewer (NaN -> 0), as int32,
    on every target but ARM's FPUs (_quantize_arm):
    v clamped first to [lo - zp, hi - zp] (whole bounds: the same as clamping after the
    rounding; NaN takes the lower bound, as x86's maxps gives, then 0 at the end), then
    rounded by adding and subtracting 1.5 x 2**23, exact and half to even within those
    bounds, and converted. 9 vector instructions a vector where the rounding that held for
    every float (mathfn.round_half_even) and the float clamp after it took about 20:
    ConvNeXt-T int8 (onnxruntime's QOperator; AVX2 code, Zen 4) spent 4.8 ms in its 42
    QuantizeLinear, onnxruntime 3.1."""
    zf = cg.const(cg.F32, 0.0) if zi is None else b.sitofp(zi, cg.F32)
    lo = b.fsub(cg.const(cg.F32, float(info.min)), zf)
    hi = b.fsub(cg.const(cg.F32, float(info.max)), zf)
    c = b.select(b.fcmp_ordered(">", v, lo), v, lo)
    c = b.select(b.fcmp_ordered("<", c, hi), c, hi)
    r = b.fadd(b.fsub(b.fadd(c, cg.const(cg.F32, ROUNDER)), cg.const(cg.F32, ROUNDER)), zf)
    # (the zero point added as a float: added to the int32 lanes, LLVM moved the addition
    # past the truncation to bytes and built the byte vector lane by lane, 1.7x the time)
    r = b.select(b.fcmp_unordered("uno", v, v), cg.const(cg.F32, 0.0), r)
    return b.fptosi(r, I32)


def _round_arm(k, v):
    """round half to even: VRINTN on FPv5 / Armv8 FPUs (Cortex-M7, M33, M55), else
    mathfn's sequence."""
    if k.caps.fp_round:
        return k.b.call(intrinsic(k.b, "llvm.roundeven", v, 1), [v])
    return mathfn.round_half_even(k.b, v)


def _fptosi_sat(k):
    name = "llvm.fptosi.sat.i32.f32"
    fn = k.module.globals.get(name)
    return fn or ir.Function(k.module, ir.FunctionType(I32, [cg.F32]), name)


@emits("DequantizeLinear")
def emit_dequantize(k):
    b = k.b
    x, s = k.in_buf(0), k.in_buf(1)
    z = k.in_buf(2)
    ps = _per_axis_strides(k.node, x.shape, s)
    st = cg.contiguous_strides(x.shape)
    with k.strided_loop(x.shape, [st, ps, st]) as (xi, si, yi):
        v = widen(b, k.load(k.inp(0), xi, x.dtype), x.dtype)
        if z is not None:
            v = b.sub(v, widen(b, k.load(k.inp(2), si, z.dtype), z.dtype))
        k.store(b.fmul(b.sitofp(v, cg.F32), k.load(k.inp(1), si, np.float32)), k.out(), yi)


@emits("Requantize")
def emit_requantize(k):
    b = k.b
    x, y = k.in_buf(0), k.out_buf()
    a = k.attrs
    same = (a["q"], a["s"]) == (1 << 30, 1)  # same scale: only the zero point and the clamp
    # the zero points and the multiplier read at run time: the Requantizes of one shape
    # compile once (module._share; see qbinary.emit). Not on microcontrollers, which count
    # bytes first: each number would take a 64-byte slot of the constant region.
    lift = not k.caps.memory_first
    x_zp = (k.runtime_int(a["x_zp"], "x_zp") if lift else ir.Constant(I32, a["x_zp"])) \
        if a["x_zp"] else None
    q = k.runtime_int(a["q"], "q") if lift and not same else a["q"]
    at = runtime_zp(k, lambda zp: zp) if lift else a
    with k.for_range(int(np.prod(y.shape)), name="e") as i:
        v = widen(b, k.load(k.inp(0), i, x.dtype), x.dtype)
        if x_zp is not None:
            v = b.sub(v, x_zp)
        if same:
            clamp_store(k, v, at, k.out(), i, y.dtype)
        else:
            clamp_store(k, requantize(b, v, q, a["s"], a["mode"]), at, k.out(), i, y.dtype)


@emits("QTable")
def emit_table(k, start: int = 0):
    """y[i] = T[x[i] - min] for the elements from `start` on, one by one."""
    b = k.b
    x, y = k.in_buf(0), k.out_buf()
    lo = int(np.iinfo(x.dtype).min)
    with k.for_range(int(np.prod(y.shape)), start=start, name="e") as i:
        idx = widen(b, k.load(k.inp(0), i, x.dtype), x.dtype, k.intp)
        if lo:
            idx = b.sub(idx, ir.Constant(k.intp, lo))
        k.store(k.load(k.inp(1), idx, y.dtype), k.out(), i)


@emits("QAdd", "QMul")
def emit_qadd(k):
    b = k.b
    a_, b_, y = k.in_buf(0), k.in_buf(1), k.out_buf()
    t = k.attrs
    sa = cg.broadcast_strides(a_.shape, y.shape)
    sb = cg.broadcast_strides(b_.shape, y.shape)
    with k.strided_loop(y.shape, [sa, sb, cg.contiguous_strides(y.shape)]) as (ia, ib, iy):
        da = b.sub(widen(b, k.load(k.inp(0), ia, a_.dtype), a_.dtype), ir.Constant(I32, t["a_zp"]))
        db = b.sub(widen(b, k.load(k.inp(1), ib, b_.dtype), b_.dtype), ir.Constant(I32, t["b_zp"]))
        if k.node.op == "QMul":
            acc = b.mul(da, db)
        else:
            sh = ir.Constant(I32, t["left_shift"])
            ra = b.trunc(requantize(b, b.shl(da, sh), t["a_q"], t["a_s"], "away"), I32)
            rb = b.trunc(requantize(b, b.shl(db, sh), t["b_q"], t["b_s"], "away"), I32)
            acc = b.add(ra, rb)
        finish(k, acc, t["y_q"], t["y_s"], k.out(), iy, y.dtype)


@emits("QAvgPool")
def emit_qavgpool(k):
    b = k.b
    node, t = k.node, k.attrs
    x, y = k.in_buf(0), k.out_buf()
    win = node.opdef.window(node)
    counts = node.opdef.counts(node).reshape(-1)
    uniform = len(set(counts.tolist())) == 1
    table = None if uniform else k.add_table(counts.astype(np.int32), "counts")
    # the zero point is subtracted once per tap inside the input (padding is real 0)
    taps = node.opdef.taps(node).reshape(-1) * t["x_zp"]
    if np.array_equal(taps, counts * t["x_zp"]) or len(set(taps.tolist())) == 1:
        tap_table = None
    else:
        tap_table = k.add_table(taps.astype(np.int32), "zero_point_taps")
    planes = x.shape[0] * x.shape[1]
    plane_in, plane_out = int(np.prod(win.in_size)), int(np.prod(win.out_size))
    acc_p = cg.alloca_in_entry(b, I32, "acc")
    with k.for_range(planes, name="p") as p:
        with k.loop_nest(win.out_size, name="o") as oidx:
            b.store(ir.Constant(I32, 0), acc_p)

            def body(i_off, _k_off):
                xi = b.add(b.mul(p, k.c(plane_in)), i_off)
                v = widen(b, k.load(k.inp(0), xi, x.dtype), x.dtype)
                b.store(b.add(b.load(acc_p), v), acc_p)

            tap_loops(k, win, oidx, body)
            o_lin = cg.linear(b, oidx, cg.contiguous_strides(win.out_size), 0, k.intp)
            cnt = ir.Constant(I32, int(counts[0])) if uniform else k.load(table, o_lin, np.int32)
            if tap_table is not None:
                zp_sum = k.load(tap_table, o_lin, np.int32)
            elif np.array_equal(taps, counts * t["x_zp"]):
                zp_sum = b.mul(cnt, ir.Constant(I32, t["x_zp"]))
            else:
                zp_sum = ir.Constant(I32, int(taps[0]))
            s = b.sub(b.load(acc_p), zp_sum)
            qavg_store(k, s, cnt, b.add(b.mul(p, k.c(plane_out)), o_lin))


def qavg_store(k, s, cnt, yi):
    """QAvgPool's output yi from s, a window's sum less its taps' zero points, and cnt, its
    count (i32 values): the same-scale division with the mode's rounding, or the
    requantization (ops/qops.QAvgPool)."""
    b, t, dtype = k.b, k.attrs, k.out_buf().dtype
    if not t["same_scale"]:
        finish(k, s, t["q"], t["s"], k.out(), yi, dtype)
    elif t["mode"] == "away":
        acc = b.add(s, b.mul(cnt, ir.Constant(I32, t["y_zp"])))
        half = b.sdiv(cnt, ir.Constant(I32, 2))
        num = b.select(b.icmp_signed(">", acc, ir.Constant(I32, 0)), b.add(acc, half),
                       b.sub(acc, half))
        clamp_store(k, b.sext(b.sdiv(num, cnt), I64), dict(t, y_zp=0), k.out(), yi, dtype)
    else:
        clamp_store(k, b.sext(div_even(b, s, cnt), I64), t, k.out(), yi, dtype)


def div_even(b, acc, cnt):
    """acc / cnt (cnt > 0) rounded half to even (ops/qops.div_round)."""
    q = b.sdiv(acc, cnt)
    r = b.sub(acc, b.mul(q, cnt))
    neg = b.icmp_signed("<", r, ir.Constant(I32, 0))  # floor division
    q = b.select(neg, b.sub(q, ir.Constant(I32, 1)), q)
    r = b.select(neg, b.add(r, cnt), r)
    r2 = b.shl(r, ir.Constant(I32, 1))
    up = b.or_(b.icmp_signed(">", r2, cnt),
               b.and_(b.icmp_signed("==", r2, cnt), b.trunc(q, cg.I1)))
    return b.add(q, b.zext(up, I32))


@emits("QSoftmax")
def emit_qsoftmax(k):
    b = k.b
    node, t = k.node, k.attrs
    x, y = k.in_buf(0), k.out_buf()
    o_, r_, i_ = node.opdef.layout(node)
    f32 = cg.F32
    max_p = cg.alloca_in_entry(b, I32, "mx")
    sum_p = cg.alloca_in_entry(b, f32, "sum")
    with k.for_range(o_, name="o") as o:
        with k.for_range(i_, name="i") as i:
            base = b.add(b.mul(o, k.c(r_ * i_)), i)

            def at(j):
                return b.add(base, b.mul(j, k.c(i_)))
            b.store(ir.Constant(I32, -(1 << 31)), max_p)
            with k.for_range(r_, name="j") as j:
                v = widen(b, k.load(k.inp(0), at(j), x.dtype), x.dtype)
                b.store(smax(b, v, b.load(max_p)), max_p)
            mx = b.load(max_p)

            def e(j):
                v = widen(b, k.load(k.inp(0), at(j), x.dtype), x.dtype)
                return k.load(k.inp(1), b.zext(b.sub(mx, v), k.intp) if k.intp.width > 32
                              else b.sub(mx, v), np.float32)
            b.store(cg.const(f32, 0), sum_p)
            with k.for_range(r_, name="j") as j:
                b.store(b.fadd(b.load(sum_p), e(j)), sum_p)
            inv = b.fdiv(cg.const(f32, 1), b.fmul(b.load(sum_p), cg.const(f32, t["y_scale"])))
            with k.for_range(r_, name="j") as j:
                p = b.fmul(e(j), inv)
                if t["mode"] == "even":
                    r = mathfn.round_half_even(b, p)
                else:  # p >= 0: floor(p) + (frac >= 0.5)
                    fl = mathfn.floor(b, p)
                    r = b.select(b.fcmp_ordered(">=", b.fsub(p, fl), cg.const(f32, 0.5)),
                                 b.fadd(fl, cg.const(f32, 1)), fl)
                clamp_store(k, b.sext(b.fptosi(r, I32), I64), t, k.out(), at(j), y.dtype)


__all__ = ["requantize", "finish", "clamp_store", "widen", "qmath"]
