"""The compile driver: model file(s) -> graph -> passes -> lowering -> plan -> LLVM -> bundle.

A bundle is written into a fresh temporary directory inside the destination and its files are
moved into place only when every one of them is complete (a failed move puts the previous files
back), so a failed compile leaves nothing behind. Files glowpy did not write are never touched:
an existing NAME.* file is only replaced when NAME.json says glowpy wrote that bundle."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from glowpy.codegen import bundle as bw
from glowpy.codegen.names import (RESERVED_SYMBOLS, c_name_problem, file_stem_problem, legalize,
                                  reserved_form, symbol_problem, unique_legal_names)
from glowpy.errors import ModelError, UsageError, one_line, show
from glowpy.ir.passes.pipeline import optimize
from glowpy.ir.planner import build as build_program
from glowpy.ir.program import ALIGN
from glowpy.ir.validate import check_regions, resolve_limit
from glowpy.output import precheck, publish, write_dump
from glowpy.version import __version__

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
    model_outputs: list = field(default_factory=list)  # -model-outputs: tensor names (onnx_cut)
    cut_inputs: list = field(default_factory=list)  # -model-inputs: tensor names (onnx_cut)
    symbols: dict = field(default_factory=dict)
    opt_level: int = 1  # graph optimizations (0 = only what lowering needs)
    llvm_opt: int = 3
    reuse_activation_memory: bool = True
    # auto: the target decides (TargetCaps.memory_first: microcontrollers minimize bytes, hosts
    # time); min: the smallest plan, slower in-place kernels included; fast: none of those
    activation_memory: str = "auto"
    # patch-based execution of the first stage (ir/patch): the RAM budget to meet (bytes), and
    # the compute overhead allowed (percent of the model's MACs; None: 10 with
    # -activation-memory=min, else off; 0: off)
    max_activations: int | None = None
    patch_overhead: float | None = None
    winograd: bool = True  # Winograd convolutions where the target's vectors repay them (more RAM)
    # integer convolutions on the float kernels, exactly (ir/passes/quant/float_exact.py):
    # auto (where time comes first on vector targets), float, integer
    quantized_convolutions: str = "auto"
    # op -> variant name, (name, params) or "!name" (codegen/registry.py forcing; CLI
    # -kernel-variant=Op:name): kernel experiments and tests that reach every variant
    kernel_variants: dict = field(default_factory=dict)
    dump_graph_dag: str | None = None
    dump_graph_dag_before_compile: str | None = None
    dump_llvm_ir: str | None = None
    dump_memory_report: str | None = None  # JSON: every activation buffer, the peak (report.py)
    dump_report: str | None = None  # HTML: the bundle's report page (glowpy/report)
    report_profile: str | None = None  # a bundle-profile -json profile shown in the report
    collect_report: bool = False  # BundleInfo.report without writing it (model-verify adds to it)
    verbose: bool = False  # stage timings on stderr (progress.py)
    progress: bool = True  # the status line on a terminal stderr (progress.py)
    # -instrument-debug / -instrument-profile (codegen/instrument.py); off: today's bundle
    instrument_debug: bool = False
    instrument_profile: bool = False
    instrument_profile_counter: str = "auto"  # auto | cycles | dwt | callback
    max_region_size: int | None = None  # bytes; None: the target's default (validate.py)
    # int8 (ir/qschema.py, ir/passes/quant/profile.py): -load-profile and Glow's options
    load_profile: str | None = None
    quantization_schema: str = "asymmetric"
    quantization_precision_bias: str = "Int32"
    enable_channelwise: bool = False
    keep_original_precision_for_nodes: tuple = ()
    quantization_calibration: str = "none"
    quantization_rounding: str = "even"  # requantization ties: even (ONNX) or away (TFLite)

    def recorded(self) -> dict:
        """What the manifest records of how the bundle was built."""
        rec = {"bundle_api": self.bundle_api, "backend": self.backend,
               "opt_level": self.opt_level, "llvm_opt": self.llvm_opt,
               "reuse_activation_memory": self.reuse_activation_memory,
               "winograd": self.winograd,
               **({"max_activations": self.max_activations} if self.max_activations else {}),
               **({"patch_overhead": self.patch_overhead}
                  if self.patch_overhead is not None else {}),
               **({"activation_memory": self.activation_memory}
                  if self.activation_memory != "auto" else {}),
               **({"quantized_convolutions": self.quantized_convolutions}
                  if self.quantized_convolutions != "auto" else {}),
               **({"kernel_variants": {op: str(v) for op, v in self.kernel_variants.items()}}
                  if self.kernel_variants else {}),
               "model_inputs": [f"{s.name},{s.dtype.name},{list(s.shape)}" for s in self.model_inputs],
               "symbols": dict(self.symbols),
               **({"model_outputs": list(self.model_outputs)} if self.model_outputs else {}),
               **({"model_inputs_cut": list(self.cut_inputs)} if self.cut_inputs else {})}
        if self.instrument_debug or self.instrument_profile:
            rec["instrument"] = {"debug": self.instrument_debug,
                                 "profile": self.instrument_profile,
                                 **({"counter": self.instrument_profile_counter}
                                    if self.instrument_profile else {})}
        if self.load_profile:
            rec["quantization"] = {
                "profile": os.path.basename(self.load_profile), "schema": self.quantization_schema,
                "precision_bias": self.quantization_precision_bias,
                "channelwise": self.enable_channelwise, "calibration": self.quantization_calibration,
                "keep_original_precision_for_nodes": list(self.keep_original_precision_for_nodes)}
        return rec


@dataclass
class BundleInfo:
    """What compile() wrote."""
    directory: str
    name: str
    entry: str
    files: dict  # suffix -> path
    manifest: dict
    report: dict | None = None  # with -dump-report: {"data": collect.py's dict, "graph": picture}

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
    print(f"model-compiler: warning: {one_line(msg)}", file=sys.stderr)


def load_graph(models: list[str], opts: Options, max_tensor_bytes: int | None = None):
    from glowpy.frontend.onnx import LoadOptions, load_onnx
    specs = {}
    for s in opts.model_inputs:  # a repeated input would silently keep only its last shape
        if s.name in specs:
            raise UsageError(f"-model-input: input '{show(s.name)}' is given more than once; "
                             "give each input's type and shape once")
        specs[s.name] = s
    lo = LoadOptions(specs, dict(opts.symbols), max_tensor_bytes, list(opts.model_outputs),
                     list(opts.cut_inputs))
    paths = list(models)
    onnx_model = len(paths) == 1 and (paths[0].endswith(".onnx") or not os.path.isdir(paths[0])
                                      and not paths[0].endswith((".pb", ".pbtxt")))
    if not onnx_model and (opts.model_outputs or opts.cut_inputs):
        raise UsageError("-model-outputs and -model-inputs are for ONNX models; Caffe2 nets "
                         "name their outputs in predict_net's external_output")
    if len(paths) == 1 and paths[0].endswith(".onnx"):
        return load_onnx(paths[0], lo, _warn)
    if len(paths) == 1 and not os.path.isdir(paths[0]) and not paths[0].endswith((".pb", ".pbtxt")):
        return load_onnx(paths[0], lo, _warn)
    try:
        from glowpy.frontend.caffe2 import load_caffe2
    except ImportError:
        raise ModelError(f"'{show(paths[0])}': Caffe2 models are not supported by this build") from None
    return load_caffe2(paths, lo, _warn)


# macros and symbols of the header's common block (bundle_*.h.j2)
HEADER_MACROS = frozenset({"GLOW_SUCCESS", "GLOW_MEM_ALIGN", "GLOW_GET_ADDR",
                           "_GLOW_BUNDLE_COMMON_DEFS"})
SIZE_MACROS = ("CONSTANT_MEM_SIZE", "MUTABLE_MEM_SIZE", "ACTIVATIONS_MEM_SIZE", "MEM_ALIGN")


def bundle_names(models: list[str], opts: Options) -> tuple[str, str]:
    """(network name, entry symbol), refused when either would make an unusable or unsafe
    bundle: the name names files (NAME.o...), the entry is an exported C symbol."""
    name = opts.network_name if opts.network_name is not None else \
        os.path.splitext(os.path.basename(models[0].rstrip("/\\")))[0]
    src = (f"-network-name={show(name)}" if opts.network_name is not None else
           f"network name '{show(name)}' (from the model file name; set -network-name)")
    problem = file_stem_problem(name)
    if problem:
        raise UsageError(f"{src}: the bundle's file name {problem}")
    upper = legalize(name).upper()
    clash = [f"{upper}_{m}" for m in SIZE_MACROS if f"{upper}_{m}" in HEADER_MACROS]
    if clash:
        raise UsageError(f"{src}: its header macro {clash[0]} would redefine the header's own "
                         "macro of that name; choose another network name")
    # The NAME_ prefix is the contract (DESIGN.md), so a name C or C++ cannot take is refused
    problem = reserved_form(upper + "_X")
    if problem:
        raise UsageError(f"{src}: the header's macros would begin '{upper}_', which {problem}; "
                         "choose another network name")
    for ident in [f"{upper}_{m}" for m in SIZE_MACROS] + [f"{legalize(name)}_config"]:
        problem = c_name_problem(ident)
        if problem:
            raise UsageError(f"{src}: the header's '{ident}' {problem}; choose another network name")
    if opts.main_entry_name == "":  # legalize would make it '_'
        raise UsageError("-main-entry-name is empty; give the entry function's name, or leave "
                         "the option out to use the network name")
    entry = legalize(opts.main_entry_name if opts.main_entry_name is not None else name)
    esrc = f"-main-entry-name={show(opts.main_entry_name)}" if opts.main_entry_name is not None \
        else src
    problem = symbol_problem(entry)
    if problem:
        raise UsageError(f"{esrc}: the entry function '{entry}' {problem}; choose another "
                         f"with -main-entry-name")
    if entry == f"{legalize(name)}_config" or entry in {f"{upper}_{m}" for m in SIZE_MACROS}:
        raise UsageError(f"{esrc}: the entry function '{entry}' would clash with the bundle's "
                         f"own symbol or macro of that name; choose another with -main-entry-name")
    return name, entry


def _placeholders(prog, name: str, entry: str):
    upper = legalize(name).upper() + "_"
    macros = HEADER_MACROS | {upper + m for m in SIZE_MACROS} | {entry} | RESERVED_SYMBOLS | \
        {f"{legalize(name)}_config"}
    taken = {m[len(upper):] for m in macros if m.startswith(upper)}
    symbols = unique_legal_names([b.name for b in prog.placeholders], taken, prefix=upper)
    return [bw.Placeholder(b.name, sym, b.dtype, b.shape, b.offset,
                           "input" if b in prog.inputs else "output",
                           b.value.qparams if b.value is not None else None)
            for b, sym in zip(prog.placeholders, symbols)]


def compile_model(models, output_dir: str, opts: Options | None = None) -> BundleInfo:
    from glowpy.codegen.target import TargetError, resolve_target

    opts = opts or Options()
    models = [models] if isinstance(models, (str, os.PathLike)) else [os.fspath(m) for m in models]
    models = [os.fspath(m) for m in models]
    output_dir = os.fspath(output_dir)
    if not models or not all(models):
        raise UsageError("-model is required (the model file to compile)")
    if not output_dir:
        raise UsageError("-emit-bundle is required (the output directory)")
    if opts.backend != "CPU":
        raise UsageError(f"-backend={opts.backend} is not available; the only backend is CPU")
    if opts.bundle_api not in ("static", "dynamic"):
        raise UsageError(f"-bundle-api={opts.bundle_api}: expected static or dynamic")
    for what, level in (("O", opts.opt_level), ("llvm-opt", opts.llvm_opt)):
        if not isinstance(level, int) or not 0 <= level <= 3:
            raise UsageError(f"-{what}={level}: expected an optimization level from 0 to 3")
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise UsageError(f"-emit-bundle={show(output_dir)}: exists and is not a directory; "
                         "give a directory (it is created if missing)")
    name, entry = bundle_names(models, opts)
    profile = _report_options(opts)
    precheck(output_dir, name)
    try:
        target = resolve_target(opts.target, opts.mcpu, opts.march, opts.mattr, opts.float_abi,
                                opts.relocation_model, opts.code_model)
    except TargetError as e:
        raise UsageError(str(e)) from None
    limit = resolve_limit(opts.max_region_size, target.pointer_bits)
    counter = _instrument_counter(opts, target, name, entry)
    from glowpy.progress import Progress
    progress = Progress(opts.verbose, live=opts.progress)
    ok = False
    try:
        info = _compile(models, output_dir, opts, name, entry, target, limit, counter, progress,
                        profile)
        ok = True
        return info
    finally:
        progress.done(ok)


def _report_options(opts: Options) -> dict | None:
    """Checks -dump-report's requirements before compiling; the -report-profile profile."""
    if opts.report_profile and not (opts.dump_report or opts.collect_report):
        raise UsageError("-report-profile is shown in the report: give -dump-report=FILE.html too")
    if not (opts.dump_report or opts.collect_report):
        return None
    from glowpy.report import collect, require
    require()
    return collect.load_profile(opts.report_profile) if opts.report_profile else None


def _instrument_counter(opts: Options, target, name: str, entry: str) -> str | None:
    """The profile counter -instrument-profile uses (None without it); checks the options."""
    from glowpy.codegen import instrument
    if opts.instrument_profile_counter not in instrument.COUNTERS:
        raise UsageError(f"-instrument-profile-counter={opts.instrument_profile_counter}: "
                         f"expected {', '.join(instrument.COUNTERS)}")
    if opts.instrument_debug or opts.instrument_profile:
        clash = [s for s in instrument.symbols(name).values() if s == entry]
        if clash:
            raise UsageError(f"-main-entry-name: the entry '{entry}' would clash with the "
                             "instrumentation's symbol of that name; choose another")
    if not opts.instrument_profile:
        return None
    return instrument.counter_for(target, opts.instrument_profile_counter)


ACTIVATION_MEMORY = ("auto", "min", "fast")
QUANTIZED_CONVOLUTIONS = ("auto", "float", "integer")


def _qconv_in_float(opts, target) -> str | None:
    """How integer convolutions run where their integer kernels are slow: "auto", by default
    on vector targets where time comes first (no -activation-memory=min, -max-activations or
    -patch-overhead): x86's integer GEMM where it applies (kernels/int8/pairs.py: u8 x s8
    quads with VNNI or AVX2 (pmaddubsw), int8 weights; int16 pairs elsewhere, weights stored
    as int16, 2x their int8 bytes), the rest on the float kernels (ir/passes/quant/
    float_exact.py: float weights, 4x the int8 bytes, and float activations), whose
    multiply-adds per instruction are several (the integer kernels, made for the Cortex-M's
    DSP pairs, do one); "float" (-quantized-convolutions=float): the float kernels only;
    None: the integer kernels and int8 weights."""
    if opts.quantized_convolutions not in QUANTIZED_CONVOLUTIONS:
        raise UsageError(f"-quantized-convolutions={opts.quantized_convolutions}: expected "
                         f"{', '.join(QUANTIZED_CONVOLUTIONS)}")
    if opts.quantized_convolutions == "auto":
        # an activation budget or patches asked for: memory comes first there too
        asked = opts.max_activations is not None or bool(opts.patch_overhead)
        fast = target.caps.float_lanes > 1 and not _memory_first(opts, target) and not asked
        return "auto" if fast else None
    return "float" if opts.quantized_convolutions == "float" else None


def _scratch_may_grow(opts, target) -> bool:
    """Whether a kernel's scratch that pays in time may grow the activation region where no
    gap has room (catalog.post_planning): time comes first and no budget was set."""
    return not _memory_first(opts, target) and opts.max_activations is None and \
        not opts.patch_overhead


def _memory_first(opts, target) -> bool:
    """Whether the plan saves activation bytes at the cost of time (planner.build)."""
    if opts.activation_memory not in ACTIVATION_MEMORY:
        raise UsageError(f"-activation-memory={opts.activation_memory}: expected "
                         f"{', '.join(ACTIVATION_MEMORY)}")
    if opts.activation_memory == "auto":
        return target.caps.memory_first
    return opts.activation_memory == "min"


PATCH_OVERHEAD = 10.0  # percent of the model's MACs patch-based execution may add by default


def _patch(graph, opts, target):
    """Patch-based execution of the first stage (ir/patch/choose.py), when asked for by
    -max-activations, -patch-overhead or -activation-memory (microcontrollers by default):
    (graph, what it did or None)."""
    over = opts.patch_overhead
    if over is not None and not 0 <= over <= 1000:
        raise UsageError(f"-patch-overhead={over}: expected a percentage from 0 to 1000")
    if opts.max_activations is not None and opts.max_activations <= 0:
        raise UsageError(f"-max-activations={opts.max_activations}: expected a positive byte "
                         "count")
    if opts.opt_level == 0 or not opts.reuse_activation_memory:
        if opts.max_activations is not None:
            raise UsageError("-max-activations needs graph optimizations and memory reuse: drop "
                             "-O0 / -reuse-activation-memory-allocations=false")
        return graph, None
    if over is None:
        # on request only: the bands' kernels cost flash (VWW int8 on the Cortex-M7: code
        # 49 -> 88 KB) and column buffers move from activation gaps to the stack
        over = PATCH_OVERHEAD if opts.activation_memory == "min" else None
    if opts.max_activations is None and not over:
        return graph, None
    from glowpy.ir.patch.choose import choose

    from glowpy.codegen.kernels.catalog import post_planning
    from glowpy.ir.planner import estimate

    def plan(g):  # with the kernels' scratch (post_planning), which may grow the region
        p = estimate(g, reuse=True, memory_first=_memory_first(opts, target))
        post_planning(target, _scratch_may_grow(opts, target))(p)
        return p
    return choose(graph, plan, None if over is None else over / 100, opts.max_activations)


def _compile(models, output_dir, opts, name, entry, target, limit, counter, progress,
             profile=None):
    from glowpy.codegen import instrument
    from glowpy.codegen.module import add_bundle_config, build_module, compile_module
    from glowpy.ir.dot import to_dot
    from glowpy import elf

    with progress.stage("load"):
        graph = load_graph(models, opts, limit)
        _setup_quantization(graph, opts)
        if opts.dump_graph_dag_before_compile:
            write_dump("dump-graph-DAG-before-compile", opts.dump_graph_dag_before_compile,
                       to_dot(graph))
    with progress.stage("optimize"):
        from glowpy.codegen.kernels.catalog import graph_rewrites
        if opts.opt_level > 0:
            graph = graph_rewrites(_memory_first(opts, target))(graph)
        graph = optimize(graph, opts.opt_level)
        if opts.opt_level > 0:
            from glowpy.codegen import registry
            from glowpy.codegen.kernels.catalog import late_rewrites
            # forced variants count here too: a rewrite may leave a layer for one (int8/pairs)
            with registry.forcing(opts.kernel_variants):
                graph = late_rewrites(target.caps, _memory_first(opts, target), opts.winograd,
                                      _qconv_in_float(opts, target))(graph)
        if opts.dump_graph_dag:
            write_dump("dump-graph-DAG", opts.dump_graph_dag, to_dot(graph))
        _check_dtypes(graph)
    from glowpy.codegen import registry
    from glowpy.codegen.kernels.catalog import post_lowering, post_planning  # (registers kernels)
    with registry.forcing(opts.kernel_variants):
        with progress.stage("plan"):
            graph, patched = _patch(graph, opts, target)
            prog = build_program(graph, optimize=opts.opt_level > 0,
                                 reuse=opts.reuse_activation_memory,
                                 memory_first=_memory_first(opts, target),
                                 transform=post_lowering(target, opts.winograd,
                                                         _memory_first(opts, target)))
            check_regions(prog.sizes, limit)
            post_planning(target, _scratch_may_grow(opts, target))(prog)
            if patched is not None:
                prog.plan_info["patch"] = patched | {"after": prog.sizes["activation"]}
                if opts.max_activations and prog.sizes["activation"] > opts.max_activations:
                    raise ModelError(f"-max-activations={opts.max_activations}: the plan "
                                     f"needs {prog.sizes['activation']} bytes; raise the budget")
            placeholders = _placeholders(prog, name, entry)
            prog.name = legalize(name)  # the LLVM module's name: no model string reaches LLVM text
            table = instrument.reserve_table(prog) if counter else None
        make = None
        if opts.instrument_debug or counter:
            def make(mod, fn, eb, intp):
                return instrument.Instrumenter(mod, fn, eb, intp, prog, target,
                                               opts.instrument_debug, counter, table, name)
        with progress.stage("codegen"):
            mod = build_module(prog, target, entry, make, progress.kernels)
    check_regions(prog.sizes, limit)  # again: kernels may have added tables to the constants
    if opts.dump_memory_report:  # after codegen: kernels may add tables to the constant region
        from glowpy.ir.report import memory_report_json
        write_dump("dump-memory-report", opts.dump_memory_report, memory_report_json(prog))
    if opts.bundle_api == "dynamic":
        add_bundle_config(mod, f"{legalize(name)}_config", prog.sizes, ALIGN,
                          [(p.symbol, p.offset, p.elements, 1) for p in placeholders])
    if opts.dump_llvm_ir:
        write_dump("dump-llvm-ir", opts.dump_llvm_ir, str(mod))
    with progress.stage("llvm"):
        obj = compile_module(mod, target, opts.llvm_opt)
    with progress.stage("write"):
        image = bw.weights_image(prog)
        man = bw.manifest(name, entry, opts.bundle_api, prog, placeholders, target,
                          opts.recorded(), __version__)
        header_extra = None
        if opts.instrument_debug or counter:
            man["instrumentation"], header_extra = instrument.bundle_description(
                prog, name, opts.instrument_debug, counter, table, elf.Elf(obj).functions())
        man["integrity"] = bw.integrity({".o": obj, ".weights.bin": image})
        files = {".o": obj, ".h": bw.header_text(name, entry, opts.bundle_api, prog,
                                                 placeholders, __version__, header_extra),
                 ".weights.bin": image, ".weights.txt": bw.weights_text(image),
                 ".json": bw.manifest_json(man)}
        report = None
        if opts.dump_report or opts.collect_report:  # before publishing, like the other dumps
            from glowpy import report as page
            data = page.collect.from_compile(prog, graph, man, obj, models, opts.symbols)
            data["profile"] = profile
            report = {"data": data,
                      "graph": page.graph_picture(graph, data, page.warner("model-compiler"))}
            if opts.dump_report:
                page.write(opts.dump_report, data, report["graph"])
        paths = publish(output_dir, name, files)
    return BundleInfo(output_dir, name, entry, paths, man, report)


def _setup_quantization(graph, opts: Options):
    """What the int8 passes read from the graph: the rounding, and -load-profile's profile."""
    from glowpy.ir import qschema
    if opts.quantization_rounding not in ("even", "away"):
        raise UsageError(f"-quantization-rounding={opts.quantization_rounding}: expected even "
                         "or away")
    graph.quant_rounding = opts.quantization_rounding
    qopts = qschema.QuantOptions(opts.quantization_schema, opts.quantization_precision_bias,
                                 bool(opts.enable_channelwise),
                                 frozenset(opts.keep_original_precision_for_nodes),
                                 opts.quantization_calibration).check()
    if opts.load_profile:
        if opts.opt_level == 0:
            raise UsageError("-load-profile needs graph optimizations (quantization is one); "
                             "drop -O0")
        graph.quant_profile = qschema.read_profile(opts.load_profile)
        graph.quant_options = qopts


def _check_dtypes(graph):
    from glowpy.codegen.kernels import catalog  # noqa: F401  (registers every kernel)
    from glowpy.codegen.registry import has_kernel
    from glowpy.ir.dtypes import HALF, SUPPORTED
    for n in graph.nodes:
        held = SUPPORTED | HALF if n.op == "Cast" else SUPPORTED
        for v in list(n.outputs) + [v for v in n.inputs if v is not None and not v.is_const]:
            if v.dtype not in held:
                raise ModelError(f"node '{n.name}' ({n.op}): tensor '{v.name}' has type "
                                 f"{v.dtype.name}, which bundles do not support")
        if "view" not in n.opdef.traits and not has_kernel(n.op):
            # an op the passes rewrite only when some inputs are constants (the integer ops
            # fold their weights): name those inputs, the fix is in the model
            names = n.opdef.inputs
            late = [f"'{names[i].rstrip('?')}'" for i in n.opdef.const_inputs
                    if i < len(n.inputs) and n.inputs[i] is not None and not n.inputs[i].is_const]
            if late:
                one = len(late) == 1
                raise ModelError(
                    f"node '{n.name}' ({n.op}): {'input' if one else 'inputs'} {', '.join(late)} "
                    f"{'is' if one else 'are'} computed at run time; the op compiles only with "
                    f"{'it' if one else 'them'} known at compile time ("
                    f"{'an initializer or a Constant' if one else 'initializers or Constants'})")
            raise ModelError(f"node '{n.name}' ({n.op}): no kernel for this op")
