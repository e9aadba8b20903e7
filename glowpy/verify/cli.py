"""`model-verify`: compiles a model, runs the bundle on inputs (in this process for the host,
under QEMU for Arm) and compares every observable intermediate tensor with onnxruntime, layer
by layer:

    model-verify -model=kws_int8_qdq.onnx -target=arm -mcpu=cortex-m7
    model-verify -model=mnist8.onnx -test-data=mnist8_data -json=layers.json

Which tensors, and the trade-off: the verify bundle is the model compiled with extra outputs,
the ONNX tensors that survive glowpy's graph optimizations under their own names (a fused
Conv+Relu's output, an integer QConv's int8 output; observe.py). Tensors fused away inside a
kernel are not observed, so the bundle keeps the deployment bundle's kernels and fusion: the
table is about the code that ships, at the granularity of glowpy's kernels rather than of ONNX
nodes. What differs: observed tensors live in the mutable region instead of the activation
region, so the memory plan (and in-place reuse) is not the deployment one. Observing every ONNX
node output instead would split fused kernels and verify code that never ships.

Options: -model, -input=NAME,FILE (.npy or ONNX TensorProto .pb; repeatable, one input set),
-test-data=DIR (test_data_set_*/input_K.pb, as ../shared/models ship), else -num-inputs seeded
random sets (-seed); -rtol/-atol (float: max abs error <= rtol*max|ref| + atol), -lsb (int8);
-json=FILE; -keep=DIR writes the verify bundle there, -bundle=DIR verifies a prebuilt one
(e.g. a -keep directory whose weights.bin was edited). Every other option is model-compiler's
(-target, -mcpu, -float-abi, -model-input, -onnx-define-symbol, -load-profile, ...), parsed
and validated by model-compiler itself. Exit status: 0 when every model output is within
tolerance, 1 when one is not (or on a model error), 2 on a usage error."""
from __future__ import annotations

import contextlib
import dataclasses
import glob
import io
import os
import re
import shutil
import sys
import tempfile
from collections import Counter
from typing import List, Optional

import numpy as np
import typer

from glowpy.errors import ModelError, UsageError, show
from glowpy.verify import compare, observe
from glowpy.verify.execute import Runner, runner_for

PROG = "model-verify"
app = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["--help", "-h"]})


def _warn(msg: str) -> None:
    from glowpy.errors import one_line
    print(f"{PROG}: warning: {one_line(msg)}", file=sys.stderr)


def _load_array(path: str, what: str) -> np.ndarray:
    try:
        if path.endswith(".pb"):
            import onnx
            return onnx.numpy_helper.to_array(onnx.load_tensor(path))
        return np.load(path, allow_pickle=False)
    except Exception as e:  # noqa: BLE001 - unreadable file: one line
        raise UsageError(f"{what}: cannot read '{show(path)}': {show(str(e), 200)}") from None


def _fit(graph_inputs, arrays: dict, what: str) -> dict:
    out = {}
    for v in graph_inputs:
        if v.name not in arrays:
            raise UsageError(f"{what}: no data for input '{show(v.name)}' (give "
                             f"-input={show(v.name)},FILE)")
        a = arrays[v.name]
        if a.size != v.size:
            raise UsageError(f"{what}: input '{show(v.name)}' has {a.size} values, the model "
                             f"needs {list(v.shape)} ({v.size})")
        out[v.name] = np.ascontiguousarray(a.reshape(v.shape).astype(v.dtype))
    return out


def input_sets(graph, model, inputs, test_data, num, seed) -> tuple[list[dict], str]:
    """[feeds] and where they came from."""
    names = [v.name for v in graph.inputs]
    if inputs and test_data:
        raise UsageError("-input and -test-data are alternatives; give one of them")
    if inputs:
        arrays = {}
        for text in inputs:
            m = re.match(r"^(.*),([^,]+)$", text)
            name, path = (m.group(1), m.group(2)) if m else (names[0] if len(names) == 1
                                                             else None, text)
            if name not in names:
                raise UsageError(f"-input={show(text)}: expected NAME,FILE with NAME one of "
                                 f"{', '.join(map(show, names))}")
            arrays[name] = _load_array(path, f"-input={show(text)}")
        return [_fit(graph.inputs, arrays, "-input")], "given"
    if test_data:
        dirs = sorted(glob.glob(os.path.join(test_data, "test_data_set_*"))) or [test_data]
        sets = []
        for d in dirs[:num]:
            files = sorted(glob.glob(os.path.join(d, "input_*.pb")),
                           key=lambda p: int(re.findall(r"\d+", os.path.basename(p))[0]))
            if len(files) != len(names):
                raise UsageError(f"-test-data={show(test_data)}: '{show(d)}' has {len(files)} "
                                 f"input_K.pb files, the model {len(names)} inputs")
            arrays = {n: _load_array(f, "-test-data") for n, f in zip(names, files)}
            sets.append(_fit(graph.inputs, arrays, f"-test-data={show(d)}"))
        return sets, f"test data {show(test_data)}"
    return [observe.random_inputs(graph, model, seed + k) for k in range(num)], \
        f"random, seed {seed}"


def _prebuilt(directory: str, outputs: set) -> tuple[str, dict]:
    """-bundle: (name, manifest) of the bundle in `directory`. A file that fails bundle-info's
    integrity check is a warning: a bundle edited since compiling is what -bundle is for."""
    from glowpy.bundle_info import check_integrity, find_bundle, load_manifest
    name = find_bundle(directory, None)
    manifest = load_manifest(directory, name)
    if not outputs <= {p["name"] for p in manifest["outputs"]}:
        raise UsageError(f"-bundle={show(directory)}: the bundle lacks the model's outputs; "
                         "is it this model's?")
    try:
        check_integrity(directory, name, manifest)
    except ModelError as e:
        _warn(f"-bundle: {e}")
    return name, manifest


def verify(model_path, compile_args, inputs, test_data, num_inputs, seed, tol, json_path,
           bundle_dir, keep, report_path=None) -> int:
    import onnx

    from glowpy.cli import compile_options
    from glowpy.compiler import compile_model
    if any(re.match(r"^--?emit-bundle\b", a) for a in compile_args):
        raise UsageError("-emit-bundle: model-verify writes no deployment bundle; -keep=DIR "
                         "keeps the verify bundle")
    if not model_path.endswith(".onnx") or not os.path.isfile(model_path):
        raise UsageError(f"-model={show(model_path)}: expected an existing .onnx file")
    if bundle_dir and keep:
        raise UsageError("-bundle and -keep are alternatives: -keep writes a bundle, -bundle "
                         "verifies one")
    opts = compile_options(model_path, compile_args)
    if report_path:
        from glowpy.report import require
        require()
    if not bundle_dir:  # refuse a target it cannot run before compiling for it
        from glowpy.codegen.target import TargetError, resolve_target
        try:
            runner_for(resolve_target(opts.target, opts.mcpu, opts.march, opts.mattr,
                                      opts.float_abi, opts.relocation_model,
                                      opts.code_model).describe())
        except TargetError as e:
            raise UsageError(str(e)) from None
    # with a profile, the layers are the float graph's: glowpy's quantized graph keeps fusion
    # but names its int8 tensors after the inserted QuantizeLinear nodes
    with contextlib.redirect_stderr(io.StringIO()) as load_warnings:
        graph = observe.optimized_graph(model_path, dataclasses.replace(opts, load_profile=None))
    # the compile below prints the loader's warnings again: only a prebuilt bundle shows these
    if bundle_dir:
        sys.stderr.write(load_warnings.getvalue())
    model = onnx.load(model_path)  # glowpy's loader read it: no protobuf or file errors here
    layers = observe.observable_layers(model, graph)
    outputs = {v.name for v in graph.outputs}
    work = tempfile.mkdtemp(prefix="model-verify-")
    try:
        if bundle_dir:
            name, manifest = _prebuilt(bundle_dir, outputs)
            layers = [L for L in layers if L.tensor in {p["name"] for p in manifest["outputs"]}]
            directory = bundle_dir
        aug_path = os.path.join(work, os.path.splitext(os.path.basename(model_path))[0] + ".onnx")
        onnx.save(observe.with_outputs(model, [L.tensor for L in layers],
                                       {L.tensor: L.dtype for L in layers}), aug_path)
        kernels = "prebuilt bundle"
        if not bundle_dir:
            info = compile_model(aug_path, keep or os.path.join(work, "bundle"),
                                 dataclasses.replace(opts, report_profile=None) if report_path
                                 else opts)  # the profile is the deployment bundle's
            directory, name, manifest = info.directory, info.name, info.manifest
            # the claim of the design, checked: observing changed no kernel and no fusion
            deploy = observe.kernel_labels(model_path, opts)
            mine = observe.kernel_labels(aug_path, opts)
            kernels = f"{len(mine)} kernels, the deployment bundle's"
            if deploy != mine:
                kernels = (f"{len(mine)} kernels, the deployment bundle has {len(deploy)}: "
                           "observing changed the fusion")
                extra, lost = Counter(mine) - Counter(deploy), Counter(deploy) - Counter(mine)
                _warn(f"the verify bundle's kernels differ from the deployment bundle's: "
                      f"{', '.join(extra.elements()) or 'none'} instead of "
                      f"{', '.join(lost.elements()) or 'none'}")
        for i, L in enumerate(layers):
            L.index = i
        runner = Runner(directory, name, manifest, work)
        sets, origin = input_sets(graph, model, inputs, test_data, num_inputs, seed)
        refs = observe.References(model, layers, aug_path, opts)
        rows = [compare.Row(L, is_output=L.tensor in outputs) for L in layers]
        for feeds in sets:
            got = runner.run(feeds)
            ref, fref = refs(feeds)
            for r in rows:
                t = r.layer.tensor
                compare.measure(r, got[t], ref[t], tol, fref.get(r.layer.float_tensor))
        if report_path:  # the deployment bundle's page (its memory plan, not the verify one's)
            report = compile_model(model_path, os.path.join(work, "deploy"), dataclasses.replace(
                opts, collect_report=True, progress=False)).report
    finally:
        shutil.rmtree(work, ignore_errors=True)

    t = manifest["target"]
    print(f"{PROG}: {show(name)} for {t['triple']} (-mcpu={t['cpu']}) run {runner.where}, "
          f"{len(sets)} input set{'s' * (len(sets) != 1)} ({origin}), {len(rows)} layers "
          f"observed ({kernels}); tolerance: float {tol.rtol:g}*max|ref| + {tol.atol:g}, int8 {tol.lsb} LSB")
    print(f"reference: {refs.kind}" + (f"; float: {refs.float_kind}" if refs.float_kind else ""))
    for line in compare.table(rows, refs.float_kind is not None):
        print(line)
    first = compare.first_failure(rows)
    print(compare.failure_line(first) if first else "every layer is within tolerance")
    bad = [r for r in rows if r.is_output and not r.ok]
    n_out = sum(r.is_output for r in rows)
    print(f"outputs: {n_out - len(bad)} of {n_out} within tolerance" +
          (f"; beyond: {', '.join(show(r.layer.tensor) for r in bad)}" if bad else ""))
    if report_path:
        from glowpy import report as page
        from glowpy.report import collect
        report["data"].update(source=PROG, verify=collect.verify_section(
            rows, {"run": runner.where, "reference": refs.kind}))
        page.write(report_path, report["data"], report["graph"])
    if json_path:
        header = {"model": model_path, "bundle": name, "target": t, "run": runner.where,
                  "input_sets": len(sets), "inputs": origin, "kernels": kernels,
                  "reference": refs.kind,
                  "float_reference": refs.float_kind,
                  "tolerance": {"rtol": tol.rtol, "atol": tol.atol, "lsb": tol.lsb},
                  "outputs_ok": not bad}
        try:
            with open(json_path, "w") as f:
                f.write(compare.to_json(rows, header))
        except OSError as e:
            raise UsageError(f"-json={show(json_path)}: {e.strerror}") from None
    return 1 if bad else 0


@app.command(help="Compile a model with its intermediate tensors as extra outputs, run it on "
             "the host (in process) or on Arm (under QEMU) and compare every layer with "
             "onnxruntime: max abs/rel error, ULP (float) or LSB (int8) distance, SNR; for int8 "
             "models also against the float model (quantization error). Exit status 0 when "
             "every model output is within tolerance, 1 when one is not, 2 on usage errors. "
             "Trade-off: only the tensors that survive glowpy's fusion under their ONNX names "
             "are observed, so the verify bundle runs the deployment bundle's kernels and "
             "fusion (observing every ONNX node output would split fused kernels); its memory "
             "plan differs (observed tensors are outputs). Options not listed here are "
             "model-compiler's (-target, -mcpu, -float-abi, -model-input, "
             "-onnx-define-symbol, -load-profile, ...).",
             context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def model_verify(
    ctx: typer.Context,
    model: Optional[str] = typer.Option(None, "--model", help="The ONNX model."),
    input: Optional[List[str]] = typer.Option(None, "--input", help="NAME,FILE: an input's "
                                              "data (.npy or ONNX .pb), one per input."),
    test_data: Optional[str] = typer.Option(None, "--test-data", help="A directory of "
                                            "test_data_set_*/input_K.pb (or one such set)."),
    num_inputs: Optional[int] = typer.Option(None, "--num-inputs", help="Random input sets "
                                             "(default 1), or at most this many -test-data "
                                             "sets (default all)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random inputs."),
    rtol: float = typer.Option(1e-3, "--rtol", help="Float tolerance: rtol*max|ref| + atol."),
    atol: float = typer.Option(1e-4, "--atol", help="Float tolerance: rtol*max|ref| + atol."),
    lsb: int = typer.Option(1, "--lsb", help="int8 tolerance in LSB."),
    json_path: Optional[str] = typer.Option(None, "--json", help="Write the table as JSON."),
    dump_report: Optional[str] = typer.Option(None, "--dump-report", help="Write the "
                                              "deployment bundle's HTML report with the "
                                              "per-layer error chart (needs matplotlib)."),
    bundle: Optional[str] = typer.Option(None, "--bundle", help="Verify this prebuilt bundle "
                                         "directory (e.g. one written by -keep) instead of "
                                         "compiling."),
    keep: Optional[str] = typer.Option(None, "--keep", help="Write the verify bundle into "
                                       "this directory."),
):
    if not model:
        raise UsageError("-model is required (the ONNX model to verify)")
    if rtol < 0 or atol < 0 or lsb < 0 or (num_inputs is not None and num_inputs < 1):
        raise UsageError("-rtol, -atol and -lsb must be >= 0, -num-inputs >= 1")
    n = num_inputs if num_inputs is not None else 10 ** 9 if test_data else 1
    rc = verify(model, list(ctx.args), input, test_data, n, seed,
                compare.Tolerance(rtol, atol, lsb), json_path, bundle, keep, dump_report)
    raise typer.Exit(rc)


def main():
    from glowpy.cli import exit_main
    exit_main(PROG, app)
