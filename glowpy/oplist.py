"""The supported ONNX ops, read from the op registry: what `model-compiler -list-ops` prints and
what docs/ops.md is generated from (tools/gen_ops_md.py; tests/test_oplist.py keeps the file
current).

An op's opset range starts at the latest of: the first ONNX version of the op, the op
definition's own `since` (older forms glowpy does not map), and the loader's MIN_OPSET; it
ends at the loader's MAX_OPSET, or before the opset where ONNX deprecated the op."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OpInfo:
    name: str
    first: int
    last: int
    family: str  # the op module (glowpy/ir/ops/<family>.py)
    const_inputs: tuple  # ONNX input names that must be compile-time constants
    kernel: bool  # False: views and ops always folded at compile time need none


def _onnx_versions(name: str):
    """(first since_version, deprecated-from version or None) of the default-domain op."""
    import onnx.defs
    versions = sorted(s.since_version for s in onnx.defs.get_all_schemas_with_history()
                      if s.name == name and s.domain == "")
    if not versions:
        return None, None
    deprecated = None
    for v in versions:
        if onnx.defs.get_schema(name, v, "").deprecated:
            deprecated = v
            break
    return versions[0], deprecated


def supported_ops() -> list[OpInfo]:
    """Every ONNX op glowpy compiles, by name."""
    from glowpy.codegen.kernels import catalog  # noqa: F401  (registers every kernel)
    from glowpy.codegen.registry import has_kernel
    from glowpy.frontend.onnx import MAX_OPSET, MIN_OPSET
    from glowpy.ir.ops import all_ops
    out = []
    for name, op in sorted(all_ops().items()):
        if "internal" in op.traits:
            continue
        first, deprecated = _onnx_versions(name)
        if first is None:  # registered for another frontend (Caffe2), not an ONNX op
            continue
        lo = max(first, op.since, MIN_OPSET)
        hi = MAX_OPSET if deprecated is None else min(MAX_OPSET, deprecated - 1)
        if lo > hi:
            continue
        names = [s.rstrip("?*") for s in op.inputs]
        const = tuple(names[i] if i < len(names) else f"#{i}" for i in op.const_inputs)
        out.append(OpInfo(name, lo, hi, type(op).__module__.rsplit(".", 1)[-1], const,
                          has_kernel(name)))
    return out


def contrib_ops() -> list[OpInfo]:
    """The com.microsoft ops (onnxruntime's contrib domain, opset 1), spelled with their
    domain as models and error messages name them; each expands into default-domain ops."""
    from glowpy.frontend.onnx_checks import CONTRIB_DOMAIN
    from glowpy.ir.ops import all_ops
    out = []
    for name, op in sorted(all_ops().items()):
        if name.startswith(CONTRIB_DOMAIN + "."):
            names = [s.rstrip("?*") for s in op.inputs]
            const = tuple(names[i] for i in op.const_inputs)
            out.append(OpInfo(name, 1, 1, type(op).__module__.rsplit(".", 1)[-1], const, False))
    return out


CONTRIB_TITLE = ("{count} com.microsoft ops (onnxruntime's contrib domain, opset 1), compiled as "
                 "the default-domain ops they expand to")


def render_text(ops=None, contrib=None) -> str:
    ops = supported_ops() if ops is None else ops
    contrib = contrib_ops() if contrib is None else contrib
    w = max(len(o.name) for o in ops + contrib)
    lines = [f"{len(ops)} supported ONNX ops (default domain), with the opsets they load from:"]
    for o in ops:
        rng = f"{o.first}-{o.last}" if o.first != o.last else f"{o.first}"
        extra = f"  compile-time inputs: {', '.join(o.const_inputs)}" if o.const_inputs else ""
        lines.append(f"  {o.name:<{w}}  opset {rng:<5}{extra}".rstrip())
    lines += ["", CONTRIB_TITLE.format(count=len(contrib)) + ":"]
    lines += [f"  {o.name:<{w}}  opset 1" for o in contrib]
    return "\n".join(lines) + "\n"


MD_HEADER = """\
# Supported ONNX ops

Generated from the op registry by `python tools/gen_ops_md.py` (`model-compiler -list-ops`
prints the same list); `tests/test_oplist.py` fails when this file is out of date.

glowpy loads models of ai.onnx opsets {min_opset} to {max_opset}. An op's range below starts
at its first ONNX version that glowpy implements and ends where ONNX deprecated it (or at
{max_opset}). *Compile-time inputs* must be initializers or computable from them (constant
folding runs while importing): they fix shapes, axes or counts of an ahead-of-time build.
Element types: float32 for every op; int8, uint8, int32, int64 and bool for elementwise
arithmetic, comparisons and logic, Where, data movement (reshape, transpose, concat, slice,
gather, tile, expand, ...), the Reduce* family, ArgMax/ArgMin, TopK, CumSum and Einsum;
integers only for BitShift and Bitwise*. float16 and bfloat16 models compile: their half
tensors are computed in float32, and stay half at the bundle's inputs and outputs and where the
model casts to them (the conversions round half to even, as numpy). Control flow has no kernel: an `If` whose condition
is known at compile time becomes its branch, one with a run-time condition computes both
(small, same-shaped) branches and selects; `Loop` (compile-time trip count) and `Scan` are
unrolled.
[conformance.md](conformance.md) shows what the ONNX node tests verify.

{count} ops:

| op | opsets | family | compile-time inputs |
|---|---|---|---|
"""


def render_markdown(ops=None) -> str:
    from glowpy.frontend.onnx import MAX_OPSET, MIN_OPSET
    ops = supported_ops() if ops is None else ops
    lines = [MD_HEADER.format(min_opset=MIN_OPSET, max_opset=MAX_OPSET, count=len(ops)).rstrip("\n")]
    for o in ops:
        rng = f"{o.first}–{o.last}" if o.first != o.last else f"{o.first}"
        const = ", ".join(f"`{c}`" for c in o.const_inputs)
        lines.append(f"| {o.name} | {rng} | {o.family} | {const} |")
    contrib = contrib_ops()
    lines += ["", f"## {CONTRIB_TITLE.format(count=len(contrib))}", "",
              "onnxruntime's own tools (transformer optimizer, fusions, quantization) write these "
              "into models. Below opset 17, LayerNormalization also loads from the default "
              "domain (onnxruntime's contrib form, which ONNX later adopted).", "",
              "| op | family |", "|---|---|"]
    lines += [f"| {o.name} | {o.family} |" for o in contrib]
    return "\n".join(lines) + "\n"
