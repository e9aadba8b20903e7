"""Sliding-window ops: Conv, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool.

`Window` resolves kernel, strides, dilations and pads (auto_pad, ceil_mode) once; inference,
the numpy reference and the kernel emitters all use it."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from glowpy.errors import ModelError
from glowpy.ir.ops.registry import Op, register


@dataclass(frozen=True)
class Window:
    in_size: tuple  # spatial input dims
    out_size: tuple
    kernel: tuple
    strides: tuple
    dilations: tuple
    pads_begin: tuple
    pads_end: tuple

    def taps(self, d: int, o: int):
        """Input positions read by output position o along spatial dim d (may be padding)."""
        start = o * self.strides[d] - self.pads_begin[d]
        return [start + k * self.dilations[d] for k in range(self.kernel[d])]

    def valid_range(self, d: int, k: int) -> tuple[int, int]:
        """Output positions [lo, hi) whose tap k along dim d lands inside the input."""
        s, p, dl, n = self.strides[d], self.pads_begin[d], self.dilations[d], self.in_size[d]
        lo = max(0, -((k * dl - p) // s)) if k * dl - p < 0 else 0
        hi = (n - 1 - k * dl + p) // s + 1 if n - 1 - k * dl + p >= 0 else 0
        return lo, max(lo, min(hi, self.out_size[d]))

    def landing(self, d: int) -> tuple[int, int] | None:
        """The first and last taps along dim d that land inside the input for some output
        position, narrowed so that the taps before and after them fit in the padding (the
        trimmed window keeps non-negative pads); None when no tap lands. O(1) at stride 1;
        at larger strides a tap inside the positions' span can still step over the input,
        so the ends are walked inward (at most 64 taps, else the window stays untrimmed)."""
        k, dl, s, p = self.kernel[d], self.dilations[d], self.strides[d], self.pads_begin[d]
        n, out = self.in_size[d], self.out_size[d]
        # tap t reads positions t*dl - p + o*s for o in [0, out): [lo_t, lo_t + (out-1)*s]
        first = max(0, -(-(p - (out - 1) * s) // dl))
        last = min(k - 1, (n - 1 + p) // dl)
        for _ in range(64):
            if first > last or self.valid_range(d, first)[0] < self.valid_range(d, first)[1]:
                break
            first += 1
        for _ in range(64):
            if first > last or self.valid_range(d, last)[0] < self.valid_range(d, last)[1]:
                break
            last -= 1
        if first > last:
            return None
        if self.valid_range(d, first)[0] >= self.valid_range(d, first)[1] or \
                self.valid_range(d, last)[0] >= self.valid_range(d, last)[1]:
            return 0, k - 1
        return min(first, p // dl), max(last, k - 1 - self.pads_end[d] // dl)

    def trimmed(self) -> tuple["Window", tuple]:
        """The same window without the taps that read only padding (DeepLab's ASPP at
        dilation 36 over a 28x28 map reads one tap of nine), and the slices of the kernel
        it keeps. The output is unchanged: the span in + pads - extent loses the same amount
        on both sides. A dim whose kernel drops to one tap gets dilation 1."""
        ks, pb, pe, dil, cut = [], [], [], [], []
        for d in range(len(self.kernel)):
            k, dl = self.kernel[d], self.dilations[d]
            first, last = self.landing(d) or (0, k - 1)
            ks.append(last - first + 1)
            pb.append(self.pads_begin[d] - first * dl)
            pe.append(self.pads_end[d] - (k - 1 - last) * dl)
            dil.append(dl if last > first else 1)
            cut.append(slice(first, last + 1))
        return Window(self.in_size, self.out_size, tuple(ks), self.strides, tuple(dil),
                      tuple(pb), tuple(pe)), tuple(cut)


def _taps_in(win: Window, d: int, o: int, lo: int, hi: int) -> int:
    """How many taps of output o along dim d land in [lo, hi); O(1) (kernels can be huge)."""
    start, dl, k = o * win.strides[d] - win.pads_begin[d], win.dilations[d], win.kernel[d]
    first = max(0, -(-(lo - start) // dl))
    last = min(k, -(-(hi - start) // dl))
    return max(0, last - first)


def window(node, spatial_in: tuple, kernel: tuple | None, ceil_mode: bool = False,
           weighted: bool = False, trims: bool = False) -> Window:
    """The node's window. `weighted`: the kernel is the weights' shape (Conv), so only the
    dilation can make it span far past the input; a pool's kernel is bounded by nothing else.
    `trims`: the pipeline drops the taps that read only padding (passes/conv_taps.py, float
    Conv), so the bound below applies to the taps that land."""
    a = node.attrs
    n = len(spatial_in)
    if kernel is None:
        raise ModelError(f"node '{node.name}' ({node.op}): kernel_shape is required")
    kernel = tuple(int(k) for k in kernel)
    strides = tuple(a.get("strides") or [1] * n)
    dil = tuple(a.get("dilations") or [1] * n)
    if len(kernel) != n or len(strides) != n or len(dil) != n:
        raise ModelError(f"node '{node.name}' ({node.op}): kernel_shape/strides/dilations must have "
                         f"{n} values for a {n}-D input")
    if min(strides + dil + kernel) < 1:
        raise ModelError(f"node '{node.name}' ({node.op}): kernel_shape, strides and dilations must be >= 1")
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    # A window more than twice its input wide (plus one) reads nothing but padding in most of
    # its taps, and code generation works per tap and per lane: a 100-byte model with kernel
    # or dilation 2^63 must not hang the compiler.
    def bound(eff):
        for d, (e, dl, i) in enumerate(zip(eff, dil, spatial_in)):
            if e > 2 * i + 1 and (dl > 1 or not weighted):
                raise ModelError(f"node '{node.name}' ({node.op}): kernel_shape {list(kernel)}"
                                 f" (dilations {list(dil)}) spans more than twice the "
                                 f"input {list(spatial_in)} along spatial dim {d}")
    if not trims:
        bound(eff)
    auto = a.get("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = [math.ceil(i / s) for i, s in zip(spatial_in, strides)]
        total = [max(0, (o - 1) * s + e - i) for o, s, e, i in zip(out, strides, eff, spatial_in)]
        small = [t // 2 for t in total]
        pb = small if auto == "SAME_UPPER" else [t - h for t, h in zip(total, small)]
        pe = [t - b for t, b in zip(total, pb)]
    elif auto in ("NOTSET", "VALID"):
        pads = list(a.get("pads") or [0] * (2 * n)) if auto == "NOTSET" else [0] * (2 * n)
        if len(pads) != 2 * n:
            raise ModelError(f"node '{node.name}' ({node.op}): pads must have {2 * n} values")
        pb, pe = pads[:n], pads[n:]
        # A pad wider than the input and the window together only adds output positions that
        # read nothing but padding, and pads size the kernels' masks and the output: a 300-byte
        # model with pads 2^20 must not make the compiler build millions of them. Pads as wide
        # as the window are legitimate (Caffe2's legacy pooling pads, a padded 1x1 Conv whose
        # border is its bias), so only pads past that bound are refused.
        for d, (p0, p1, e, i) in enumerate(zip(pb, pe, eff, spatial_in)):
            if max(p0, p1) > i + e:
                raise ModelError(f"node '{node.name}' ({node.op}): pads {pads} reach "
                                 f"{max(p0, p1)} past the input along spatial dim {d}; more "
                                 f"than the input's extent {i} plus the window's {e} (kernel_shape "
                                 f"{list(kernel)}, dilations {list(dil)}) reads only padding")
        out = []
        for i, p0, p1, e, s in zip(spatial_in, pb, pe, eff, strides):
            span = i + p0 + p1 - e
            if span < 0:
                raise ModelError(f"node '{node.name}' ({node.op}): kernel {list(kernel)} is larger "
                                 f"than the padded input {list(spatial_in)}")
            o = (-(-span // s) if ceil_mode else span // s) + 1
            if ceil_mode and (o - 1) * s >= i + p0:  # last window must start inside the input
                o -= 1
            out.append(o)
    else:
        raise ModelError(f"node '{node.name}' ({node.op}): unknown auto_pad '{auto}'")
    # A stride wider than the padded input leaves one output position along that dim, which
    # reads the same taps whatever the stride: clamping it changes nothing in the result but
    # keeps kernels from sizing vectors and masks by a stride of 2^14 (a 300-byte model that
    # hung code generation for minutes). Legitimate strides never exceed the padded extent,
    # so their code is unchanged.
    strides = tuple(min(s, i + p0 + p1) if o == 1 else s
                    for s, i, p0, p1, o in zip(strides, spatial_in, pb, pe, out))
    win = Window(tuple(spatial_in), tuple(out), kernel, strides, dil, tuple(pb), tuple(pe))
    if trims:  # DeepLab's ASPP: dilation 36 on a 28x28 map, one tap of nine lands
        t = win.trimmed()[0]
        bound([(k - 1) * d + 1 for k, d in zip(t.kernel, t.dilations)])
    return win


def _check_spatial(node, x, lo=1, hi=3):
    if not lo + 2 <= len(x.shape) <= hi + 2:
        raise ModelError(f"node '{node.name}' ({node.op}): input '{x.name}' has rank {len(x.shape)}; "
                         f"{lo}-D to {hi}-D spatial inputs (rank {lo + 2}..{hi + 2}) are supported")


def _gather_windows(x: np.ndarray, w: Window, fill: float) -> np.ndarray:
    """[N, C, *out, *kernel] view of x's windows (padding filled with `fill`)."""
    nd = len(w.in_size)
    pad = [(0, 0), (0, 0)] + [(p, q + s * o + (k - 1) * d) for p, q, s, o, k, d in
                              zip(w.pads_begin, w.pads_end, w.strides, w.out_size, w.kernel, w.dilations)]
    xp = np.pad(x, pad, constant_values=fill)
    out = np.empty(x.shape[:2] + w.out_size + w.kernel, x.dtype)
    for kidx in np.ndindex(*w.kernel):
        sl = tuple(slice(k * d, k * d + s * o, s) for k, d, s, o in
                   zip(kidx, w.dilations, w.strides, w.out_size))
        out[(Ellipsis,) + kidx] = xp[(slice(None), slice(None)) + sl]
    return out


@register
class Conv(Op):
    inputs = ("X", "W", "B?")
    attrs = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
             "pads": None, "strides": None}

    def window(self, node) -> Window:
        x, w = node.inputs[0], node.inputs[1]
        k = node.attrs["kernel_shape"] or w.shape[2:]
        if tuple(int(d) for d in k) != tuple(w.shape[2:]):
            raise ModelError(f"node '{node.name}' (Conv): kernel_shape {list(k)} disagrees with "
                             f"the weights' shape {list(w.shape)}")
        return window(node, x.shape[2:], k, weighted=True, trims=True)

    def infer(self, node):
        x, w, b = node.inputs[0], node.inputs[1], node.input(2)
        _check_spatial(node, x)
        g = node.attrs["group"]
        if len(w.shape) != len(x.shape) or x.shape[1] != w.shape[1] * g or w.shape[0] % g:
            raise ModelError(f"node '{node.name}' (Conv): weight shape {list(w.shape)} does not match "
                             f"input shape {list(x.shape)} with group={g}")
        if b is not None and b.shape != (w.shape[0],):
            raise ModelError(f"node '{node.name}' (Conv): bias shape {list(b.shape)} must be [{w.shape[0]}]")
        win = self.window(node)
        return [(x.dtype, (x.shape[0], w.shape[0]) + win.out_size)]

    def reference(self, node, x, w, b=None):
        win, cut = self.window(node).trimmed()
        w = w[(slice(None), slice(None)) + cut]
        g = node.attrs["group"]
        cols = _gather_windows(x, win, 0)  # N, C, *out, *k
        n, c = x.shape[:2]
        m = w.shape[0]
        nd = len(win.out_size)
        cols = cols.reshape((n, g, c // g) + win.out_size + (-1,))
        wg = w.reshape(g, m // g, c // g, -1).astype(np.float64)
        y = np.einsum("ngc...k,gmck->ngm...", cols.astype(np.float64), wg)
        y = y.reshape((n, m) + win.out_size)
        if b is not None:
            y = y + b.reshape((1, m) + (1,) * nd)
        return [y.astype(x.dtype)]


class Pool(Op):
    inputs = ("X",)
    attrs = {"auto_pad": "NOTSET", "ceil_mode": 0, "dilations": None, "kernel_shape": None,
             "pads": None, "strides": None, "count_include_pad": 0, "storage_order": 0}

    def window(self, node) -> Window:
        x = node.inputs[0]
        return window(node, x.shape[2:], node.attrs["kernel_shape"], bool(node.attrs["ceil_mode"]))

    def infer(self, node):
        x = node.inputs[0]
        _check_spatial(node, x)
        win = self.window(node)
        n = getattr(node, "_num_outputs", None) or 1
        if n > 1 and node.op != "MaxPool":
            raise ModelError(f"node '{node.name}' ({node.op}): has {n} outputs; it has one")
        y = (x.dtype, x.shape[:2] + win.out_size)
        return [y, (np.int64, y[1])] if n > 1 else [y]


@register
class MaxPool(Pool):
    def reference(self, node, x):
        win = self.window(node)
        cols = _gather_windows(x, win, -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min)
        flat = cols.reshape(cols.shape[: 2 + len(win.out_size)] + (-1,))
        if (getattr(node, "_num_outputs", None) or len(node.outputs) or 1) == 1:
            return [flat.max(-1)]
        # Indices: the flat (row-major) input position of each window's first maximum
        plane = int(np.prod(x.shape[2:]))
        within = np.arange(plane, dtype=np.int64).reshape(x.shape[2:])
        if node.attrs["storage_order"]:  # each (n, c) plane numbered column-major
            within = np.arange(plane, dtype=np.int64).reshape(x.shape[:1:-1]).transpose()
        start = np.arange(x.shape[0] * x.shape[1], dtype=np.int64).reshape(x.shape[:2]) * plane
        pos = start.reshape(x.shape[:2] + (1,) * (x.ndim - 2)) + within
        pos = _gather_windows(pos, win, -1)
        pos = pos.reshape(flat.shape)
        first = np.argmax(flat, axis=-1)[..., None]
        return [np.take_along_axis(flat, first, -1)[..., 0], np.take_along_axis(pos, first, -1)[..., 0]]


@register
class AveragePool(Pool):
    def divisors(self, node) -> np.ndarray:
        """Per output position: how many taps are counted (padding counted or not)."""
        win = self.window(node)
        per_dim = []
        for d in range(len(win.in_size)):
            lo, hi = (-win.pads_begin[d], win.in_size[d] + win.pads_end[d]) \
                if node.attrs["count_include_pad"] else (0, win.in_size[d])
            per_dim.append([_taps_in(win, d, o, lo, hi) for o in range(win.out_size[d])])
        out = np.ones(win.out_size)
        for d, c in enumerate(per_dim):
            out = out * np.asarray(c, np.float64).reshape([-1 if i == d else 1 for i in range(len(per_dim))])
        return out

    def reference(self, node, x):
        win = self.window(node)
        cols = _gather_windows(x, win, 0)
        s = cols.reshape(cols.shape[: 2 + len(win.out_size)] + (-1,)).astype(np.float64).sum(-1)
        return [(s / self.divisors(node)).astype(x.dtype)]


class GlobalPool(Op):
    inputs = ("X",)

    def infer(self, node):
        x = node.inputs[0]
        if len(x.shape) < 3:
            raise ModelError(f"node '{node.name}' ({node.op}): input rank must be >= 3")
        return [(x.dtype, x.shape[:2] + (1,) * (len(x.shape) - 2))]


@register
class GlobalAveragePool(GlobalPool):
    def reference(self, node, x):
        return [x.mean(axis=tuple(range(2, x.ndim)), keepdims=True, dtype=np.float64).astype(x.dtype)]


@register
class GlobalMaxPool(GlobalPool):
    def reference(self, node, x):
        return [x.max(axis=tuple(range(2, x.ndim)), keepdims=True)]
