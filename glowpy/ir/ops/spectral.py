"""Spectral ops of opset 17 and later: DFT, STFT and MelWeightMatrix, the front end of audio
models that compute their features in the graph (torch.stft, torchaudio's MelSpectrogram).

A transform of a known length is linear, so DFT and STFT are `Composite`s (ops/contrib.py) whose
expansion is one product with a constant matrix of the exact twiddle factors (float64, rounded
once): DFT a MatMul over the transformed axis moved last, STFT a strided Conv1d whose filters are
the window times the DFT basis, so every frame is windowed and transformed by the convolution
kernels. That is O(n^2) where an FFT is O(n log n); at the lengths audio front ends use (a
frame of 400 or 512 samples, 257 bins) the product runs at the GEMM's rate, and a matrix past
MAX_MATRIX floats (a DFT of about 2,048 complex points) is refused rather than made.

Semantics are onnx's reference implementation's (numpy.fft): forward e^(-2 pi i k t / L),
inverse e^(+...) / L, dft_length truncating or zero-padding the input, onesided keeping bins
0 .. L/2, inverse with onesided the real inverse of a one-sided spectrum (numpy.fft.irfft: the
missing half the conjugate of the given one, a real output whose last dim is 1)."""
from __future__ import annotations

import numpy as np

from glowpy.errors import ModelError, show
from glowpy.ir.ops.contrib import Composite, add, const_scalar
from glowpy.ir.ops.registry import Op, norm_axis, register

MAX_MATRIX = 1 << 23  # floats of a transform's matrix (32 MiB)


def _err(node, msg):
    return ModelError(f"node '{show(node.name)}' ({node.op}): {msg}")


def _const_int(node, v, what, default=None):
    """A compile-time scalar operand as an int (default when omitted)."""
    if v is None:
        return default
    a = np.asarray(const_scalar(node, v, what)).reshape(-1)
    if a.size != 1:
        raise _err(node, f"{what} must be a single value, got {a.size}")
    return int(a[0])


def basis(node, n: int, comps: int, length: int, inverse: bool, onesided: bool):
    """(matrix [m x comps, K x d], m, K, d): the transform of the first m = min(n, needed)
    input points of `comps` components (1 real, 2 complex) into K bins of d components (2
    complex, 1 the real inverse of a one-sided spectrum)."""
    if length < 1:
        raise _err(node, f"dft_length {length}: must be 1 or more")
    real_inverse = inverse and onesided
    m = min(n, length // 2 + 1 if real_inverse else length)
    k_out = length if real_inverse or not onesided else length // 2 + 1
    d = 1 if real_inverse else 2
    if m * comps * k_out * d > MAX_MATRIX:
        raise _err(node, f"a transform of {length} points over {n} inputs needs a "
                         f"{m * comps} x {k_out * d} matrix, more than {MAX_MATRIX} floats; "
                         "transforms this long are not supported")
    t = np.arange(m, dtype=np.float64)[:, None]
    k = np.arange(k_out, dtype=np.float64)[None, :]
    w = np.zeros((m, comps, k_out, d))
    theta = 2 * np.pi * ((t * k) % length) / length  # (t k mod L): the angle without growth
    if real_inverse:  # input bin t, output sample k: irfft's weights 1, 2, ..., 2, (1)
        a = np.where((t == 0) | ((length % 2 == 0) & (t == length // 2)), 1.0, 2.0) / length
        w[:, 0, :, 0] = a * np.cos(theta)
        if comps == 2:
            w[:, 1, :, 0] = -a * np.sin(theta)
        return w.reshape(m * comps, k_out * d), m, k_out, d
    sign, scale = (1.0, 1.0 / length) if inverse else (-1.0, 1.0)
    cos, sin = np.cos(theta) * scale, np.sin(theta) * scale
    w[:, 0, :, 0], w[:, 0, :, 1] = cos, sign * sin
    if comps == 2:
        w[:, 1, :, 0], w[:, 1, :, 1] = -sign * sin, cos
    return w.reshape(m * comps, k_out * d), m, k_out, d


@register
class DFT(Composite):
    """DFT-17 (axis an attribute, default 1) and DFT-20 (axis an input, default -2)."""
    inputs = ("input", "dft_length?", "axis?")
    attrs = {"inverse": 0, "onesided": 0, "axis": None}
    attr_kinds = {"axis": int}
    const_inputs = (1, 2)
    since = 17

    def upgrade(self, op, attrs, inputs, opset, graph):
        if opset < 20:  # DFT-17: axis an attribute, default 1
            axis = attrs.pop("axis", 1)
            inputs = list(inputs) + [None] * (2 - len(inputs))
            inputs = inputs[:2] + [graph.constant(np.asarray(axis, np.int64), "dft_axis")]
        return attrs, inputs

    def expand(self, g, node, ins, n_out):
        x, length, axis = ins + [None] * (3 - len(ins))
        r = len(x.shape)
        comps = x.shape[-1] if r >= 2 else 0
        if x.dtype != np.float32 or r < 2 or comps not in (1, 2):
            raise _err(node, f"input {list(x.shape)} of {x.dtype}: must be float32 [..., n, 1] "
                             "(real) or [..., n, 2] (complex)")
        a = norm_axis(_const_int(node, axis, "axis", -2), r, node)
        if a == r - 1:
            raise _err(node, "axis is the last dim, which holds the real and imaginary parts")
        a_ = node.attrs
        inverse, onesided = bool(a_["inverse"]), bool(a_["onesided"])
        n = x.shape[a]
        default = 2 * (n - 1) if inverse and onesided else n
        length = _const_int(node, length, "dft_length", default)
        w, m, k_out, d = basis(node, n, comps, length, inverse, onesided)
        perm = [i for i in range(r - 1) if i != a] + [a, r - 1]
        t = x if perm == list(range(r)) else \
            add(g, node, "Transpose", [x], {"perm": perm}, tag="axis_last")[0]
        if m < n:
            t = add(g, node, "Slice", [t, g.constant(np.array([0], np.int64), "start"),
                                       g.constant(np.array([m], np.int64), "end"),
                                       g.constant(np.array([r - 2], np.int64), "axes")],
                    tag="points")[0]
        lead = [x.shape[i] for i in perm[:-2]]
        rows = int(np.prod(lead, dtype=np.int64))
        t = add(g, node, "Reshape", [t, g.constant(np.array([rows, m * comps], np.int64))],
                tag="rows")[0]
        y = add(g, node, "MatMul", [t, g.constant(w.astype(np.float32), "dft_basis")],
                tag="transform")[0]
        y = add(g, node, "Reshape", [y, g.constant(np.array(lead + [k_out, d], np.int64))],
                tag="bins")[0]
        if perm != list(range(r)):
            y = add(g, node, "Transpose", [y], {"perm": list(np.argsort(perm))},
                    tag="axis_back")[0]
        return [y]


@register
class STFT(Composite):
    """Frames of frame_length every frame_step samples, each times the window and transformed:
    a Conv1d (stride frame_step) whose 2 x bins filters are window x cos and window x -sin; a
    window known only at run time multiplies the gathered frames before the transform."""
    inputs = ("signal", "frame_step", "window?", "frame_length?")
    attrs = {"onesided": 1}
    const_inputs = (1, 3)
    since = 17

    def expand(self, g, node, ins, n_out):
        x, step, window, flen = ins + [None] * (4 - len(ins))
        if x.dtype != np.float32 or len(x.shape) != 3 or x.shape[2] not in (1, 2):
            raise _err(node, f"signal {list(x.shape)} of {x.dtype}: must be float32 "
                             "[batch, length, 1] (real) or [batch, length, 2] (complex)")
        nb, length, comps = x.shape
        step = _const_int(node, step, "frame_step")
        if step is None or step < 1:
            raise _err(node, f"frame_step {step}: must be 1 or more")
        win_len = None
        if window is not None:
            if len(window.shape) != 1:
                raise _err(node, f"window {list(window.shape)}: must be 1-D")
            win_len = window.shape[0]
        fl = _const_int(node, flen, "frame_length", length if win_len is None else win_len)
        if win_len is not None and win_len != fl:
            raise _err(node, f"window of {win_len} values for frame_length {fl}")
        if not 1 <= fl <= length:
            raise _err(node, f"frame_length {fl} for a signal of {length} samples")
        onesided = bool(node.attrs["onesided"])
        w, _, k_out, d = basis(node, fl, comps, fl, False, onesided)
        frames = (length - fl) // step + 1
        shape = g.constant(np.array([nb, frames, k_out, d], np.int64))
        if window is not None and not window.is_const:
            # a window known at run time: the frames gathered, windowed, then transformed
            idx = np.arange(frames)[:, None] * step + np.arange(fl)[None, :]
            t = add(g, node, "Gather", [x, g.constant(idx.astype(np.int64), "frame_index")],
                    {"axis": 1}, tag="frames")[0]  # [batch, frames, fl, comps]
            win = add(g, node, "Reshape", [window, g.constant(np.array([fl, 1], np.int64))],
                      tag="window_column")[0]
            t = add(g, node, "Mul", [t, win], tag="windowed")[0]
            t = add(g, node, "Reshape", [t, g.constant(np.array([nb * frames, fl * comps],
                                                                np.int64))], tag="rows")[0]
            y = add(g, node, "MatMul", [t, g.constant(w.astype(np.float32), "dft_basis")],
                    tag="transform")[0]
            return [add(g, node, "Reshape", [y, shape], tag="bins")[0]]
        w = w.reshape(fl, comps, k_out * d)
        if window is not None:
            w = w * np.asarray(window.const, np.float64).reshape(-1)[:, None, None]
        weights = g.constant(np.ascontiguousarray(w.transpose(2, 1, 0)).astype(np.float32),
                             "stft_basis")  # [bins x 2, comps, frame_length]
        t = add(g, node, "Transpose", [x], {"perm": [0, 2, 1]}, tag="channels")[0]
        y = add(g, node, "Conv", [t, weights], {"kernel_shape": [fl], "strides": [step]},
                tag="frames")[0]
        y = add(g, node, "Transpose", [y], {"perm": [0, 2, 1]}, tag="frames_first")[0]
        return [add(g, node, "Reshape", [y, shape], tag="bins")[0]]


@register
class MelWeightMatrix(Op):
    """The [dft_length / 2 + 1, num_mel_bins] triangular mel filter bank (onnx's reference
    implementation's arithmetic); its inputs are compile-time scalars, so it always folds."""
    inputs = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz",
              "upper_edge_hertz")
    attrs = {"output_datatype": 1}
    const_inputs = (0, 1, 2, 3, 4)
    since = 17

    def _dtype(self, node):
        from onnx import helper
        return np.dtype(helper.tensor_dtype_to_np_dtype(node.attrs["output_datatype"]))

    def _args(self, node):
        vals = [node.const_input(i, name) for i, name in enumerate(self.inputs)]
        if any(v is None for v in vals):
            raise _err(node, "its inputs must be known at compile time")
        bins, length, rate = (int(np.asarray(v).reshape(-1)[0]) for v in vals[:3])
        lo, hi = (float(np.asarray(v).reshape(-1)[0]) for v in vals[3:])
        if bins < 1 or length < 1 or rate < 1 or not 0 <= lo < hi:
            raise _err(node, f"num_mel_bins {bins}, dft_length {length}, sample_rate {rate}, "
                             f"edges {lo}..{hi} Hz: need positive counts and 0 <= lower < upper")
        return bins, length, rate, lo, hi

    def infer(self, node):
        bins, length, *_ = self._args(node)
        return [(self._dtype(node), (length // 2 + 1, bins))]

    def reference(self, node, *_):
        bins, length, rate, lo, hi = self._args(node)
        edges = np.arange(bins + 2)
        lo_mel = 2595 * np.log1p(lo / 700) / np.log(10)
        hi_mel = 2595 * np.log1p(hi / 700) / np.log(10)
        hz = 700 * np.expm1((edges * ((hi_mel - lo_mel) / edges.size) + lo_mel) / 2595
                            * np.log(10))
        at = (((length + 1) * hz) // rate).astype(int)
        out = np.zeros((length // 2 + 1, bins))
        for i in range(bins):
            left, centre, right = at[i], at[i + 1], at[i + 2]
            if centre == left:
                if 0 <= centre < out.shape[0]:
                    out[centre, i] = 1
            else:
                j = np.arange(max(left, 0), min(centre + 1, out.shape[0]))
                out[j, i] = (j - left) / (centre - left)
            if right > centre:
                j = np.arange(max(centre, 0), min(right, out.shape[0]))
                out[j, i] = (right - j) / (right - centre)
        return [out.astype(self._dtype(node))]
