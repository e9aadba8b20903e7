"""Tap tables: how Resize, Upsample and Pad read their input, one table per output dim.

Each of those ops computes an output element from a few input elements chosen independently
per dimension. `Taps` describes one output dim: for every output coordinate, T input indices
with weights (nearest and the pad modes T=1, linear T=2, cubic T=4, antialias a filter
window), or an affine map `o + shift` valid on [lo, hi) (identity dims, constant padding). An
output element whose coordinate is invalid in any dim (constant padding, tf_crop_and_resize
extrapolation) takes the fill value. `apply_taps` is the numpy meaning (reference, folding);
kernels/resize.py emits the same thing as one loop nest.

The Resize builders below compute coordinates in float32 exactly as onnxruntime does, so
nearest picks the same pixels and the weights agree with onnxruntime's to the last bit."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

F32 = np.float32


@dataclass
class Taps:
    """How one output dim reads its input dim. Table form: `idx`/`w` are [T, size] (weights
    None: one tap of weight 1), `valid` is [size] (None: all valid); invalid rows hold index 0.
    Affine form (idx None): input index o + shift for lo <= o < hi, invalid elsewhere."""
    size: int
    idx: np.ndarray | None = None
    w: np.ndarray | None = None
    valid: np.ndarray | None = None
    shift: int = 0
    lo: int = 0
    hi: int = 0

    @property
    def affine(self) -> bool:
        return self.idx is None

    def is_identity(self, in_size: int) -> bool:
        return self.affine and self.shift == 0 and self.lo == 0 and self.hi == self.size == in_size


def identity(n: int) -> Taps:
    return Taps(n, shift=0, lo=0, hi=n)


def table(idx, w=None, valid=None) -> Taps:
    """Taps from [T, size] indices (and weights, [size] validity), in affine form when it is
    one (a single unweighted tap idx = o + shift on a contiguous valid range)."""
    idx = np.array(idx, np.int64, ndmin=2)
    size = idx.shape[1]
    valid = None if valid is None or np.all(valid) else np.asarray(valid, bool)
    if w is not None:
        w = np.array(w, F32, ndmin=2)
        if idx.shape[0] == 1 and np.all(w == 1):
            w = None
    if valid is not None:
        idx[:, ~valid] = 0
        if w is not None:
            w[:, ~valid] = 0
    if idx.shape[0] == 1 and w is None:
        v = np.ones(size, bool) if valid is None else valid
        pos = np.flatnonzero(v)
        if not len(pos):
            return Taps(size, lo=0, hi=0)
        lo, hi = int(pos[0]), int(pos[-1]) + 1
        d = idx[0, lo:hi] - np.arange(lo, hi)
        if v[lo:hi].all() and np.all(d == d[0]):
            return Taps(size, shift=int(d[0]), lo=lo, hi=hi)
    return Taps(size, idx, w, valid)


def apply_taps(x: np.ndarray, taps: list[Taps], fill) -> np.ndarray:
    """The numpy meaning of a tap description (reference and constant folding)."""
    weighted = any(t.w is not None for t in taps)
    y = x.astype(np.float64) if weighted else x
    mask = np.ones([1] * x.ndim, bool)
    for d, t in enumerate(taps):
        o = np.arange(t.size)
        if t.affine:
            valid = (o >= t.lo) & (o < t.hi)
            idx, w = np.where(valid, o + t.shift, 0)[None], None
        else:
            idx, w = t.idx, t.w
            valid = np.ones(t.size, bool) if t.valid is None else t.valid
        bshape = [1] * x.ndim
        bshape[d] = t.size
        mask = mask & valid.reshape(bshape)
        if y.shape[d] == 0:  # nothing to read: every output along d is fill
            shape = list(y.shape)
            shape[d] = t.size
            y = np.zeros(shape, y.dtype)
            mask = mask & np.zeros(bshape, bool)
        elif w is None:
            y = np.take(y, idx[0], axis=d)
        else:
            y = sum(np.take(y, idx[j], axis=d) * w[j].astype(np.float64).reshape(bshape)
                    for j in range(idx.shape[0]))
    y = np.where(mask, y, np.asarray(fill).astype(y.dtype))
    return np.ascontiguousarray(y.astype(x.dtype))


# -- Resize coordinates and taps --------------------------------------------------------------

COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
               "asymmetric", "tf_crop_and_resize", "tf_half_pixel_for_nn")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def coords(mode, n_out, n_in, scale, roi):
    """Input coordinate of each output index, in float32 as onnxruntime computes it."""
    x = np.arange(n_out, dtype=F32)
    s, lr, lo = F32(scale), F32(n_out), F32(n_in)
    if mode == "asymmetric":
        return x / s
    if mode == "pytorch_half_pixel":
        return (x + F32(0.5)) / s - F32(0.5) if n_out > 1 else np.zeros(n_out, F32)
    if mode == "tf_half_pixel_for_nn":
        return (x + F32(0.5)) / s
    if mode == "align_corners":
        return np.zeros(n_out, F32) if n_out == 1 else x * (lo - F32(1)) / (lr - F32(1))
    if mode == "tf_crop_and_resize":
        r0, r1 = F32(roi[0]), F32(roi[1])
        if n_out > 1:
            return r0 * (lo - F32(1)) + (x * (r1 - r0) * (lo - F32(1))) / (lr - F32(1))
        return np.full(n_out, F32(0.5 * (float(r0) + float(r1)) * (n_in - 1)), F32)
    if mode == "half_pixel_symmetric":
        adjustment = lr / (s * lo)
        offset = lo / F32(2) * (F32(1) - adjustment)
        return (np.float64(offset) + (x.astype(np.float64) + 0.5) / np.float64(s) - 0.5).astype(F32)
    return ((x + F32(0.5)) / s) - F32(0.5)  # half_pixel


def round_half_away(v):
    v = np.asarray(v, np.float64)
    return np.where(v >= 0, np.floor(v + 0.5), np.ceil(v - 0.5))


def nearest_taps(xo, n_in, nearest_mode, legacy, downsample, valid):
    if legacy:  # Resize-10 and Upsample
        i = np.ceil(xo) if downsample else np.trunc(xo)
    elif nearest_mode.startswith("round"):
        # onnxruntime treats coordinates within 1e-6 of a half as ties (float32 coordinates
        # of exact halves such as 14.5 come out as 14.499999)
        fl = np.floor(xo)
        tie = np.abs((xo - fl) - F32(0.5)) <= F32(1e-6)
        i = np.where(tie, fl + (nearest_mode == "round_prefer_ceil"), round_half_away(xo))
    elif nearest_mode == "floor":
        i = np.floor(xo)
    else:
        i = np.ceil(xo)
    return table(np.clip(i.astype(np.int64), 0, n_in - 1), valid=valid)


def linear_taps(xo, n_in, valid):
    xc = np.clip(xo, F32(0), F32(n_in - 1))
    i1 = np.minimum(xc.astype(np.int64), n_in - 1)
    i2 = np.minimum(i1 + 1, n_in - 1)
    d1, d2 = np.abs(xc - i1.astype(F32)), np.abs(xc - i2.astype(F32))
    same = i1 == i2
    d1, d2 = np.where(same, F32(0.5), d1), np.where(same, F32(0.5), d2)
    return table([i1, i2], [d2, d1], valid)


def cubic_taps(xo, n_in, a, exclude_outside, valid):
    a = F32(a)
    base = np.floor(xo)
    s = np.abs(xo - base)
    t = [s + F32(1), s, F32(1) - s, F32(2) - s]
    c = [((a * t[0] - 5 * a) * t[0] + 8 * a) * t[0] - 4 * a,
         ((a + 2) * s - (a + 3)) * s * s + 1,
         ((a + 2) * t[2] - (a + 3)) * t[2] * t[2] + 1,
         ((a * t[3] - 5 * a) * t[3] + 8 * a) * t[3] - 4 * a]
    idx = base.astype(np.int64)[None] + np.arange(-1, 3)[:, None]
    w = np.array(c, F32)
    if exclude_outside:
        w = np.where((idx < 0) | (idx >= n_in), F32(0), w)
        total = ((w[0] + w[1]) + w[2]) + w[3]
        w = w / total
    return table(np.clip(idx, 0, n_in - 1), w, valid)


def antialias_taps(n_out, n_in, rscale, coords, support_size, filt, exclude_outside, valid):
    """onnxruntime's (Pillow's) antialiasing filter weights: the kernel is stretched by the
    downscale factor and renormalized; taps outside the input fold onto the edges."""
    scale = F32(1) / F32(rscale)
    support = F32(support_size * 0.5) * scale if scale >= 1 else F32(support_size * 0.5)
    window = int(math.ceil(support)) * 2 + 1
    inv_scale = F32(1) / scale if scale >= 1 else F32(1)
    rows = []
    for i in range(n_out):
        center = F32(0.5) + (F32(i) if scale == 1 else coords[i])
        xmin_real = int(np.floor(center - support + F32(0.5)))
        xmax_real = int(np.floor(center + support + F32(0.5)))
        xmax_real = xmin_real + min(max(xmax_real - xmin_real, 0), window)
        xmin_cut, xmax_cut = min(max(xmin_real, 0), n_in), min(max(xmax_real, 0), n_in)
        xmin, xmax = (xmin_cut, xmax_cut) if exclude_outside else (xmin_real, xmax_real)
        n = xmax - xmin
        buf = [F32(0)] * max(window, n)
        total = F32(0)
        for x in range(n):
            buf[x] = filt((F32(x + xmin) - center + F32(0.5)) * inv_scale)
            total = total + buf[x]
        if not exclude_outside and xmin_cut < xmax_cut:
            neg = min(max(-xmin, 0), n - 1)
            for x in range(neg):
                buf[neg] = buf[neg] + buf[x]
            bound = min(max(n + xmin - n_in, 0), n - 1)
            for x in range(n - bound, n):
                buf[n - bound - 1] = buf[n - bound - 1] + buf[x]
            if neg or bound:
                for x in range(xmax_cut - xmin_cut):
                    buf[x] = buf[x + neg]
        inv = F32(1) if total == 0 else F32(1) / total
        rows.append([(xmin_cut + x, buf[x] * inv) for x in range(xmax_cut - xmin_cut)])
    t = max(1, max(len(r) for r in rows))
    idx = np.zeros((t, n_out), np.int64)
    w = np.zeros((t, n_out), F32)
    for i, r in enumerate(rows):
        for j, (p, wt) in enumerate(r):
            idx[j, i], w[j, i] = p, wt
        idx[len(r):, i] = r[-1][0] if r else 0
    return table(idx, w, valid)


def linear_filter(x):
    x = abs(x)
    return F32(1) - x if x < 1 else F32(0)


def cubic_filter(a):
    a = F32(a)

    def f(x):
        x = abs(x)
        if x < 1:
            return ((a + F32(2)) * x - (a + F32(3))) * x * x + F32(1)
        if x < 2:
            return (((x - F32(5)) * x + F32(8)) * x - F32(4)) * a
        return F32(0)
    return f
