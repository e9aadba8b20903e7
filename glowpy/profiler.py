"""`model-profiler`: runs the float model on sample inputs and records, for every float tensor, its
minimum, maximum and a histogram -- the profile `model-compiler -load-profile` quantizes with
(Glow's profiling flow):

    model-profiler -model=m.onnx -input-dataset=input,npy,samples/ -dump-profile=profile.yaml
    model-compiler -model=m.onnx -load-profile=profile.yaml -emit-bundle=out/

-input-dataset=NAME,FORMAT,PATH (repeatable, one per model input): FORMAT is npy (numpy .npy),
rawbin (the raw little-endian elements of the input's type) or rawtxt (numbers separated by
whitespace or commas); PATH is one file (one sample) or a directory whose files, in name order,
are one sample each. The model runs with glowpy's numpy op references on the graph exactly as
the compiler has it where it quantizes (ir/passes/quant/profile.py), so the tensor names of
the profile are the ones the compiler looks up."""
from __future__ import annotations

import os
import re
import sys
from typing import List, Optional

import numpy as np
import typer

from glowpy.errors import ModelError, UsageError, show
from glowpy.ir import qschema

FORMATS = ("npy", "rawbin", "rawtxt")

app = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["--help", "-h"]})


def parse_dataset(text: str) -> tuple[str, str, str]:
    m = re.match(r"^(.+?),([A-Za-z]+),(.+)$", text)
    if not m or m.group(2) not in FORMATS:
        raise UsageError(f"-input-dataset={text}: expected NAME,FORMAT,PATH with FORMAT one of "
                         f"{', '.join(FORMATS)}")
    return m.group(1), m.group(2), m.group(3)


def read_samples(name: str, fmt: str, path: str, dtype, shape) -> list[np.ndarray]:
    where = f"-input-dataset={name},{fmt},{show(path)}"
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path)
                       if os.path.isfile(os.path.join(path, f)))
    elif os.path.isfile(path):
        files = [path]
    else:
        raise UsageError(f"{where}: no such file or directory")
    if not files:
        raise UsageError(f"{where}: the directory holds no sample files")
    out = []
    size = int(np.prod(shape))
    need = size * np.dtype(dtype).itemsize
    # a sample's file, whatever its format, is a bounded multiple of the input's size (a .npy
    # header, ~25 characters per number in text): a larger one is refused before it is read
    most = {"npy": need + 65536, "rawbin": need, "rawtxt": 32 * size + 4096}[fmt]
    for f in files:
        got = os.path.getsize(f)
        if got > most:
            raise UsageError(f"{where}: '{show(f)}' is {got} bytes; a {fmt} sample of input "
                             f"'{show(name)}' {np.dtype(dtype).name}{list(shape)} is at most "
                             f"{most}")
        try:
            if fmt == "npy":
                a = np.load(f, allow_pickle=False)
            elif fmt == "rawbin":
                a = np.fromfile(f, dtype=np.dtype(dtype).newbyteorder("<"))
            else:
                with open(f, encoding="utf-8") as fh:
                    a = np.array([float(t) for t in re.split(r"[\s,]+", fh.read()) if t], dtype)
        except (OSError, ValueError) as e:
            raise UsageError(f"{where}: cannot read '{show(f)}' as {fmt}: {show(str(e), 100)}") \
                from None
        if a.dtype.kind not in "biuf":  # strings, complex, records: no sample values
            raise UsageError(f"{where}: '{show(f)}' holds {a.dtype} values; input '{show(name)}' "
                             f"is {np.dtype(dtype).name}")
        if a.size != size:
            raise UsageError(f"{where}: '{show(f)}' holds {a.size} values; input '{show(name)}' "
                             f"{list(shape)} needs {size}")
        if np.dtype(dtype).kind in "iu" and a.size and (
                not np.all(np.isfinite(a)) or np.any(a != np.round(a)) or
                a.min() < np.iinfo(dtype).min or a.max() > np.iinfo(dtype).max):
            info = np.iinfo(dtype)
            raise UsageError(f"{where}: '{show(f)}' holds values that are not integers from "
                             f"{info.min} to {info.max}; input '{show(name)}' is "
                             f"{np.dtype(dtype).name}")
        with np.errstate(over="ignore"):
            out.append(np.asarray(a, dtype).reshape(shape))
    return out


class _Stat:
    def __init__(self, name, shape):
        self.name, self.shape = name, shape
        self.lo, self.hi = np.inf, -np.inf
        self.hist = np.zeros(qschema.BINS)

    def add(self, a: np.ndarray):
        a = np.asarray(a, np.float64)
        a = a[np.isfinite(a)]
        if not a.size:
            return
        lo, hi = min(self.lo, float(a.min())), max(self.hi, float(a.max()))
        if (lo, hi) != (self.lo, self.hi) and np.isfinite(self.lo) and self.hist.any():
            # re-bin what was counted so far into the wider range (bin centres)
            old = np.linspace(self.lo, self.hi, qschema.BINS + 1)
            centres = (old[:-1] + old[1:]) / 2
            idx = _bin(centres, lo, hi)
            hist = np.zeros(qschema.BINS)
            np.add.at(hist, idx, self.hist)
            self.hist = hist
        self.lo, self.hi = lo, hi
        np.add.at(self.hist, _bin(a, lo, hi), 1)

    def profile(self) -> qschema.TensorProfile:
        lo, hi = (self.lo, self.hi) if np.isfinite(self.lo) else (0.0, 0.0)
        return qschema.TensorProfile(self.name, self.shape, lo, hi, self.hist)


def _bin(a, lo, hi):
    if hi <= lo:
        return np.zeros(np.shape(a), np.int64)
    return np.clip(((a - lo) / (hi - lo) * qschema.BINS).astype(np.int64), 0, qschema.BINS - 1)


def profiling_graph(models, opts):
    """The graph as the compiler has it where -load-profile quantizes."""
    from glowpy.compiler import load_graph
    from glowpy.ir.passes.pipeline import PIPELINE, optimize
    from glowpy.ir.passes.quant.profile import quantize_from_profile
    graph = load_graph(list(models), opts)
    return optimize(graph, passes=set(PIPELINE[:PIPELINE.index(quantize_from_profile)]))


def profile_model(models, datasets: list[str], out_path: str, opts=None) -> list:
    """Runs the float model on every sample of `datasets` (-input-dataset strings) and writes
    the profile to out_path; returns the TensorProfile list."""
    from glowpy.compiler import Options
    opts = opts or Options()
    models = [models] if isinstance(models, (str, os.PathLike)) else list(models)
    graph = profiling_graph([os.fspath(m) for m in models], opts)
    given = {}
    for text in datasets:
        name, fmt, path = parse_dataset(text)
        if name in given:
            raise UsageError(f"-input-dataset: input '{show(name)}' is given twice")
        given[name] = (fmt, path)
    names = [v.name for v in graph.inputs]
    missing = [n for n in names if n not in given]
    extra = [n for n in given if n not in names]
    if missing or extra:
        raise UsageError(f"-input-dataset must name each model input once (inputs: "
                         f"{', '.join(show(n) for n in names)}); "
                         + (f"missing {', '.join(show(n) for n in missing)}" if missing else
                            f"the model has no input {', '.join(show(n) for n in extra)}"))
    samples = {v: read_samples(v.name, *given[v.name], v.dtype, v.shape) for v in graph.inputs}
    return profile_samples(graph, samples, out_path, models[0])


def profile_samples(graph, samples: dict, out_path: str, model_path: str) -> list:
    """Runs `graph` (profiling_graph) on samples {input Value: [arrays]} with the op references,
    records every float tensor's range and histogram and writes the profile to out_path
    (model-profiler's datasets, image-classifier's images)."""
    from glowpy.ir import epilogue
    counts = {len(s) for s in samples.values()}
    if len(counts) != 1:
        raise UsageError("-input-dataset: the inputs have different numbers of samples "
                         f"({', '.join(f'{v.name}: {len(s)}' for v, s in samples.items())})")
    stats: dict = {}

    def record(v, a):
        if v.dtype == np.float32:
            stats.setdefault(v, _Stat(v.name, v.shape)).add(a)

    n_samples = counts.pop()
    for i in range(n_samples):
        env = {v: s[i] for v, s in samples.items()}
        for v in graph.inputs:
            record(v, env[v])
        for n in graph.nodes:
            ins = [None if v is None else (v.const if v.is_const else env[v]) for v in n.inputs]
            for o, a in zip(n.outputs, epilogue.reference(n, *ins)):
                env[o] = np.asarray(a).astype(o.dtype, copy=False).reshape(o.shape)
                record(o, env[o])
    result = [s.profile() for s in stats.values()]
    qschema.write_profile(out_path, model_path, n_samples, result)
    return result


@app.command(help="Run a float model on sample inputs and record every tensor's range and "
                  "histogram for model-compiler -load-profile.")
def model_profiler(
    model: Optional[List[str]] = typer.Option(None, "--model", help="Model file (.onnx)."),
    input_dataset: Optional[List[str]] = typer.Option(None, "--input-dataset", help="NAME,FORMAT,PATH: samples of input NAME; FORMAT npy, rawbin or rawtxt; PATH a file or a directory of files, one per sample (repeatable)."),
    dump_profile: Optional[str] = typer.Option(None, "--dump-profile", help="Output profile file (YAML)."),
    model_input: Optional[List[str]] = typer.Option(None, "--model-input", help="Input type and shape: name,type,[d0,d1,...] (repeatable)."),
    onnx_define_symbol: Optional[List[str]] = typer.Option(None, "--onnx-define-symbol", help="Fix a symbolic dimension: name,value (repeatable)."),
    verbose: bool = typer.Option(False, "--verbose", help="Print progress; show internals on errors."),
):
    from glowpy.cli import parse_model_input, parse_symbols
    from glowpy.compiler import Options
    if not model:
        raise UsageError("-model is required (the float model to profile)")
    if not input_dataset:
        raise UsageError("-input-dataset is required (NAME,FORMAT,PATH of the sample inputs)")
    if not dump_profile:
        raise UsageError("-dump-profile is required (the profile file to write)")
    opts = Options(model_inputs=[parse_model_input(t) for t in model_input or []],
                   symbols=parse_symbols(onnx_define_symbol))
    stats = profile_model(model, input_dataset, dump_profile, opts)
    if verbose:
        print(f"model-profiler: wrote {len(stats)} tensor ranges to {dump_profile}",
              file=sys.stderr)


def main():
    from glowpy.cli import exit_main
    exit_main("model-profiler", app)


__all__ = ["profile_model", "main", "ModelError"]
