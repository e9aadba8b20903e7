"""The compile driver: model file(s) -> graph -> passes -> lowering -> plan -> LLVM -> bundle.

A bundle is written into a fresh temporary directory beside the destination and its files are
moved into place only when every one of them is complete, so a failed compile leaves nothing
and never touches files glowpy did not write."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field

from glowpy.codegen import bundle as bw
from glowpy.codegen.names import unique_legal_names, legalize
from glowpy.errors import ModelError, UsageError
from glowpy.ir.lower import lower
from glowpy.ir.passes.pipeline import optimize
from glowpy.ir.planner import ALIGN, plan
from glowpy.version import __version__

BUNDLE_SUFFIXES = (".o", ".h", ".weights.bin", ".weights.txt", ".json")


@dataclass
class Options:
    network_name: str | None = None
    main_entry_name: str | None = None
    bundle_api: str = "static"
    backend: str = "CPU"
    target: str | None = None
    mcpu: str | None = None
    march: str | None = None
    mattr: str | None = None
    float_abi: str | None = None
    relocation_model: str = "static"
    code_model: str = "small"
    model_inputs: list = field(default_factory=list)  # InputSpec
    symbols: dict = field(default_factory=dict)
    opt_level: int = 1  # graph optimizations (0 = only what lowering needs)
    llvm_opt: int = 3
    reuse_activation_memory: bool = True
    dump_graph_dag: str | None = None
    dump_graph_dag_before_compile: str | None = None
    dump_llvm_ir: str | None = None
    verbose: bool = False

    def recorded(self) -> dict:
        """What the manifest records of how the bundle was built."""
        return {"bundle_api": self.bundle_api, "backend": self.backend,
                "opt_level": self.opt_level, "llvm_opt": self.llvm_opt,
                "reuse_activation_memory": self.reuse_activation_memory,
                "model_inputs": [f"{s.name},{s.dtype.name},{list(s.shape)}" for s in self.model_inputs],
                "symbols": dict(self.symbols)}


@dataclass
class BundleInfo:
    """What compile() wrote."""
    directory: str
    name: str
    entry: str
    files: dict  # suffix -> path
    manifest: dict

    @property
    def inputs(self):
        return self.manifest["inputs"]

    @property
    def outputs(self):
        return self.manifest["outputs"]

    @property
    def memory(self):
        return self.manifest["memory"]


def _warn(msg):
    print(f"model-compiler: warning: {msg}", file=sys.stderr)


def load_graph(models: list[str], opts: Options):
    from glowpy.frontend.onnx import LoadOptions, load_onnx
    lo = LoadOptions({s.name: s for s in opts.model_inputs}, dict(opts.symbols))
    paths = list(models)
    if len(paths) == 1 and paths[0].endswith(".onnx"):
        return load_onnx(paths[0], lo, _warn)
    if len(paths) == 1 and not os.path.isdir(paths[0]) and not paths[0].endswith((".pb", ".pbtxt")):
        return load_onnx(paths[0], lo, _warn)
    try:
        from glowpy.frontend.caffe2 import load_caffe2
    except ImportError:
        raise ModelError(f"'{paths[0]}': Caffe2 models are not supported by this build") from None
    return load_caffe2(paths, lo, _warn)


def _placeholders(prog):
    symbols = unique_legal_names([b.name for b in prog.placeholders])
    return [bw.Placeholder(b.name, sym, b.dtype, b.shape, b.offset,
                           "input" if b in prog.inputs else "output",
                           b.value.qparams if b.value is not None else None)
            for b, sym in zip(prog.placeholders, symbols)]


def compile_model(models, output_dir: str, opts: Options | None = None) -> BundleInfo:
    from glowpy.codegen.module import add_bundle_config, build_module, compile_module
    from glowpy.codegen.target import TargetError, resolve_target
    from glowpy.ir.dot import to_dot

    opts = opts or Options()
    models = [models] if isinstance(models, (str, os.PathLike)) else [os.fspath(m) for m in models]
    models = [os.fspath(m) for m in models]
    if opts.backend != "CPU":
        raise UsageError(f"-backend={opts.backend} is not available; the only backend is CPU")
    if opts.bundle_api not in ("static", "dynamic"):
        raise UsageError(f"-bundle-api={opts.bundle_api}: expected static or dynamic")
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise UsageError(f"-emit-bundle={output_dir}: exists and is not a directory")
    try:
        target = resolve_target(opts.target, opts.mcpu, opts.march, opts.mattr, opts.float_abi,
                                opts.relocation_model, opts.code_model)
    except TargetError as e:
        raise UsageError(str(e)) from None

    graph = load_graph(models, opts)
    name = opts.network_name or os.path.splitext(os.path.basename(models[0].rstrip("/")))[0]
    if opts.dump_graph_dag_before_compile:
        _write_text(opts.dump_graph_dag_before_compile, to_dot(graph))
    graph = optimize(graph, opts.opt_level)
    if opts.dump_graph_dag:
        _write_text(opts.dump_graph_dag, to_dot(graph))
    _check_dtypes(graph)
    prog = plan(lower(graph), reuse=opts.reuse_activation_memory)
    placeholders = _placeholders(prog)
    entry = legalize(opts.main_entry_name or name)
    mod = build_module(prog, target, entry)
    if opts.bundle_api == "dynamic":
        add_bundle_config(mod, f"{legalize(name)}_config", prog.sizes, ALIGN,
                          [(p.symbol, p.offset, p.elements, 1) for p in placeholders])
    if opts.dump_llvm_ir:
        _write_text(opts.dump_llvm_ir, str(mod))
    obj = compile_module(mod, target, opts.llvm_opt)
    image = bw.weights_image(prog)
    man = bw.manifest(name, entry, opts.bundle_api, prog, placeholders, target, opts.recorded(),
                      __version__)
    files = {".o": obj, ".h": bw.header_text(name, entry, opts.bundle_api, prog, placeholders,
                                             __version__),
             ".weights.bin": image, ".weights.txt": bw.weights_text(image),
             ".json": bw.manifest_json(man)}
    paths = _publish(output_dir, name, files)
    return BundleInfo(output_dir, name, entry, paths, man)


def _check_dtypes(graph):
    from glowpy.codegen.kernels import has_emitter
    from glowpy.ir.dtypes import SUPPORTED
    for n in graph.nodes:
        for v in list(n.outputs) + [v for v in n.inputs if v is not None and not v.is_const]:
            if v.dtype not in SUPPORTED:
                raise ModelError(f"node '{n.name}' ({n.op}): tensor '{v.name}' has type "
                                 f"{v.dtype.name}, which bundles do not support")
        if "view" not in n.opdef.traits and not has_emitter(n.op):
            raise ModelError(f"node '{n.name}' ({n.op}): no kernel for this op")


def _write_text(path: str, text: str):
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as e:
        raise UsageError(f"cannot write '{path}': {e.strerror}") from None


def _publish(output_dir: str, name: str, files: dict) -> dict:
    """Writes all files to a temporary directory, then moves them into output_dir."""
    try:
        os.makedirs(output_dir, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot create output directory '{output_dir}': {e.strerror}") from None
    for suffix in files:
        dest = os.path.join(output_dir, name + suffix)
        if os.path.isdir(dest):
            raise UsageError(f"cannot write '{dest}': it is a directory")
    tmp = tempfile.mkdtemp(prefix=".glowpy-", dir=output_dir)
    try:
        bw.write_bundle(tmp, name, files)
        paths = {}
        for suffix in files:
            dest = os.path.join(output_dir, name + suffix)
            os.replace(os.path.join(tmp, name + suffix), dest)
            paths[suffix] = dest
        return paths
    except OSError as e:
        raise UsageError(f"cannot write the bundle into '{output_dir}': {e.strerror}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
