"""Fixed-point arithmetic of the integer kernels, in numpy: the single definition that the op
references use and that the kernel emitters (codegen/kernels/quant.py) mirror instruction for
instruction.

A real multiplier M > 0 is held as (q, shift) with M ~= q * 2**(shift - 31), q in [2**30, 2**31)
(TFLite's QuantizeMultiplier). An int32 accumulator `acc` is requantized in one of two modes:

  "away"  TFLite's reference kernels / CMSIS-NN: SaturatingRoundingDoublingHighMul (ties
          rounded up), then RoundingDivideByPOT (ties away from zero): two roundings;
  "even"  ONNX QuantizeLinear: the exact product acc * q / 2**(31 - shift) rounded once, half to
          even.

Every value here is an int64 numpy array so nothing overflows silently."""
from __future__ import annotations

import math

import numpy as np

MODES = ("away", "even")


def quantize_multiplier(real: float) -> tuple[int, int]:
    """(q, shift) with real ~= q * 2**(shift-31); (0, 0) for 0 (TFLite QuantizeMultiplier)."""
    if real == 0.0:
        return 0, 0
    if not (real > 0 and math.isfinite(real)):
        raise ValueError(f"requantization multiplier {real} must be positive and finite")
    frac, shift = math.frexp(real)
    q = int(np.round(frac * (1 << 31)))  # TfLiteRound: half away from zero (frac > 0)
    if q == 1 << 31:
        q //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    if shift > 30:
        raise ValueError(f"requantization multiplier {real} is too large (>= 2**30)")
    return q, shift


def multipliers(reals) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (q int32[], shift int32[]) of an array of real multipliers."""
    qs = [quantize_multiplier(float(r)) for r in np.asarray(reals, np.float64).reshape(-1)]
    return (np.array([q for q, _ in qs], np.int32), np.array([s for _, s in qs], np.int32))


def _trunc_div_pow2(x: np.ndarray, e: int) -> np.ndarray:
    """C's x / 2**e (truncation toward zero) for int64 x."""
    return np.where(x >= 0, x >> e, -((-x) >> e))


def srdhm(a, q) -> np.ndarray:
    """SaturatingRoundingDoublingHighMul(a, q) for int32 a, q (no saturation case: q > 0)."""
    ab = np.asarray(a, np.int64) * np.asarray(q, np.int64)
    nudge = np.where(ab >= 0, np.int64(1 << 30), np.int64(1 - (1 << 30)))
    return _trunc_div_pow2(ab + nudge, 31)


def rdbpot(x, e) -> np.ndarray:
    """RoundingDivideByPOT(x, e): x / 2**e rounded half away from zero (e may be an array)."""
    x = np.asarray(x, np.int64)
    e = np.asarray(e, np.int64)
    mask = (np.int64(1) << e) - 1
    rem = x & mask
    thr = (mask >> 1) + (x < 0)
    return (x >> e) + (rem > thr)


def requantize(acc, q, shift, mode: str = "away") -> np.ndarray:
    """acc * q * 2**(shift-31), rounded per `mode`; q and shift broadcast against acc."""
    acc = np.asarray(acc, np.int64)
    q = np.asarray(q, np.int64)
    shift = np.asarray(shift, np.int64)
    if mode == "away":
        left = np.maximum(shift, 0)
        right = np.maximum(-shift, 0)
        x = np.clip(acc << left, -(1 << 31), (1 << 31) - 1)
        return rdbpot(srdhm(x, q), right)
    if mode == "even":
        n = 31 - shift  # >= 1 since shift <= 30
        p = acc * q
        half = np.int64(1) << (n - 1)
        r = (p + half) >> n  # half up
        tie = (p & ((np.int64(1) << n) - 1)) == half
        return r - (tie & (r & 1 == 1))
    raise ValueError(f"unknown rounding mode {mode!r}")


def ties_possible(bound, q, shift) -> bool:
    """Whether mode "even" can meet an exact tie for some |acc| <= bound (per channel: q, shift
    and bound broadcast). A tie needs acc*q to end in exactly n-1 zero bits after a one
    (n = 31 - shift), i.e. v2(acc) = n-1-v2(q): a nonzero acc then has |acc| >= 2**(n-1-v2(q)),
    so with every bound below that the tie correction is dead code and kernels drop it (and
    with v2(q) >= n the low n bits of acc*q are all zero: never a tie)."""
    q = np.asarray(q, np.int64).reshape(-1)
    n = 31 - np.asarray(shift, np.int64).reshape(-1)
    v2 = np.array([(int(v) & -int(v)).bit_length() - 1 if v else 63 for v in q], np.int64)
    need = n - 1 - v2
    bound = np.asarray(bound, np.int64).reshape(-1)
    return bool(np.any((need >= 0) & (need <= 62) &
                       (bound >= (np.int64(1) << np.clip(need, 0, 62)))))


def sum_bound(w, bias, x_dtype, zp: int) -> np.ndarray:
    """Per output channel (the rows of w), the largest |bias + sum w * (x - zp)| over every
    input x of type x_dtype: what an accumulator can reach."""
    info = np.iinfo(x_dtype)
    dev = max(abs(int(info.min) - zp), abs(int(info.max) - zp))
    w = np.asarray(w).reshape(np.shape(w)[0], -1).astype(np.int64)
    return np.abs(np.asarray(bias, np.int64)).reshape(-1) + np.abs(w).sum(axis=1) * dev


def saturate(x, dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(np.asarray(x, np.int64), info.min, info.max).astype(dtype)


def round_half_even(x) -> np.ndarray:
    return np.rint(x)


def round_half_away(x) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def quantize(x, scale, zero_point, dtype, axis: int | None = None) -> np.ndarray:
    """ONNX QuantizeLinear: saturate(round_half_even(x / scale) + zero_point) in float32."""
    x = np.asarray(x, np.float32)
    s, z = _per_axis(scale, x.ndim, axis), _per_axis(zero_point, x.ndim, axis)
    y = np.rint(x / s.astype(np.float32)).astype(np.float64) + z.astype(np.float64)
    return saturate(y, dtype)


def dequantize(x, scale, zero_point, axis: int | None = None) -> np.ndarray:
    s, z = _per_axis(scale, np.ndim(x), axis), _per_axis(zero_point, np.ndim(x), axis)
    return ((np.asarray(x, np.int64) - z.astype(np.int64)).astype(np.float32)
            * s.astype(np.float32)).astype(np.float32)


def _per_axis(p, ndim: int, axis: int | None) -> np.ndarray:
    p = np.asarray(p)
    if p.ndim == 0 or p.size == 1 or axis is None:
        return p.reshape(()) if p.size == 1 else p
    shape = [1] * ndim
    shape[axis] = p.size
    return p.reshape(shape)


def activation_range(op: str | None, bounds, scale: float, zero_point: int, dtype):
    """The quantized [lo, hi] a fused Relu/Clip leaves (TFLite CalculateActivationRangeQuantized):
    the dtype's range narrowed by the activation's float bounds quantized with (scale, zp)."""
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    if op is None:
        return lo, hi
    flo, fhi = bounds
    if flo is not None:
        lo = max(lo, zero_point + int(round_half_away(flo / scale)))
    if fhi is not None:
        hi = min(hi, zero_point + int(round_half_away(fhi / scale)))
    return lo, hi


def linear_add(node, steps: int = 8):
    """QAdd of two 8-bit operands as one rounding of a linear form, where one exists:
    (s, ma, mb, r) such that for every pair of operand values
        clip(((a - a_zp) * ma + (b - b_zp) * mb + r) >> s) + y_zp, lo, hi)
    is the op's reference (TFLite's two rescalings to 2**-left_shift, the sum, the output's
    requantization and clamp), the sum plus r within int32 for every pair (int32 arithmetic
    is modular, so the products and partial sums may wrap); None otherwise.

    The reference rounds three times, but its first two roundings are 2**-20 fine, so its
    result is the real form da * ca + db * cb rounded once except within ~2**-20 of a rounding
    boundary; the multipliers are the real ones at the finest scale 2**-s int32 sums allow,
    give or take `steps`, and r the intersection of the intervals every one of the
    256 x 256 pairs allows (all checked: an empty intersection tries the next candidate).
    ResNet-50 quantized by onnxruntime: a form for each of its 16 QAdd, found in ~2 ms each."""
    t = node.attrs
    dt = [np.iinfo(v.dtype) for v in node.inputs[:2]]
    if any(i.bits != 8 for i in dt):
        return None
    A, B = np.meshgrid(np.arange(dt[0].min, dt[0].max + 1), np.arange(dt[1].min, dt[1].max + 1),
                       indexing="ij")
    want = node.opdef.reference(node, A.astype(node.inputs[0].dtype),
                                B.astype(node.inputs[1].dtype))[0].astype(np.int64).reshape(-1)
    da = A.reshape(-1).astype(np.int64) - t["a_zp"]
    db = B.reshape(-1).astype(np.int64) - t["b_zp"]
    yk = t["y_q"] * 2.0 ** (t["y_s"] - 31) * 2.0 ** t["left_shift"]
    ca, cb = t["a_q"] * 2.0 ** (t["a_s"] - 31) * yk, t["b_q"] * 2.0 ** (t["b_s"] - 31) * yk
    span = np.abs(da).max() * abs(ca) + np.abs(db).max() * abs(cb) + 1
    top = int(np.floor(np.log2(2.0 ** 30 / span)))
    target = want - t["y_zp"]
    inner = (want > t["lo"]) & (want < t["hi"])
    low_end, high_end = want <= t["lo"], want >= t["hi"]
    for s in range(top, max(top - 3, 0), -1):
        base_a, base_b = round(ca * 2 ** s), round(cb * 2 ** s)
        for d in sorted(((i, j) for i in range(-steps, steps + 1)
                         for j in range(-steps, steps + 1)), key=lambda p: abs(p[0]) + abs(p[1])):
            ma, mb = base_a + d[0], base_b + d[1]
            x = da * ma + db * mb
            # raw = floor((x + r) / 2**s) must equal the target (or pass the clamp's end)
            lo_r = (target << s) - x
            hi_r = lo_r + (1 << s) - 1
            r_min = max(lo_r[inner | high_end].max(initial=-(1 << 62)), -(1 << 62))
            r_max = min(hi_r[inner | low_end].min(initial=1 << 62), 1 << 62)
            if r_min > r_max:
                continue
            r = min(max(0, r_min), r_max)
            if -(1 << 31) <= int(x.min()) + r and int(x.max()) + r < 1 << 31:
                return s, int(ma), int(mb), int(r)
    return None
