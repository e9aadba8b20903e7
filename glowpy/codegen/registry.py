"""The kernel registry: every op's code generators ("variants"), ranked, chosen in one place.

An op may have several variants (Conv: depthwise, channel-vectorized, pixel-vectorized,
direct). Each is declared where it is written, with

    @variant("Conv", "depthwise", rank=40, plan=plan_depthwise)
    def emit_depthwise(k, params): ...

- `rank`: higher is tried first;
- `plan(k) -> params | None`: whether the variant applies to this instruction on this target,
  and with which parameters (tile shapes, a tiling choice); None means "not applicable". The
  plan is where a variant's choices and their measured reasons live. A variant without a plan
  applies to everything (the op's fallback) and gets params None;
- `emit(k, params)`: generates the code.

`select(k)` tries the variants of `k.instr.op` by rank and takes the first whose plan answers;
the chosen variant's name and parameters are recorded on the instruction
(`instr.attrs["variant"]`), so `-dump-memory-report` shows them. `forcing(...)` makes the
selection take a named variant, optionally with given parameters, or pass over some variants
("!name"): tests reach every variant this way, and `-kernel-variant=Op:name` (or `Op:!name`)
does it from the command line.

This module imports nothing from the kernels: the kernel families import it, and
`glowpy.codegen.kernels.catalog` imports the families."""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Any, Callable

from glowpy.errors import ModelError, UsageError


@dataclass(frozen=True)
class Variant:
    op: str
    name: str
    rank: int
    plan: Callable[[Any], Any] | None
    emit: Callable[[Any, Any], None]

    def params_for(self, k):
        return None if self.plan is None else self.plan(k)


_VARIANTS: dict[str, list[Variant]] = {}
# op -> (variant name, params or _NO_PARAMS), or op -> ("!", names passed over): set by
# forcing() for the duration of a compile
_FORCED: contextvars.ContextVar[dict] = contextvars.ContextVar("glowpy_forced_variants", default={})
_NO_PARAMS = object()


def variant(op: str, name: str, rank: int = 0, plan=None):
    """Registers the decorated `emit(k, params)` as variant `name` of `op` (see the module)."""
    def deco(fn):
        vs = _VARIANTS.setdefault(op, [])
        if any(v.name == name for v in vs):
            raise AssertionError(f"variant {op}:{name} registered twice")
        if any(v.rank == rank for v in vs):
            raise AssertionError(f"variants of {op} need distinct ranks ({name}: {rank})")
        vs.append(Variant(op, name, rank, plan, fn))
        vs.sort(key=lambda v: -v.rank)
        return fn
    return deco


def emits(*ops):
    """The single variant of ops that have one generator: `emit(k)` with no parameters."""
    def deco(fn):
        for op in ops:
            variant(op, "default", 0)(lambda k, params, fn=fn: fn(k))
        return fn
    return deco


def variants(op: str) -> list[Variant]:
    """The variants of `op`, highest rank first."""
    return list(_VARIANTS.get(op, ()))


def has_kernel(op: str) -> bool:
    return op in _VARIANTS


def ops() -> list[str]:
    return sorted(_VARIANTS)


def select(k) -> tuple[Variant, Any]:
    """The variant for instruction `k.instr` and its params; records them on the instruction."""
    op = k.instr.op
    vs = _VARIANTS.get(op)
    if not vs:
        raise ModelError(f"op {op} has no code generator for this target")
    forced = _FORCED.get().get(op)
    if forced is not None and forced[0] == "!":
        vs = [v for v in vs if v.name not in forced[1]]
        forced = None
    if forced is not None:
        name, params = forced
        [v] = [v for v in vs if v.name == name]
        if params is _NO_PARAMS:
            params = v.params_for(k)
            if params is None and v.plan is not None:
                raise ModelError(f"instruction '{k.instr.name}' ({op}): the forced variant "
                                 f"'{name}' does not apply to it")
        chosen = (v, params)
    else:
        chosen = next(((v, p) for v in vs for p in [v.params_for(k)]
                       if v.plan is None or p is not None), None)
        if chosen is None:
            raise ModelError(f"op {op}: no variant applies to instruction '{k.instr.name}'")
    k.instr.attrs["variant"] = {"name": chosen[0].name, "params": chosen[1]}
    return chosen


def is_forced(op: str, name: str) -> bool:
    """Is variant `name` of `op` forced in the current compile? A plan that declines a
    variant on cost alone (it applies, another is estimated cheaper) still answers then."""
    forced = _FORCED.get().get(op)
    return forced is not None and forced[0] == name


def allowed(op: str, name: str) -> bool:
    """May variant `name` of `op` be chosen in the current compile (neither another variant
    forced nor this one passed over)? For choices made before code generation on behalf of a
    variant, such as leaving a layer integer for it."""
    forced = _FORCED.get().get(op)
    if forced is None:
        return True
    if forced[0] == "!":
        return name not in forced[1]
    return forced[0] == name


def forced_params(op: str):
    """The params forced for `op`'s variant in the current compile, or None (for choices made
    before code generation, such as the Winograd rewrite's blocking)."""
    forced = _FORCED.get().get(op)
    if forced is None or forced[0] == "!" or forced[1] is _NO_PARAMS:
        return None
    return forced[1]


def emit(k) -> None:
    v, params = select(k)
    v.emit(k, params)


def parse_forced(specs) -> dict:
    """-kernel-variant values ("Op:name", "Op:!name") -> forcing()'s choices (which checks the
    names when the compile starts)."""
    out = {}
    for spec in specs or ():
        op, sep, name = str(spec).partition(":")
        if not sep or not op or not name.lstrip("!"):
            raise UsageError(f"-kernel-variant={spec}: expected Op:variant (e.g. Conv:direct)")
        prev = out.get(op)
        if name.startswith("!") and (prev is None or isinstance(prev, tuple)):
            out[op] = ("!", (prev or ("!", frozenset()))[1] | {name[1:]})
        elif prev is not None:
            raise UsageError(f"-kernel-variant={spec}: {op} is given more than once; force one "
                             "variant, or pass over several with Op:!name")
        else:
            out[op] = name
    return out


@contextlib.contextmanager
def forcing(choices: dict):
    """Within the block, op -> variant name (its plan gives the params), (name, params), or
    "!name" / ("!", {names}): every variant but those."""
    forced = dict(_FORCED.get())
    for op, choice in choices.items():
        if isinstance(choice, str) and choice.startswith("!"):
            choice = ("!", frozenset({choice[1:]}))
        name, params = (choice, _NO_PARAMS) if isinstance(choice, str) else choice
        if op not in _VARIANTS:
            several = ", ".join(o for o in ops() if len(_VARIANTS[o]) > 1)
            raise UsageError(f"-kernel-variant: no op '{op}' has kernels; ops with several "
                             f"variants: {several}")
        known = [v.name for v in _VARIANTS[op]]
        bad = sorted(set(params) - set(known)) if name == "!" else [] if name in known else [name]
        if bad:
            raise UsageError(f"-kernel-variant={op}:{bad[0]}: {op} has the variants "
                             f"{', '.join(known)}")
        forced[op] = (name, params)
    token = _FORCED.set(forced)
    try:
        yield
    finally:
        _FORCED.reset(token)
