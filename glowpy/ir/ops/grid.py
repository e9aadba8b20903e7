"""Sampling at coordinates given as data: GridSample (opsets 16 and 20: 2-D and N-D; and
com.microsoft's, which PyTorch's exporter writes below opset 16) and AffineGrid (opset 20), the
ops a spatial transformer, an optical-flow warp or a deformable attention's sampling writes.

GridSample reads, for each output position, one normalized coordinate per spatial dim from the
grid (its last axis in reverse dim order: x first), so the taps are known only at run time; the
kernel (kernels/tensor/grid_sample.py) computes each position's taps once and applies them to
every channel. The arithmetic here is the kernel's, step by step in float32, and is
onnxruntime's (core/providers/cpu/tensor/grid_sample.cc) and PyTorch's: denormalize, round
(nearest: half to even), bring a coordinate outside the borders back (border: clamp to the
edge pixels; reflection: fold at the borders), then each tap index read through the padding
mode (zeros: 0 outside). Cubic skips the second step, its taps alone going through the padding
mode: PyTorch's and onnxruntime's arithmetic (onnx's reference implementation clamps first,
which differs with border padding; no node test covers it). Linear and cubic (Keys, a = -0.75)
weights multiply across dims.

AffineGrid is a composite: a constant base grid of the normalized pixel centres (with a
column of ones) times the transposed theta, one MatMul."""
from __future__ import annotations

import itertools

import numpy as np

from glowpy.errors import ModelError, show
from glowpy.ir.ops.contrib import MS, Composite, add, const_scalar
from glowpy.ir.ops.registry import Op, ints, register
from glowpy.ir.validate import FOLD_BYTES

MODES = ("linear", "nearest", "cubic")
OLD_MODES = {"bilinear": "linear", "bicubic": "cubic", "nearest": "nearest"}  # opset 16
PADDINGS = ("zeros", "border", "reflection")
CUBIC_A = np.float32(-0.75)
F32 = np.float32
SAFE = F32(2 ** 22)  # |coordinate| held below this: floor exact, integers exact in float32


def _err(node, msg):
    return ModelError(f"node '{show(node.name)}' ({node.op}): {msg}")


def borders(size: int, align: bool) -> tuple[float, float]:
    """The coordinate range that lies on the input: pixel centres (align_corners) or edges."""
    return (0.0, size - 1.0) if align else (-0.5, size - 0.5)


def denormalize(g, size: int, align: bool):
    """A normalized coordinate (-1 .. 1) in pixels, as onnxruntime's GsDenormalize."""
    if align:
        return (g + F32(1)) * F32(0.5) * F32(size - 1)
    return ((g + F32(1)) * F32(size) - F32(1)) * F32(0.5)


def reflect(x, lo: float, hi: float):
    """x folded at lo and hi until it lies between them (GsReflect), as float32."""
    rng = F32(hi - lo)
    if rng == 0:
        return np.full_like(x, F32(lo))
    lo, hi = F32(lo), F32(hi)
    below, above = x < lo, x > hi
    dx = np.where(below, lo - x, np.where(above, x - hi, F32(0)))
    n = np.floor(dx / rng)
    r = dx - n * rng
    odd = np.fmod(n, F32(2)) == 1
    return np.where(below, np.where(odd, hi - r, lo + r),
                    np.where(above, np.where(odd, lo + r, hi - r), x))


def cubic_weights(t):
    """Keys' four weights for taps -1, 0, 1, 2 at fraction t (onnxruntime's GsGetCubicCoeffs)."""
    a, one, two = CUBIC_A, F32(1), F32(2)
    x = np.abs(t)
    return [((a * (x + one) - F32(5) * a) * (x + one) + F32(8) * a) * (x + one) - F32(4) * a,
            ((a + two) * x - (a + F32(3))) * x * x + one,
            ((a + two) * (one - x) - (a + F32(3))) * (one - x) * (one - x) + one,
            ((a * (two - x) - F32(5) * a) * (two - x) + F32(8) * a) * (two - x) - F32(4) * a]


class Sampling:
    """One GridSample's static description: spatial dims, mode, padding, borders."""

    def __init__(self, node):
        a = node.attrs
        self.mode, self.padding = a["mode"], a["padding_mode"]
        self.align = bool(a["align_corners"])
        self.dims = tuple(node.inputs[0].shape[2:])


def _tap_index(s: Sampling, d: int, i):
    """(index to read, valid) of integer tap positions i (float32 arrays) along dim d."""
    size = s.dims[d]
    if s.padding == "border":
        i = np.clip(i, 0, size - 1)
    elif s.padding == "reflection":
        i = np.trunc(reflect(i, *borders(size, s.align)))
    valid = (i >= 0) & (i < size)
    return np.where(valid, i, 0).astype(np.int64), valid


def dim_taps(s: Sampling, d: int, g):
    """[(index, weight or None, valid)] of the taps along dim d for normalized coordinates g."""
    size = s.dims[d]
    with np.errstate(over="ignore", invalid="ignore"):  # huge or NaN coordinates: held below
        x = denormalize(g.astype(F32), size, s.align)
    x = np.where(x > SAFE, SAFE, x)  # the kernel's bounds (floor exact; NaN to -SAFE)
    x = np.where(x >= -SAFE, x, -SAFE).astype(F32)
    if s.mode == "nearest":
        x = np.rint(x)
    lo, hi = borders(size, s.align)
    out = (x < lo) | (x > hi)
    if s.mode == "cubic":  # the taps alone go through the padding mode (module docstring)
        pass
    elif s.padding == "border":
        x = np.where(out, np.clip(x, F32(0), F32(size - 1)), x)
    elif s.padding == "reflection":
        x = np.where(out, reflect(x, lo, hi), x)
    if s.mode == "nearest":
        return [_tap_index(s, d, x) + (None,)]
    x0 = np.floor(x)
    if s.mode == "linear":
        ws, first = [(x0 + F32(1)) - x, x - x0], 0
    else:
        ws, first = cubic_weights(x - x0), -1
    return [_tap_index(s, d, x0 + F32(first + j)) + (w.astype(F32),) for j, w in enumerate(ws)]


@register
class GridSample(Op):
    inputs = ("X", "grid")
    attrs = {"align_corners": 0, "mode": "linear", "padding_mode": "zeros"}
    since = 16

    def upgrade(self, op, attrs, inputs, opset, graph):
        if opset < 20 and "mode" in attrs:  # GridSample-16: bilinear, nearest, bicubic
            attrs["mode"] = OLD_MODES.get(attrs["mode"], attrs["mode"])
        return attrs, inputs

    def infer(self, node):
        x, g = node.inputs
        a = node.attrs
        if a["mode"] not in MODES:
            raise _err(node, f"mode '{a['mode']}' is not one of {', '.join(MODES)}")
        if a["padding_mode"] not in PADDINGS:
            raise _err(node, f"padding_mode '{a['padding_mode']}' is not one of "
                             f"{', '.join(PADDINGS)}")
        r = len(x.shape)
        if r < 3 or len(g.shape) != r or g.shape[0] != x.shape[0] or g.shape[-1] != r - 2:
            raise _err(node, f"X {list(x.shape)} and grid {list(g.shape)}: X must be [N, C, "
                             "spatial...] and grid [N, out spatial..., number of spatial dims]")
        if g.dtype != np.float32:
            raise _err(node, f"grid of {g.dtype}: only float32 grids are supported; cast it")
        if x.dtype != np.float32 and (a["mode"] != "nearest" or x.dtype.kind not in "iub"):
            raise _err(node, f"X of {x.dtype} with mode '{a['mode']}': interpolation needs float32 "
                             "(integer and bool X only with mode 'nearest')")
        return [(x.dtype, x.shape[:2] + g.shape[1:-1])]

    def reference(self, node, x, g):
        s = Sampling(node)
        nb, c, nd = x.shape[0], x.shape[1], len(s.dims)
        shape = (nb, c) + tuple(g.shape[1:-1])
        flat = x.reshape(nb, c, -1)
        if not flat.shape[2] or not np.prod(shape):
            return [np.zeros(shape, x.dtype)]
        strides = [int(np.prod(s.dims[d + 1:], dtype=np.int64)) for d in range(nd)]
        per_dim = [dim_taps(s, d, g[..., nd - 1 - d].reshape(nb, -1)) for d in range(nd)]
        y = None
        for combo in itertools.product(*per_dim):
            off = sum(i * st for (i, _, _), st in zip(combo, strides))
            ok = np.logical_and.reduce([v for _, v, _ in combo])
            v = np.take_along_axis(flat, np.repeat(off[:, None, :], c, 1), 2)
            v = np.where(ok[:, None, :], v, np.zeros((), x.dtype))
            if s.mode != "nearest":
                w = combo[0][2]
                for _, _, wd in combo[1:]:
                    w = w * wd
                v = w[:, None, :] * v
            y = v if y is None else y + v
        return [y.astype(x.dtype).reshape(shape)]


@register
class MsGridSample(Composite):
    """com.microsoft GridSample: what PyTorch's exporter writes for grid_sample below opset 16
    (GridSample-16's attributes and modes)."""
    names = (MS + "GridSample",)
    inputs = ("X", "Grid")
    attrs = {"align_corners": 0, "mode": "bilinear", "padding_mode": "zeros"}

    def expand(self, g, node, ins, n_out):
        a = dict(node.attrs, mode=OLD_MODES.get(node.attrs["mode"], node.attrs["mode"]))
        return [add(g, node, "GridSample", ins, a)[0]]


@register
class AffineGrid(Composite):
    """grid[n, ..., :] = theta[n] @ (x, y[, z], 1) over the normalized pixel centres of `size`
    (N, C, H, W) or (N, C, D, H, W): one constant base grid [1, P, nd + 1] MatMul theta
    transposed [N, nd + 1, nd]."""
    inputs = ("theta", "size")
    attrs = {"align_corners": 0}
    const_inputs = (1,)
    since = 20

    def expand(self, g, node, ins, n_out):
        theta, size = ins
        shape = ints(const_scalar(node, size, "size"))
        nd = len(shape) - 2
        if nd not in (2, 3) or len(theta.shape) != 3 or theta.shape != (shape[0], nd, nd + 1):
            raise _err(node, f"theta {list(theta.shape)} for size {shape}: theta must be "
                             "[N, 2, 3] for a size [N, C, H, W] or [N, 3, 4] for [N, C, D, H, W]")
        if theta.dtype != np.float32:
            raise _err(node, f"theta of {theta.dtype}: only float32 is supported; cast it")
        points = int(np.prod(shape[2:], dtype=np.int64))
        if points * (nd + 1) * 4 > FOLD_BYTES:
            raise _err(node, f"size {shape}: the base grid of {points} points would be a "
                             f"{points * (nd + 1) * 4}-byte constant, more than {FOLD_BYTES}")
        align = bool(node.attrs["align_corners"])
        axes = []
        for n in shape[2:]:
            if n == 1:  # the centre, either way: PyTorch's affine_grid (for align_corners=1
                # onnxruntime gives 1, Eigen's LinSpaced of one point, and onnx's reference -1)
                axes.append(np.zeros(1))
            elif align:
                axes.append(-1.0 + 2.0 / (n - 1) * np.arange(n))
            else:
                axes.append((2.0 * np.arange(n) + 1.0) / n - 1.0)
        mesh = np.meshgrid(*axes, indexing="ij")  # (D,) H, W: coordinate order x, y[, z]
        base = np.stack([m.ravel() for m in reversed(mesh)] + [np.ones(mesh[0].size)], axis=1)
        base = g.constant(base.astype(np.float32)[None], "affine_base")
        t = add(g, node, "Transpose", [theta], {"perm": [0, 2, 1]}, tag="theta_t")[0]
        y = add(g, node, "MatMul", [base, t], tag="points")[0]
        out = g.constant(np.asarray([shape[0]] + shape[2:] + [nd], np.int64), "grid_shape")
        return [add(g, node, "Reshape", [y, out], tag="grid")[0]]
