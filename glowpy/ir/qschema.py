"""Profile-guided quantization: the profile file, the schemas that turn a tensor's observed range
into int8 (scale, offset), KL calibration, and weight quantization (Glow's options).

A profile (written by `model-profiler`, read by `model-compiler -load-profile`) is YAML; glowpy
writes it in YAML's JSON-compatible flow style, so it reads back with or without PyYAML:

    {"format": "glowpy-profile", "version": 1, "model": "resnet8.onnx", "samples": 3,
     "bins": 2048, "tensors": [{"name": ..., "shape": [...], "min": ..., "max": ...,
                               "histogram": [...]}, ...]}

The histogram has `bins` equal bins over [min, max] of all samples."""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field

import numpy as np

from glowpy.errors import ModelError, UsageError, show

SCHEMAS = ("asymmetric", "symmetric", "symmetric_with_uint8", "symmetric_with_power2_scale")
CALIBRATIONS = ("none", "KL")
BIAS_PRECISIONS = ("Int32", "Int8")
BINS = 2048
FORMAT = "glowpy-profile"
KL_MIN_VALUES = 4 * BINS
MAX_CLIPPED = 1e-3  # KL windows clip at most this fraction of the profiled values


@dataclass
class QuantOptions:
    schema: str = "asymmetric"
    precision_bias: str = "Int32"
    channelwise: bool = False
    keep: frozenset = frozenset()  # op names left in float
    calibration: str = "none"

    def check(self):
        for what, v, allowed in (("quantization-schema", self.schema, SCHEMAS),
                                 ("quantization-precision-bias", self.precision_bias,
                                  BIAS_PRECISIONS),
                                 ("quantization-calibration", self.calibration, CALIBRATIONS)):
            if v not in allowed:
                raise UsageError(f"-{what}={v}: expected one of {', '.join(allowed)}")
        return self


@dataclass
class TensorProfile:
    name: str
    shape: tuple
    min: float
    max: float
    histogram: np.ndarray = field(default_factory=lambda: np.zeros(BINS))


@dataclass
class Profile:
    path: str
    model: str
    tensors: dict  # name -> TensorProfile


# -- file ---------------------------------------------------------------------------------------

def write_profile(path: str, model: str, samples: int, stats: list[TensorProfile]):
    doc = {"format": FORMAT, "version": 1, "model": os.path.basename(model), "samples": samples,
           "bins": BINS,
           "tensors": [{"name": t.name, "shape": list(t.shape), "min": float(t.min),
                        "max": float(t.max),
                        "histogram": [int(c) for c in np.asarray(t.histogram).tolist()]}
                       for t in stats]}
    text = "# glowpy quantization profile (YAML; written by model-profiler)\n" + \
        json.dumps(doc, separators=(",", ":")) + "\n"
    from glowpy.output import write_dump  # through links and FIFOs, like the compiler's -dump-*
    write_dump("dump-profile", path, text)


# A profile holds a min, a max and BINS counts per float tensor: 64 MiB is some 10^4 tensors;
# anything larger (or a FIFO, a device) is refused before it is read
PROFILE_BYTES = 64 << 20


def read_profile(path: str) -> Profile:
    import stat
    where = f"-load-profile={show(path)}"
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{where}: not a regular file; give the profile model-profiler wrote")
        if st.st_size > PROFILE_BYTES:
            raise UsageError(f"{where}: {st.st_size} bytes, more than a profile can be "
                             f"({PROFILE_BYTES} bytes)")
        with open(path, "rb") as f:
            text = f.read(PROFILE_BYTES + 1)[:PROFILE_BYTES].decode("utf-8")
    except OSError as e:
        raise UsageError(f"{where}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ModelError(f"{where}: not a glowpy quantization profile (not UTF-8 text)") from None
    try:
        body = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
        doc = json.loads(body)
    except (ValueError, RecursionError):  # deep nesting: not a profile either
        try:
            import yaml
            doc = yaml.safe_load(text)
        except Exception:  # noqa: BLE001 - PyYAML missing or not YAML: same message
            doc = None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or \
            not isinstance(doc.get("tensors"), list):
        raise ModelError(f"{where}: not a glowpy quantization profile (write one with "
                         "model-profiler -dump-profile)")
    tensors = {}
    try:
        for t in doc["tensors"]:
            hist = t.get("histogram") or []
            # a flat list of numbers only: YAML aliases can nest a list in itself many times
            # over, which np.asarray would expand
            if not isinstance(hist, list) or not all(isinstance(h, (int, float)) for h in hist):
                raise ValueError(f"{t['name']}: histogram must be a list of numbers")
            tp = TensorProfile(str(t["name"]), tuple(int(d) for d in t["shape"]),
                               float(t["min"]), float(t["max"]), np.asarray(hist, np.float64))
            if not (math.isfinite(tp.min) and math.isfinite(tp.max)) or tp.min > tp.max:
                raise ValueError(tp.name)
            tensors[tp.name] = tp
    except (KeyError, TypeError, ValueError) as e:
        raise ModelError(f"{where}: malformed tensor entry ({show(str(e), 80)})") from None
    return Profile(path, str(doc.get("model", "?")), tensors)


# -- ranges -> parameters ---------------------------------------------------------------------

def choose_params(lo: float, hi: float, schema: str) -> tuple[float, int]:
    """int8 (scale, offset) covering [lo, hi] (always widened to include 0, so that 0 -- padding,
    Relu's floor -- is exact)."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if hi - lo < 1e-30:
        hi = lo + 1e-6
    if schema == "asymmetric":
        scale = (hi - lo) / 255.0
        zp = int(round(-128 - lo / scale))
        return float(np.float32(scale)), max(-128, min(127, zp))
    if schema == "symmetric_with_uint8" and lo >= 0:
        return float(np.float32(hi / 255.0)), -128
    scale = max(-lo, hi) / 127.0
    if schema == "symmetric_with_power2_scale":
        scale = 2.0 ** math.ceil(math.log2(scale))
    return float(np.float32(scale)), 0


def kl_range(hist: np.ndarray, lo: float, hi: float, levels: int = 255) -> tuple[float, float]:
    """The sub-range [lo*f, hi*f] (f <= 1) whose 255-level quantization loses the least
    information: minimal KL divergence between the clipped histogram P (outliers folded into
    the edge bins) and P merged into `levels` bins and spread back (TensorRT's calibration),
    among the windows that clip at most MAX_CLIPPED of the values (with few samples KL alone
    mistakes the sparse tail for noise and clips it away)."""
    hist = np.asarray(hist, np.float64)
    n = hist.size
    if n < 2 * levels or hist.sum() == 0:
        return lo, hi
    edges = np.linspace(lo, hi, n + 1)
    total = hist.sum()
    best, best_f = math.inf, 1.0
    for f in np.linspace(1.0, 0.1, 64):
        a, b = np.searchsorted(edges, lo * f, "right") - 1, np.searchsorted(edges, hi * f, "left")
        a, b = max(a, 0), min(b, n)
        if b - a < levels:
            continue
        if hist[:a].sum() + hist[b:].sum() > MAX_CLIPPED * total:
            break  # narrower windows clip more: never more than 0.1% of the values
        p = hist[a:b].copy()
        p[0] += hist[:a].sum()
        p[-1] += hist[b:].sum()
        chunks = np.array_split(np.arange(b - a), levels)
        q = np.zeros_like(p)
        for c in chunks:
            nz = c[hist[a:b][c] > 0]
            if nz.size:
                q[nz] = hist[a:b][c].sum() / nz.size
        mask = p > 0
        q = np.where(mask & (q == 0), 1e-12, q)
        pn, qn = p / p.sum(), q / max(q.sum(), 1e-30)
        kl = float(np.sum(pn[mask] * np.log(pn[mask] / qn[mask])))
        if kl < best:
            best, best_f = kl, f
    return lo * best_f, hi * best_f


def tensor_params(tp: TensorProfile, opts: QuantOptions) -> tuple[float, int]:
    lo, hi = tp.min, tp.max
    # KL needs a distribution: a tensor seen as a few hundred values (pooled features, logits)
    # gives a histogram of isolated spikes, and KL would clip it to ruin; those keep min/max
    if opts.calibration == "KL" and tp.histogram.sum() >= KL_MIN_VALUES:
        lo, hi = kl_range(tp.histogram, tp.min, tp.max)
    return choose_params(lo, hi, opts.schema)


def quantize_weights(w: np.ndarray, axis: int | None, opts: QuantOptions):
    """Symmetric int8 weights (zero point 0, range [-127, 127]) per tensor, or per channel
    along `axis` with -enable-channelwise: (int8 array, float32 scales)."""
    w = np.asarray(w, np.float64)
    if axis is None or not opts.channelwise:
        amax = np.array([np.abs(w).max(initial=0.0)])
        shape = (1,) * w.ndim
    else:
        moved = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
        amax = np.abs(moved).max(axis=1, initial=0.0)
        shape = [1] * w.ndim
        shape[axis] = w.shape[axis]
    amax = np.where(amax > 0, amax, 1e-8)
    scale = amax / 127.0
    if opts.schema == "symmetric_with_power2_scale":
        scale = 2.0 ** np.ceil(np.log2(scale))
    scale = scale.astype(np.float32)
    q = np.clip(np.rint(w / scale.astype(np.float64).reshape(shape)), -127, 127).astype(np.int8)
    return q, (scale if axis is not None and opts.channelwise else scale.reshape(()))


def quantize_bias(b: np.ndarray, acc_scales: np.ndarray, opts: QuantOptions):
    """Bias on the accumulator grid (int32, scale x_s * w_s) or, -quantization-precision-bias=
    Int8, int8 with a symmetric scale of its own: (array, scales)."""
    b = np.asarray(b, np.float64).reshape(-1)
    if opts.precision_bias == "Int8":
        s = np.float32(max(np.abs(b).max(initial=0.0), 1e-8) / 127.0)
        return np.clip(np.rint(b / s), -127, 127).astype(np.int8), np.full(b.shape, s, np.float32)
    scales = np.broadcast_to(np.asarray(acc_scales, np.float32), b.shape).astype(np.float32)
    q = np.clip(np.rint(b / scales.astype(np.float64)), -2 ** 31, 2 ** 31 - 1).astype(np.int32)
    return q, scales
