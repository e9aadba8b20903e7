"""Recurrent layers: LSTM, GRU, RNN (every ONNX attribute), and RecurrentCell, the internal op
they are lowered to (glowpy/ir/passes/recurrent.py): one direction's recurrence over input
projections computed beforehand by one Gemm for all time steps.

Semantics follow the ONNX operators and, where the standard is silent, onnxruntime (measured
with onnxruntime 1.32): activation_alpha/activation_beta are consumed only by the activations
that take them, in order; missing values default to LeakyRelu 0.01, HardSigmoid 0.2/0.5, Elu
1.0 and 0 otherwise (ThresholdedRelu, ScaledTanh, Affine); activation names are
case-insensitive; a sequence shorter than seq_length (constant sequence_lens) leaves zeros in Y
past its end, Y_h/Y_c hold its state at its last valid step (zero for a length of 0), and the
reverse direction runs from its own last valid step down to 0; clip bounds the gates before
LSTM's peephole terms are added."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from glowpy.errors import ModelError
from glowpy.ir.ops.registry import REQUIRED, Op, register

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"),
                       "RNN": ("Tanh",)}
# lower-case name -> (name, default alpha or None if unused, default beta or None if unused)
ACTIVATIONS = {
    "relu": ("Relu", None, None), "tanh": ("Tanh", None, None), "sigmoid": ("Sigmoid", None, None),
    "affine": ("Affine", 0.0, 0.0), "leakyrelu": ("LeakyRelu", 0.01, None),
    "thresholdedrelu": ("ThresholdedRelu", 0.0, None), "scaledtanh": ("ScaledTanh", 0.0, 0.0),
    "hardsigmoid": ("HardSigmoid", 0.2, 0.5), "elu": ("Elu", 1.0, None),
    "softsign": ("Softsign", None, None), "softplus": ("Softplus", None, None),
}


def activate(name: str, alpha: float, beta: float, x: np.ndarray) -> np.ndarray:
    """The activation on float64 values (numpy reference of the kernels' activations)."""
    if name == "Relu":
        return np.maximum(x, 0.0)
    if name == "Tanh":
        return np.tanh(x)
    if name == "Sigmoid":
        return 1.0 / (1.0 + np.exp(-x))
    if name == "Affine":
        return alpha * x + beta
    if name == "LeakyRelu":
        return np.where(x >= 0, x, alpha * x)
    if name == "ThresholdedRelu":
        return np.where(x > alpha, x, 0.0)
    if name == "ScaledTanh":
        return alpha * np.tanh(beta * x)
    if name == "HardSigmoid":
        return np.clip(alpha * x + beta, 0.0, 1.0)
    if name == "Elu":
        return np.where(x >= 0, x, alpha * np.expm1(np.minimum(x, 0.0)))
    if name == "Softsign":
        return x / (1.0 + np.abs(x))
    assert name == "Softplus", name
    return np.logaddexp(0.0, x)


@dataclass(frozen=True)
class Spec:
    """A recurrent node's static description (every attribute checked and completed)."""
    kind: str
    ndir: int
    hidden: int
    seq: int
    batch: int
    isz: int
    layout: int
    acts: tuple  # per direction: ((name, alpha, beta), ...)
    clip: float | None
    lens: tuple | None  # per batch entry; None when every sequence is seq long
    lbr: int
    input_forget: int

    @property
    def gates(self) -> int:
        return GATES[self.kind]

    def reverse(self, direction: str, d: int) -> bool:
        return direction == "reverse" or d == 1


def _err(node, msg):
    return ModelError(f"node '{node.name}' ({node.op}): {msg}")


def _activations(node, kind: str, ndir: int) -> tuple:
    names = node.attrs["activations"] or DEFAULT_ACTIVATIONS[kind] * ndir
    per = len(DEFAULT_ACTIVATIONS[kind])
    if len(names) == per and ndir == 2:
        names = list(names) * 2
    if len(names) != per * ndir:
        raise _err(node, f"has {len(names)} activations; expected {per * ndir} "
                         f"({per} per direction)")
    alphas = list(node.attrs["activation_alpha"] or [])
    betas = list(node.attrs["activation_beta"] or [])
    out = []
    for n in names:
        key = str(n).lower()
        if key not in ACTIVATIONS:
            raise _err(node, f"activation '{str(n)[:40]}' is not supported (one of "
                             f"{', '.join(v[0] for v in ACTIVATIONS.values())})")
        name, da, db = ACTIVATIONS[key]
        a = float(alphas.pop(0)) if da is not None and alphas else (da or 0.0)
        b = float(betas.pop(0)) if db is not None and betas else (db or 0.0)
        out.append((name, a, b))
    return tuple(tuple(out[d * per:(d + 1) * per]) for d in range(ndir))


def spec(node) -> Spec:
    kind, a = node.op, node.attrs
    ins = list(node.inputs) + [None] * 8
    x, w, r, b, lens, h0, c0, p = ins[:8]
    if a["direction"] not in ("forward", "reverse", "bidirectional"):
        raise _err(node, f"direction '{str(a['direction'])[:40]}' is not forward, reverse or "
                         "bidirectional")
    ndir = 2 if a["direction"] == "bidirectional" else 1
    if a["layout"] not in (0, 1):
        raise _err(node, f"layout {a['layout']} is not 0 or 1")
    for v in (x, w, r, b, h0, c0, p):
        if v is not None and v.dtype != np.float32:
            raise _err(node, f"'{v.name}' is {v.dtype.name}; only float32 is supported")
    if len(x.shape) != 3 or len(w.shape) != 3 or len(r.shape) != 3:
        raise _err(node, f"X, W and R must be 3-D, got {list(x.shape)}, {list(w.shape)}, "
                         f"{list(r.shape)}")
    seq, batch, isz = (x.shape[1], x.shape[0], x.shape[2]) if a["layout"] else x.shape
    hid = a["hidden_size"] if a["hidden_size"] is not None else r.shape[-1]
    g = GATES[kind]
    expect = {"W": (w, (ndir, g * hid, isz)), "R": (r, (ndir, g * hid, hid)),
              "B": (b, (ndir, 2 * g * hid)), "P": (p, (ndir, 3 * hid)),
              "initial_h": (h0, (batch, ndir, hid) if a["layout"] else (ndir, batch, hid)),
              "initial_c": (c0, (batch, ndir, hid) if a["layout"] else (ndir, batch, hid))}
    for what, (v, shape) in expect.items():
        if v is not None and v.shape != shape:
            raise _err(node, f"{what} '{v.name}' has shape {list(v.shape)}; expected {list(shape)} "
                             f"(hidden_size {hid}, {ndir} direction(s))")
    lv = None
    if lens is not None:
        arr = np.asarray(node.const_input(4, "sequence_lens")).reshape(-1)
        if arr.shape != (batch,) or (arr < 0).any() or (arr > seq).any():
            raise _err(node, f"sequence_lens {arr.tolist()[:8]} must be {batch} lengths in "
                             f"[0, {seq}]")
        lv = None if (arr == seq).all() else tuple(int(v) for v in arr)
    clip = a["clip"]
    if clip is not None and not clip > 0:
        raise _err(node, f"clip {clip} must be positive")
    return Spec(kind, ndir, int(hid), int(seq), int(batch), int(isz), int(a["layout"]),
                _activations(node, kind, ndir), None if clip is None else float(clip), lv,
                int(a.get("linear_before_reset", 0)), int(a.get("input_forget", 0)))


def cell_reference(kind, acts, clip, lens, reverse, lbr, input_forget, proj, rt, h0, c0, p, rbh):
    """One direction's recurrence in float64: proj [seq, batch, gates*H] (X W^T + biases),
    rt [H, gates*H] (R^T). Returns Y [seq, batch, H], Y_h, Y_c [batch, H]."""
    seq, batch, _ = proj.shape
    hid = rt.shape[0]
    lens = np.asarray(lens if lens is not None else [seq] * batch)
    h = np.zeros((batch, hid)) if h0 is None else h0.astype(np.float64).copy()
    c = np.zeros((batch, hid)) if c0 is None else c0.astype(np.float64).copy()
    p = np.zeros(3 * hid) if p is None else p.astype(np.float64)
    y = np.zeros((seq, batch, hid))
    cl = (lambda v: np.clip(v, -clip, clip)) if clip is not None else (lambda v: v)
    fn = [lambda v, a=a: activate(a[0], a[1], a[2], cl(v)) for a in acts]
    rows = np.arange(batch)
    for s in range(int(lens.max(initial=0))):
        active = s < lens
        t = np.where(active, lens - 1 - s if reverse else s, 0)
        xp = proj[t, rows].astype(np.float64)
        gates = xp + h @ rt
        if kind == "LSTM":
            gi, go, gf, gc = np.split(gates, 4, axis=1)
            # (onnxruntime clips the sum with the peephole term)
            i = fn[0](gi + p[:hid] * c)
            f = 1.0 - i if input_forget else fn[0](gf + p[2 * hid:] * c)
            cn = f * c + i * fn[1](gc)
            o = fn[0](go + p[hid:2 * hid] * cn)
            hn = o * activate(*acts[2], cn)  # (the cell state is not clipped)
        elif kind == "GRU":
            z, r = fn[0](gates[:, :hid]), fn[0](gates[:, hid:2 * hid])
            if lbr:
                hh = fn[1](xp[:, 2 * hid:] + r * (h @ rt[:, 2 * hid:] + rbh))
            else:
                hh = fn[1](xp[:, 2 * hid:] + (r * h) @ rt[:, 2 * hid:])
            hn, cn = (1.0 - z) * hh + z * h, c
        else:
            hn, cn = fn[0](gates), c
        h = np.where(active[:, None], hn, h)
        c = np.where(active[:, None], cn, c)
        y[t[active], rows[active]] = hn[active]
    empty = lens == 0  # onnxruntime: a sequence of length 0 has zero final states
    return y, np.where(empty[:, None], 0.0, h), np.where(empty[:, None], 0.0, c)


class Recurrent(Op):
    inputs = ("X", "W", "R", "B?", "sequence_lens?", "initial_h?")
    attrs = {"activation_alpha": None, "activation_beta": None, "activations": None,
             "clip": None, "direction": "forward", "hidden_size": None, "layout": 0}
    const_inputs = (4,)
    max_outputs = 2

    def upgrade(self, op, attrs, inputs, opset, graph):
        # opset 1's output_sequence only said whether Y may be omitted (it may, always)
        if opset < 7:
            attrs.pop("output_sequence", None)
        return attrs, inputs

    def infer(self, node):
        s = spec(node)
        n = getattr(node, "_num_outputs", None) or 1
        if not 1 <= n <= self.max_outputs:
            raise _err(node, f"has {n} outputs; expected at most {self.max_outputs}")
        y = (s.batch, s.seq, s.ndir, s.hidden) if s.layout else (s.seq, s.ndir, s.batch, s.hidden)
        st = (s.batch, s.ndir, s.hidden) if s.layout else (s.ndir, s.batch, s.hidden)
        return [(np.float32, y)] + [(np.float32, st)] * (n - 1)

    def reference(self, node, x, w, r, b=None, lens=None, h0=None, c0=None, p=None):
        s = spec(node)
        hid, gh = s.hidden, s.gates * s.hidden
        if s.layout:
            x = x.transpose(1, 0, 2)
            h0 = None if h0 is None else h0.transpose(1, 0, 2)
            c0 = None if c0 is None else c0.transpose(1, 0, 2)
        ys, hs, cs = [], [], []
        for d in range(s.ndir):
            bias = np.zeros(2 * gh) if b is None else b[d].astype(np.float64)
            wb, rb = bias[:gh], bias[gh:].copy()
            rbh = rb[2 * hid:].copy() if s.kind == "GRU" and s.lbr else None
            if rbh is not None:
                rb[2 * hid:] = 0.0
            proj = x.reshape(-1, s.isz).astype(np.float64) @ w[d].T.astype(np.float64) + wb + rb
            y, h, c = cell_reference(
                s.kind, s.acts[d], s.clip, s.lens, s.reverse(node.attrs["direction"], d), s.lbr,
                s.input_forget, proj.reshape(s.seq, s.batch, gh), r[d].T.astype(np.float64),
                None if h0 is None else h0[d], None if c0 is None else c0[d],
                None if p is None else p[d], rbh)
            ys.append(y), hs.append(h), cs.append(c)
        y, h, c = np.stack(ys, 1), np.stack(hs), np.stack(cs)
        if s.layout:
            y, h, c = y.transpose(2, 0, 1, 3), h.transpose(1, 0, 2), c.transpose(1, 0, 2)
        n = len(node.outputs) or getattr(node, "_num_outputs", None) or 1
        return [v.astype(np.float32) for v in (y, h, c)][:n]


@register
class RNN(Recurrent):
    pass


@register
class GRU(Recurrent):
    attrs = dict(Recurrent.attrs, linear_before_reset=0)


@register
class LSTM(Recurrent):
    inputs = Recurrent.inputs + ("initial_c?", "P?")
    attrs = dict(Recurrent.attrs, input_forget=0)
    max_outputs = 3


@register
class RecurrentCell(Op):
    """One direction of a recurrent layer over precomputed input projections.

    proj [seq, batch, gates*H] holds X W^T + Wb + Rb (GRU with linear_before_reset: without the
    h gate's Rb, which is `Rbh`, applied inside the reset product); RT [H, gates*H] is R^T.
    Outputs: Y [seq, batch, H] (y=0, no reader: [1, batch, H], never written), Y_h [batch, H],
    (LSTM) Y_c [batch, H], and the kernel's planned scratch [batch, gates*H (+H for GRU's
    reset product)] that no one reads."""
    inputs = ("proj", "RT", "initial_h?", "initial_c?", "P?", "Rbh?")
    attrs = {"kind": REQUIRED, "acts": REQUIRED, "clip": None, "reverse": 0, "lens": None,
             "lbr": 0, "input_forget": 0, "y": 1}
    traits = frozenset({"internal"})
    since = 0

    @staticmethod
    def scratch_width(kind, hid, lbr):
        return GATES[kind] * hid + (hid if kind == "GRU" and not lbr else 0)

    def infer(self, node):
        proj, rt = node.inputs[0], node.inputs[1]
        seq, batch, _ = proj.shape
        hid = rt.shape[0]
        a = node.attrs
        st = (np.float32, (batch, hid))
        y = (np.float32, (seq if a["y"] else 1, batch, hid))
        outs = [y, st] + ([st] if a["kind"] == "LSTM" else [])
        return outs + [(np.float32, (batch, self.scratch_width(a["kind"], hid, a["lbr"])))]

    def reference(self, node, proj, rt, h0=None, c0=None, p=None, rbh=None):
        a = node.attrs
        y, h, c = cell_reference(a["kind"], a["acts"], a["clip"], a["lens"], a["reverse"], a["lbr"],
                                 a["input_forget"], proj, rt.astype(np.float64), h0, c0, p,
                                 None if rbh is None else rbh.astype(np.float64))
        scratch = np.zeros(self.infer(node)[-1][1], np.float32)
        y = y if a["y"] else np.zeros_like(y[:1])
        outs = [y, h] + ([c] if a["kind"] == "LSTM" else [])
        return [v.astype(np.float32) for v in outs] + [scratch]
