"""`model-compiler`: Glow's command line on typer. Glow spells options with one dash
(`-model=x.onnx`); both that and `--model x.onnx` work. Every failure is one line
`model-compiler: error: ...` with exit status 1 (model problem) or 2 (usage problem)."""
from __future__ import annotations

import contextvars
import re
import sys
import traceback
import warnings
from typing import List, Optional

import typer

from glowpy import signals
from glowpy.errors import GlowpyError, UsageError, one_line

app = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["--help", "-h"]})

# ASCII digits only: \d, int() and str.isdigit also take "٣" (Arabic-Indic) and "²"
_SHAPE = re.compile(r"^\[\s*([0-9]+(\s*,\s*[0-9]+)*)?\s*\]$")


def _name_list(values) -> list[str]:
    """-model-outputs=a,b -model-outputs=c -> [a, b, c] (tensor names hold no commas in
    practice; the loader refuses empty and repeated names)."""
    return [n for v in values or [] for n in v.split(",")]


def parse_model_input(text: str):
    """name,type,[d0,d1,...] or name,int8q,scale,offset,[d0,...]."""
    import numpy as np

    from glowpy.frontend.onnx import InputSpec
    from glowpy.ir.dtypes import BY_NAME
    usage = (f"-model-input={text}: expected name,type,[d0,d1,...] "
             f"(types: {', '.join(sorted(BY_NAME))}, or name,int8q,scale,offset,[...])")
    m = re.match(r"^(.+?),([A-Za-z0-9]+),(.*)$", text)
    if not m:
        raise UsageError(usage)
    name, ty, rest = m.groups()
    scale = offset = None
    if ty in ("int8q", "uint8q"):
        parts = rest.split(",", 2)
        if len(parts) != 3:
            raise UsageError(usage)
        if not re.fullmatch(r"\s*[+-]?[0-9]+\s*", parts[1]):
            raise UsageError(usage)
        try:
            scale, offset = float(parts[0]), int(parts[1])
        except ValueError:
            raise UsageError(usage) from None
        rest, dtype = parts[2], np.dtype(np.int8 if ty == "int8q" else np.uint8)
    elif ty in BY_NAME:
        dtype = np.dtype(BY_NAME[ty])
    else:
        raise UsageError(usage)
    if not _SHAPE.match(rest.strip()):
        raise UsageError(usage)
    dims = tuple(int(d) for d in re.findall(r"[0-9]+", rest))
    if any(d <= 0 for d in dims):
        raise UsageError(f"-model-input={text}: dimensions must be positive")
    return InputSpec(name, dtype, dims, scale, offset)


def parse_symbol(text: str) -> tuple[str, int]:
    m = re.match(r"^([^,]+),([0-9]+)$", text)
    if not m or int(m.group(2)) <= 0:
        raise UsageError(f"-onnx-define-symbol={text}: expected name,value with a positive integer value")
    return m.group(1), int(m.group(2))


def parse_symbols(texts) -> dict:
    """-onnx-define-symbol values; a symbol given twice is an error, not the last one wins."""
    out = {}
    for t in texts or []:
        name, value = parse_symbol(t)
        if name in out:
            raise UsageError(f"-onnx-define-symbol: symbol '{name}' is given more than once "
                             f"({out[name]} and {value}); give each symbol once")
        out[name] = value
    return out


def parse_bool(option: str, text: str) -> bool:
    t = text.lower()
    if t in ("1", "true", "yes", "on"):
        return True
    if t in ("0", "false", "no", "off"):
        return False
    raise UsageError(f"-{option}={text}: expected true or false")


@app.command(help="Compile an ONNX or Caffe2 model into a bundle: NAME.o, NAME.h, "
                  "NAME.weights.bin, NAME.weights.txt and NAME.json.")
def model_compiler(
    model: Optional[List[str]] = typer.Option(None, "--model", help="Model file (.onnx), or Caffe2 "
                                              "predict and init nets (give -model twice, or a directory)."),
    emit_bundle: Optional[str] = typer.Option(None, "--emit-bundle", help="Output directory of the bundle."),
    network_name: Optional[str] = typer.Option(None, "--network-name", help="Bundle name (default: model file name)."),
    main_entry_name: Optional[str] = typer.Option(None, "--main-entry-name", help="Name of the entry function (default: network name)."),
    backend: str = typer.Option("CPU", "--backend", help="Backend; CPU is the only one."),
    bundle_api: str = typer.Option("static", "--bundle-api", help="Header API: static or dynamic."),
    target: Optional[str] = typer.Option(None, "--target", help="LLVM triple or architecture (arm, aarch64, riscv32, x86_64); default: host."),
    mcpu: Optional[str] = typer.Option(None, "--mcpu", help="Target CPU, e.g. cortex-m7 (default: host CPU, or the architecture's generic CPU)."),
    march: Optional[str] = typer.Option(None, "--march", help="Target architecture variant, e.g. armv7e-m."),
    mattr: Optional[List[str]] = typer.Option(None, "--mattr", "--target-feature", help="Target features, comma separated: +feat,-feat."),
    float_abi: Optional[str] = typer.Option(None, "--float-abi", help="soft, hard or default."),
    relocation_model: str = typer.Option("static", "--relocation-model", help="static or pic."),
    code_model: str = typer.Option("small", "--code-model", help="small, medium, large, kernel, tiny or default."),
    model_input: Optional[List[str]] = typer.Option(None, "--model-input", help="Input type and shape: name,type,[d0,d1,...] (repeatable)."),
    model_outputs: Optional[List[str]] = typer.Option(None, "--model-outputs", help="Compile part of the model: these tensors (comma separated, repeatable) become the bundle's outputs and what they do not need is dropped (e.g. a detector up to its raw boxes and scores, before data-dependent post-processing)."),
    model_inputs: Optional[List[str]] = typer.Option(None, "--model-inputs", help="Compile part of the model: these tensors (comma separated, repeatable) become the bundle's inputs and the nodes before them are dropped; types from the model or -model-input=name,type,[dims]."),
    onnx_define_symbol: Optional[List[str]] = typer.Option(None, "--onnx-define-symbol", help="Fix a symbolic dimension: name,value (repeatable)."),
    dump_graph_dag: Optional[str] = typer.Option(None, "--dump-graph-DAG", help="Write the optimized graph as Graphviz DOT."),
    dump_graph_dag_before_compile: Optional[str] = typer.Option(None, "--dump-graph-DAG-before-compile", help="Write the imported graph as Graphviz DOT."),
    dump_memory_report: Optional[str] = typer.Option(None, "--dump-memory-report", help="Write the memory plan as JSON: every activation buffer's size, offset, first and last use and producer; the peak and where it occurs; bytes per region."),
    dump_report: Optional[str] = typer.Option(None, "--dump-report", help="Write one self-contained HTML page about the bundle: the activation placement over the schedule (peak, floor, naive bound), region sizes, constants by size, code size per kernel and the optimized graph (needs matplotlib: pip install 'glowpy[report]'; the graph needs Graphviz dot)."),
    report_profile: Optional[str] = typer.Option(None, "--report-profile", help="With -dump-report: show this profile (bundle-profile -json of a host or Cortex-M run): per-op time and ticks per MAC by op family."),
    dump_llvm_ir: Optional[str] = typer.Option(None, "--dump-llvm-ir", help="Write the LLVM IR before optimization."),
    reuse_activation_memory_allocations: str = typer.Option("true", "--reuse-activation-memory-allocations", help="false gives every activation its own memory (debugging)."),
    activation_memory: str = typer.Option("auto", "--activation-memory", help="min: the smallest activation region, even with kernels slower than the ordinary ones (in-place 1x1 convolutions); fast: never such a kernel; auto (default): min on microcontrollers (M-profile ARM, 32-bit RISC-V), fast elsewhere."),
    kernel_variant: Optional[List[str]] = typer.Option(None, "--kernel-variant", help="Op:variant uses that kernel variant for every instruction of Op (an error where it does not apply); Op:!variant passes over it (repeatable). -dump-memory-report shows the variant each instruction got."),
    max_activations: Optional[str] = typer.Option(None, "--max-activations", help="An activation-region budget to meet (65536, 24K): the first layers run patch-based (row band by row band) as far as needed, whatever the compute overhead; refused with the smallest achievable figure when it cannot be met."),
    patch_overhead: Optional[float] = typer.Option(None, "--patch-overhead", help="Compute the first layers row band by row band when that lowers the activation region, adding at most this percentage of the model's multiply-adds in copies and calls (default: 10 with -activation-memory=min, else off; 0: off). It costs flash: one kernel per band shape.."),
    quantized_convolutions: str = typer.Option("auto", "--quantized-convolutions", help="float: integer convolutions whose sums float32 holds exactly (chunks of input channels, added as integers, where the whole sum may not) run on the float kernels, with outputs identical to the integer kernels' (several times faster on vector CPUs; weights stored as float, 4x their int8 bytes); integer: the integer kernels and int8 weights alone; auto (default): on vector targets unless memory comes first (-activation-memory=min, the default on microcontrollers, -max-activations or -patch-overhead), x86's integer GEMM kernels for ungrouped convolutions and matrix products (u8 x s8 quads on VNNI's vpdpbusd or AVX2's pmaddubsw, weights stored as int8; elsewhere int16 pairs on pmaddwd, weights stored as int16) and float for the rest."),
    winograd: str = typer.Option("true", "--winograd", help="false keeps every convolution direct: Winograd 3x3 and 5x5 convolutions (on targets with 8+ float lanes; int8 3x3 ones on x86 without VNNI) are faster but need scratch activation memory and 16/9 (F2x2) or 36/9 (F4x4) of their weights, 36/25 for 5x5 (int8: 32/9 of the int8 bytes)."),
    instrument_debug: bool = typer.Option(False, "--instrument-debug", help="The entry calls NAME_instrument(kind, instr_id, num_operands, operand_addresses, operand_sizes) before and after each instruction (declared in NAME.h; described in NAME.json)."),
    instrument_profile: bool = typer.Option(False, "--instrument-profile", help="The entry counts each instruction's cycles into a table in the mutable region (NAME_PROFILE_OFFSET); bundle-profile turns them into a profile."),
    instrument_profile_counter: str = typer.Option("auto", "--instrument-profile-counter", help="With -instrument-profile: auto, cycles (rdtsc / cntvct_el0), dwt (Cortex-M DWT CYCCNT, the default on M-profile cores) or callback (the application's uint64_t NAME_profile_counter(void))."),
    opt: int = typer.Option(1, "--O", help="Graph optimization level: 0 (only what lowering needs) or 1."),
    verbose: bool = typer.Option(False, "--verbose", help="Print each compile stage's seconds; show internals on errors."),
    load_profile: Optional[str] = typer.Option(None, "--load-profile", help="Quantize to int8 with this profile (written by model-profiler)."),
    quantization_schema: str = typer.Option("asymmetric", "--quantization-schema", help="With -load-profile: asymmetric, symmetric, symmetric_with_uint8 or symmetric_with_power2_scale."),
    quantization_precision_bias: str = typer.Option("Int32", "--quantization-precision-bias", help="With -load-profile: bias precision, Int32 or Int8."),
    enable_channelwise: bool = typer.Option(False, "--enable-channelwise", help="With -load-profile: one weight scale per output channel."),
    keep_original_precision_for_nodes: Optional[List[str]] = typer.Option(None, "--keep-original-precision-for-nodes", help="With -load-profile: op types left in float, comma separated (e.g. Softmax)."),
    quantization_calibration: str = typer.Option("none", "--quantization-calibration", help="With -load-profile: none or KL (ranges chosen by KL divergence)."),
    quantization_rounding: str = typer.Option("even", "--quantization-rounding", help="int8 requantization ties: even (ONNX, onnxruntime) or away (TFLite reference kernels)."),
    list_ops: bool = typer.Option(False, "--list-ops", help="Print the supported ONNX ops with "
                                  "their opset ranges and exit."),
    max_region_size: Optional[str] = typer.Option(None, "--max-region-size", help="Refuse models "
                                                  "whose tensors or memory regions need more bytes "
                                                  "than this (e.g. 512K, 64M; default: the "
                                                  "target's address space, at most 4G)."),
):
    if list_ops:
        from glowpy.oplist import render_text
        print(render_text(), end="")
        return
    from glowpy.codegen.registry import parse_forced
    from glowpy.compiler import Options, compile_model
    from glowpy.ir.validate import parse_size
    if not model:
        raise UsageError("-model is required (the model file to compile)")
    if not emit_bundle:
        raise UsageError("-emit-bundle is required (the output directory)")
    opts = Options(
        network_name=network_name, main_entry_name=main_entry_name, bundle_api=bundle_api,
        backend=backend, target=target, mcpu=mcpu, march=march,
        mattr=",".join(mattr) if mattr else None, float_abi=float_abi,
        relocation_model=relocation_model, code_model=code_model,
        model_inputs=[parse_model_input(t) for t in model_input or []],
        model_outputs=_name_list(model_outputs), cut_inputs=_name_list(model_inputs),
        symbols=parse_symbols(onnx_define_symbol), opt_level=opt,
        reuse_activation_memory=parse_bool("reuse-activation-memory-allocations",
                                           reuse_activation_memory_allocations),
        activation_memory=activation_memory, winograd=parse_bool("winograd", winograd),
        quantized_convolutions=quantized_convolutions,
        max_activations=(parse_size(max_activations, "max-activations")
                         if max_activations is not None else None),
        patch_overhead=patch_overhead,
        kernel_variants=parse_forced(kernel_variant),
        dump_graph_dag=dump_graph_dag, dump_graph_dag_before_compile=dump_graph_dag_before_compile,
        dump_llvm_ir=dump_llvm_ir, dump_memory_report=dump_memory_report, verbose=verbose,
        dump_report=dump_report, report_profile=report_profile,
        instrument_debug=instrument_debug, instrument_profile=instrument_profile,
        instrument_profile_counter=instrument_profile_counter,
        load_profile=load_profile, quantization_schema=quantization_schema,
        quantization_precision_bias=quantization_precision_bias,
        enable_channelwise=enable_channelwise, quantization_calibration=quantization_calibration,
        keep_original_precision_for_nodes=tuple(
            x.strip() for t in keep_original_precision_for_nodes or [] for x in t.split(",")
            if x.strip()),
        quantization_rounding=quantization_rounding,
        max_region_size=parse_size(max_region_size) if max_region_size is not None else None)
    captured = _CAPTURE.get()
    if captured is not None:  # compile_options(): validated, not compiled
        captured.append(opts)
        return
    info = compile_model(model, emit_bundle, opts)
    if verbose:
        m = info.memory
        print(f"model-compiler: wrote {info.name} to {emit_bundle}: constant {m['constant']} B, "
              f"mutable {m['mutable']} B, activations {m['activations']} B", file=sys.stderr)


_CAPTURE: contextvars.ContextVar = contextvars.ContextVar("model_compiler_capture", default=None)


def compile_options(model: str, args: list[str]):
    """The Options model-compiler would compile `model` with, given its options `args` (Glow or
    click spelling), parsed and validated by model-compiler's own command: model-verify passes
    its compile options through here. Raises click's usage errors and UsageError."""
    captured: list = []
    token = _CAPTURE.set(captured)
    try:
        typer.main.get_command(app).main(
            glow_argv(list(args)) + [f"--model={model}", "--emit-bundle=-"],
            prog_name="model-compiler", standalone_mode=False)
    finally:
        _CAPTURE.reset(token)
    if not captured:  # -list-ops, -help: not options to compile with
        raise UsageError(f"{' '.join(args)}: not compile options")
    return captured[0]


def glow_argv(argv: list[str]) -> list[str]:
    """-name=value / -name → --name=value / --name (Glow's spelling); -O0 style kept as --O=0."""
    out = []
    for a in argv:
        if re.match(r"^-O\d$", a):
            out.append(f"--O={a[2:]}")
        elif a in ("-help", "-h"):
            out.append("--help")
        elif a.startswith("-") and not a.startswith("--") and len(a) > 2:
            out.append("-" + a)
        else:
            out.append(a)
    return out


def run(argv: list[str], prog: str, command, final: bool = False) -> int:
    # only the option itself: "-verbose-x" or a value "verbose..." must not turn tracebacks on
    verbose = any(a in ("-verbose", "--verbose") for a in argv)
    with warnings.catch_warnings(), signals.handled(final):
        # Python warnings from libraries become one line each, like glowpy's own; IEEE
        # overflow/invalid/divide-by-zero while folding constants is the model's arithmetic
        warnings.showwarning = lambda msg, *a, **k: print(f"{prog}: warning: {one_line(msg)}",
                                                          file=sys.stderr)
        warnings.filterwarnings("ignore", r".*(overflow|invalid value|divide by zero|underflow) "
                                "encountered", RuntimeWarning)
        return _run(argv, prog, command, verbose)


def _run(argv: list[str], prog: str, command, verbose: bool) -> int:
    try:
        rv = command.main(glow_argv(argv), prog_name=prog, standalone_mode=False)
        signals.checkpoint()  # one the interpreter swallowed (signals.py) still ends with 130/143
        if rv == 130:  # typer's Exit(130) for a KeyboardInterrupt it caught
            print(f"{prog}: error: interrupted", file=sys.stderr)
        return rv if isinstance(rv, int) else 0
    except signals.Interrupted as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return e.exit_code
    except GlowpyError as e:
        if verbose:
            traceback.print_exc()
        print(f"{prog}: error: {one_line(e)}", file=sys.stderr)
        return e.exit_code
    except typer.Exit as e:
        return e.exit_code
    except typer.Abort:
        print(f"{prog}: error: aborted", file=sys.stderr)
        return 1
    except typer.TyperException as e:  # click's usage errors (typer vendors click)
        print(f"{prog}: error: {one_line(_click_message(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: error: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        if verbose:
            traceback.print_exc()
        print(f"{prog}: error: out of memory while compiling; lower -max-region-size so that "
              "oversized models are refused up front", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - the last line of defence: one line, no traceback
        if verbose:
            traceback.print_exc()
        print(f"{prog}: error: internal error: {type(e).__name__}: {one_line(e, 1000)} (rerun "
              "with -verbose and report it)", file=sys.stderr)
        return 1


def _click_message(e) -> str:
    """click's message in Glow's spelling (-option), naming the option involved."""
    msg = e.format_message()
    param = getattr(e, "param", None)
    name = getattr(param, "opts", [None])[0] if param is not None else getattr(e, "option_name", None)
    if name and name.lstrip("-") not in msg:
        msg = f"{name}: {msg}"
    return re.sub(r"(?<![\w-])--(?=\w)", "-", msg)


def exit_main(prog: str, typer_app):
    """A console script's whole life: run it on sys.argv and exit with its status. The signal
    handlers are not restored at the end but set to ignore: the interpreter's shutdown would
    put back the default action, and a SIGINT in those last milliseconds would kill, without a
    word, a process whose work is done and reported."""
    sys.exit(run(sys.argv[1:], prog, typer.main.get_command(typer_app), final=True))


def main():
    exit_main("model-compiler", app)
