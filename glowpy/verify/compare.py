"""Per-layer error figures, the tolerance test, the table and its JSON.

Float tensors: max abs error, max rel error (each element's error over max(|ref|, atol), so
elements near zero do not blow it up), the largest distance in units in the last place
(float32 bit patterns in ordered integer form) and the SNR; a tensor is within tolerance when
max abs <= rtol * max|ref| + atol (the project's standard, 1e-3 and 1e-4). Integer tensors of
8 bits: the largest difference in LSB (within tolerance at <= `lsb`, 1 by default: requantizing
rounding may differ by one step between engines) and the SNR in dB of the dequantized values.
Other integer and bool tensors must be equal."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np

from glowpy.errors import show


@dataclass
class Tolerance:
    rtol: float = 1e-3
    atol: float = 1e-4
    lsb: int = 1


@dataclass
class Row:
    """One layer's figures over every input set (worst case)."""
    layer: object  # observe.Layer
    max_abs: float = 0.0
    max_rel: float = 0.0
    ulp: float | None = None  # float tensors
    lsb: float | None = None  # 8-bit integer tensors
    snr_db: float = math.inf
    tol: float = 0.0  # the largest error allowed (abs for floats, LSB for int8)
    ok: bool = True
    float_snr_db: float | None = None  # int8 models: against the float model
    float_max_abs: float | None = None
    is_output: bool = False
    samples: list = field(default_factory=list)


def _ordered(a: np.ndarray) -> np.ndarray:
    i = a.astype(np.float32).view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def ulp_distance(got: np.ndarray, ref: np.ndarray) -> float:
    """Largest distance in float32 ULPs; inf where exactly one side is NaN."""
    g, r = np.ravel(got).astype(np.float32), np.ravel(ref).astype(np.float32)
    gn, rn = np.isnan(g), np.isnan(r)
    if np.any(gn != rn):
        return math.inf
    keep = ~gn
    if not keep.any():
        return 0.0
    return float(np.max(np.abs(_ordered(g[keep]) - _ordered(r[keep])), initial=0))


def snr_db(signal: np.ndarray, noise: np.ndarray) -> float:
    n = float(np.sum(np.square(noise, dtype=np.float64)))
    if n == 0:
        return math.inf
    if not math.isfinite(n):
        return -math.inf
    s = float(np.sum(np.square(signal, dtype=np.float64)))
    return 10 * math.log10(s / n) if s > 0 else -math.inf


def _dequant(a: np.ndarray, q) -> np.ndarray:
    scale, zp = q if q else (1.0, 0)
    return (a.astype(np.float64) - zp) * scale


def measure(row: Row, got: np.ndarray, ref: np.ndarray, tol: Tolerance, fref=None) -> None:
    """Adds one input set's comparison of `got` (the bundle's) with `ref` (onnxruntime's) and
    with `fref` (the float model's counterpart) to `row`."""
    layer = row.layer
    got = np.asarray(got).reshape(np.shape(ref)) if np.size(got) == np.size(ref) else got
    if np.shape(got) != np.shape(ref):
        row.ok, row.max_abs, row.snr_db = False, math.inf, -math.inf
        row.samples.append({"error": f"shape {list(np.shape(got))} != {list(np.shape(ref))}"})
        return
    dt = np.dtype(layer.dtype)
    if dt.kind == "f":
        g, r = got.astype(np.float64), ref.astype(np.float64)
        d = np.abs(g - r)
        d = np.where(np.isnan(g) & np.isnan(r), 0.0, np.where(np.isnan(d), np.inf, d))
        ref_max = float(np.max(np.abs(r[np.isfinite(r)]), initial=0.0))
        allowed = tol.rtol * ref_max + tol.atol
        max_abs = float(np.max(d, initial=0.0))
        rel = float(np.max(d / np.maximum(np.abs(r), tol.atol), initial=0.0))
        row.ulp = max(row.ulp or 0.0, ulp_distance(g, r))
        snr = snr_db(r, g - r)
        ok = max_abs <= allowed
    elif dt.itemsize == 1 and dt.kind in "iu":
        steps = np.abs(got.astype(np.int64) - ref.astype(np.int64))
        lsb = float(np.max(steps, initial=0))
        gq, rq = _dequant(got, layer.qparams), _dequant(ref, layer.qparams)
        max_abs = float(np.max(np.abs(gq - rq), initial=0.0))
        one = layer.qparams[0] if layer.qparams else 1.0  # one LSB: the floor of |ref|
        rel = float(np.max(np.abs(gq - rq) / np.maximum(np.abs(rq), one), initial=0.0))
        row.lsb = max(row.lsb or 0.0, lsb)
        snr = snr_db(rq, gq - rq)
        allowed = float(tol.lsb)
        ok = lsb <= tol.lsb
    else:
        g, r = got.astype(np.float64), ref.astype(np.float64)
        max_abs = float(np.max(np.abs(g - r), initial=0.0))
        rel = float(np.max(np.abs(g - r) / np.maximum(np.abs(r), 1), initial=0.0))
        snr = snr_db(r, g - r)
        allowed, ok = 0.0, max_abs == 0
    row.max_abs, row.max_rel = max(row.max_abs, max_abs), max(row.max_rel, rel)
    row.snr_db = min(row.snr_db, snr)
    row.tol = allowed if not row.samples else min(row.tol, allowed)
    row.ok = row.ok and ok
    sample = {"max_abs": max_abs, "ok": ok}
    if fref is not None:
        fg = _dequant(got, layer.qparams) if dt.kind in "iu" else got.astype(np.float64)
        fref = np.asarray(fref)  # an int8 counterpart (no Q/DQ pair removed) is on the grid
        fr = (_dequant(fref, layer.qparams) if fref.dtype.kind in "iu" else
              fref.astype(np.float64)).reshape(fg.shape)
        fs, fa = snr_db(fr, fg - fr), float(np.max(np.abs(fg - fr), initial=0.0))
        row.float_snr_db = fs if row.float_snr_db is None else min(row.float_snr_db, fs)
        row.float_max_abs = max(row.float_max_abs or 0.0, fa)
    row.samples.append(sample)


def first_failure(rows: list[Row]) -> Row | None:
    return next((r for r in rows if not r.ok), None)


def _num(x, fmt="{:.3g}") -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return fmt.format(x)


def _cut(s: str, n: int, table: bool = True) -> str:
    """A name shortened to n characters: in the table, TF-converted names, which join the fused
    ops' names with ';', by their first name (the layer's); else by keeping head and tail."""
    s = show(s, 10_000)
    if len(s) <= n:
        return s
    if table and ";" in s and len(s.split(";")[0]) <= n - 2:
        return s.split(";")[0] + ";~"
    h = (n - 1) // 2
    return s[:h] + "~" + s[len(s) - (n - 1 - h):]


def table(rows: list[Row], with_float: bool) -> list[str]:
    """The per-layer table; '>>' marks the first layer beyond tolerance, '*' the others, and
    the model's outputs are tagged 'out'."""
    head = (f"{'':2}{'#':>3}  {'op':<14} {'node':<36} {'glowpy':<13} {'shape':<12} {'max abs':>9} "
            f"{'max rel':>9} {'ULP/LSB':>8} {'SNR dB':>7}")
    if with_float:
        head += f" {'float: SNR dB':>13} {'max abs':>9}"
    lines = [head]
    first = first_failure(rows)
    for r in rows:
        L = r.layer
        mark = ">>" if r is first else " *" if not r.ok else "  "
        units = r.ulp if r.ulp is not None else r.lsb
        line = (f"{mark}{L.index:>3}  {_cut(L.op, 14):<14} {_cut(L.node, 36):<36} "
                f"{_cut(L.kernel, 13):<13} {_cut('x'.join(map(str, L.shape)) or 'scalar', 12):<12} "
                f"{_num(r.max_abs):>9} {_num(r.max_rel):>9} {_num(units, '{:.0f}' if (units or 0) < 1e7 else '{:.2g}'):>8} "
                f"{_num(r.snr_db, '{:.1f}'):>7}")
        if with_float:
            line += f" {_num(r.float_snr_db, '{:.1f}'):>13} {_num(r.float_max_abs):>9}"
        if r.is_output:
            line += "  out"
        lines.append(line)
    return lines


def failure_line(r: Row) -> str:
    L = r.layer
    what = (f"{r.lsb:.0f} LSB > {r.tol:.0f}" if r.lsb is not None else
            f"max abs error {r.max_abs:.3g} > tolerance {r.tol:.3g}")
    return (f"first layer beyond tolerance: #{L.index} {L.op} node '{_cut(L.node, 100, False)}' "
            f"(tensor '{_cut(L.tensor, 100, False)}', glowpy {L.kernel}): {what}")


def to_json(rows: list[Row], header: dict) -> str:
    first = first_failure(rows)

    def num(x):
        return None if x is None else (str(x) if isinstance(x, float) and not math.isfinite(x)
                                        else x)
    layers = []
    for r in rows:
        L = r.layer
        layers.append({"index": L.index, "op": L.op, "node": L.node, "tensor": L.tensor,
                       "kernel": L.kernel, "kernel_node": L.kernel_node, "dtype": L.dtype, "shape": list(L.shape),
                       "quantization": ({"scale": L.qparams[0], "offset": L.qparams[1]}
                                        if L.qparams else None),
                       "output": r.is_output, "max_abs": num(r.max_abs),
                       "max_rel": num(r.max_rel), "ulp": num(r.ulp), "lsb": num(r.lsb),
                       "snr_db": num(r.snr_db), "tolerance": num(r.tol), "ok": r.ok,
                       "float_snr_db": num(r.float_snr_db),
                       "float_max_abs": num(r.float_max_abs)})
    doc = dict(header)
    doc["first_failure"] = first.layer.index if first else None
    doc["layers"] = layers
    return json.dumps(doc, indent=1) + "\n"
