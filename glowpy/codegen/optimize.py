"""LLVM's optimization pipeline over a bundle module, in parts that run on several cores.

A bundle's kernels are independent functions that only the entry function calls, so the
module splits into parts (the entry, and runs of kernels with the helpers they call), each
optimized in its own LLVM context on its own thread; the optimized parts are linked back into
one module, which the target machine then compiles into the one object file the bundle format
asks for. Code generation itself stays whole (one object, and llvmlite offers no linker for
objects); the optimization pipeline was about half of LLVM's time: ResNet-18 on the 2-core
AVX2 EPYC, 3.3 s of optimization and 3.35 s of code generation.

Every part sees the kernels as external functions (a part declares what it calls in another),
and the linked module makes them internal again before code generation. So the object does
not depend on how many parts or threads there were: a module is split by its size alone, and
the parts run on as many threads as the process may use.

llvmlite serializes every call into LLVM behind one process-wide lock, although LLVM itself
runs separate contexts on separate threads safely (ThinLTO's backends do). The pass pipeline,
the one long call, is made through llvmlite's underlying ctypes function, which releases
the GIL and takes no lock; with an llvmlite that does not expose it, the parts run one after
the other (same object, no speedup)."""
from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor

from llvmlite import binding as llvm
from llvmlite import ir

from glowpy import signals

# parts of a large module: more than threads, run largest first (text size only estimates cost)
PARTS = 9
SPLIT_TEXT = 400_000  # characters of kernel text from which a module is split (ResNet-18: 2.1M)
_REF = re.compile(r'@"?([-\w.$]+)"?')


def optimize(mod: ir.Module, target, opt: int) -> llvm.ModuleRef:
    """`mod` parsed and optimized at level `opt` (> 0), as one module in the global context."""
    parts, kernels = split(mod)
    if len(parts) == 1:
        return _run(parts[0], target.target_machine(opt=opt), opt, None)
    threads = min(len(parts), len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                  else os.cpu_count() or 1)
    ex = ThreadPoolExecutor(threads, thread_name_prefix="glowpy-opt")
    try:
        # SIGINT/SIGTERM held back until every part is done: raised in the main thread inside
        # llvmlite's lock acquisition (_LLVMLock.__enter__ runs Python after taking the lock),
        # the signal left the lock held, the workers waited for it and the main thread for
        # them (a fresh-clone CI run hung so; tests/test_signals.py reproduces it)
        with signals.deferred():
            order = sorted(range(len(parts)), key=lambda i: -len(parts[i]))  # largest first
            futures = {i: ex.submit(_run, parts[i], target.target_machine(opt=opt), opt,
                                    llvm.create_context()) for i in order}
            codes = [futures[i].result() for i in range(len(parts))]
    finally:
        ex.shutdown(wait=True, cancel_futures=True)
    merged = llvm.parse_bitcode(codes[0])
    for code in codes[1:]:
        merged.link_in(llvm.parse_bitcode(code))
    for name in kernels:
        merged.get_function(name).linkage = "internal"
    merged.verify()
    return merged


def _run(text: str, tm, opt: int, context):
    """One part parsed, verified and optimized: the module (context None) or its bitcode."""
    parsed = llvm.parse_assembly(text, context)
    parsed.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=opt)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    mpm = pb.getModulePassManager()
    if context is None:
        mpm.run(parsed, pb)
        return parsed
    run = llvm.ffi.lib.LLVMPY_RunNewModulePassManager
    getattr(run, "_cfn", run)(mpm, parsed, pb)  # unlocked: this part's context is its own
    return parsed.as_bitcode()


def split(mod: ir.Module) -> tuple[list[str], list[str]]:
    """([the text of each part], [kernel names made external]): one part, the module's own
    text, when it is small or has a single kernel; else the entry with the global variables
    and the kernels that use them, and PARTS - 1 runs of the other kernels, in module order,
    of about equal text."""
    defined = {n: g for n, g in mod.globals.items()
               if isinstance(g, ir.Function) and not g.is_declaration}
    entries = [n for n, g in defined.items() if g.linkage not in ("internal", "private")]
    variables = {n for n, g in mod.globals.items() if not isinstance(g, ir.Function)}
    texts = {n: str(g) for n, g in defined.items()}
    local = [n for n in defined if n not in entries]
    size = sum(len(texts[n]) for n in local)
    if size < SPLIT_TEXT or len(local) < 2:
        return [str(mod)], []
    # groups: a kernel with the helpers it calls (union-find over references between locals)
    root = {n: n for n in local}

    def find(n):
        while root[n] != n:
            root[n] = root[root[n]]
            n = root[n]
        return n
    uses_variable = set()
    for n in local:
        for r in set(_REF.findall(texts[n][texts[n].index("\n"):])):
            if r in root:
                root[find(r)] = find(n)
            elif r in variables:
                uses_variable.add(n)
    groups: dict = {}  # root -> members, in module order
    for n in local:
        groups.setdefault(find(n), []).append(n)
    where, done = {}, 0
    for members in groups.values():
        if any(m in uses_variable for m in members):
            part = 0  # a private global cannot be declared in another part
        else:
            part = 1 + min(PARTS - 2, done * (PARTS - 1) // size)
            done += sum(len(texts[m]) for m in members)
        where.update((m, part) for m in members)
    called = {r for n in entries for r in _REF.findall(texts[n]) if r in where}
    kernels = [n for n in local if n in called]
    head = [f'target triple = "{mod.triple}"', f'target datalayout = "{mod.data_layout}"']
    head += [t.get_declaration() for t in mod.get_identified_types().values()]
    meta = [f"!{k} = !{{ {', '.join(o.get_reference() for o in v.operands)} }}"
            for k, v in mod.namedmetadata.items()] + [str(md) for md in mod.metadata]
    parts = []
    for p in sorted(set(where.values()) | {0}):
        lines = list(head)
        for n, g in mod.globals.items():
            if n in defined and (n in entries and p == 0 or where.get(n) == p):
                text = texts[n]
                lines.append(text.replace("define internal ", "define ", 1) if n in kernels
                             else text)
            elif n in defined and n in kernels:
                ft = g.function_type
                lines.append(f"declare {ft.return_type} {g.get_reference()}"
                             f"({', '.join(str(a) for a in ft.args)})")
            elif n not in defined and (p == 0 or isinstance(g, ir.Function)):
                lines.append(str(g))  # declarations everywhere, variables in part 0
        parts.append("\n".join(lines + meta))
    return parts, kernels
