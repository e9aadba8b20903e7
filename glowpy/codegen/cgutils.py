"""Builder helpers in the manner of numba's cgutils: loops, loop nests, if/then and typed
element access. Kernel emitters build control flow only through these."""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np
from llvmlite import ir

F32 = ir.FloatType()
F64 = ir.DoubleType()
I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()

_LLVM_TYPES = {"float32": F32, "float64": F64, "int8": I8, "uint8": I8, "int16": I16,
               "uint16": I16, "int32": I32, "uint32": I32, "int64": I64, "uint64": I64, "bool": I8,
               "float16": I16, "bfloat16": I16}  # half types: bit patterns (mathfn/half.py)


def llvm_type(dtype) -> ir.Type:
    return _LLVM_TYPES[np.dtype(dtype).name]


def is_float(dtype) -> bool:
    return np.dtype(dtype).kind == "f"


def is_signed(dtype) -> bool:
    return np.dtype(dtype).kind == "i"


@contextmanager
def for_range(b: ir.IRBuilder, stop, start=0, step=1, intp=I64, name="i", interleave=0,
              unroll=None):
    """`for (i = start; i < stop; i += step)`; yields i. Bounds may be ints or values."""
    with for_range_carry(b, stop, (), start, step, intp, name, unroll, interleave) as c:
        yield c.index


class Carried:
    """What `for_range_carry` yields: the index, the carried values at the top of the body,
    `carry(values)` to set the next iteration's values, and `results` (after the loop)."""

    def __init__(self, index, values):
        self.index, self.values, self.next, self.results = index, list(values), None, None

    def carry(self, values):
        self.next = list(values)


def _interleave(module, count):
    """`!llvm.loop` metadata asking the loop vectorizer for `count` interleaved vector
    iterations (`llvm.loop.interleave.count`), one node per count and module."""
    cache = module.__dict__.setdefault("_glowpy_interleave", {})
    if count not in cache:
        hint = module.add_metadata([ir.MetaDataString(module, "llvm.loop.interleave.count"),
                                    ir.Constant(I32, count)])
        md = module.add_metadata([hint, hint])
        md.operands = (md, hint)  # self-referencing, as in _no_unroll
        cache[count] = md
    return cache[count]


def _no_unroll(module):
    """`!llvm.loop` metadata telling LLVM not to unroll (a self-referencing node)."""
    md = getattr(module, "_glowpy_no_unroll", None)
    if md is None:
        hint = module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")])
        md = module.add_metadata([hint, hint])
        md.operands = (md, hint)  # LLVM makes the self-referencing node distinct
        module._glowpy_no_unroll = md
    return md


def set_unroll_default(module, unroll: bool):
    """Whether LLVM may unroll the module's loops that do not say (for_range_carry's `unroll`
    None) and whose body the kernel vectorized itself: the backend's choice per target
    (codegen/module.py). Loops of scalar code stay LLVM's to unroll and vectorize (the integer
    kernels' small tap loops become vector dot products only once unrolled)."""
    module._glowpy_unroll = unroll


def _vector_body(fn, start: int) -> bool:
    """Whether the blocks from index `start` on (a loop's body: blocks are only ever appended,
    so everything emitted since it began) hold an instruction of a vector type."""
    return any(isinstance(ins.type, ir.VectorType)
               for blk in fn.blocks[start:] for ins in blk.instructions)


@contextmanager
def for_range_carry(b: ir.IRBuilder, stop, init, start=0, step=1, intp=I64, name="i",
                    unroll=None, interleave=0):
    """for_range with loop-carried values (phis): register accumulators without allocas.
    unroll=False marks the loop not to be unrolled (a body that is already a register-blocked
    tile gains nothing from copies, and they cost compile time and code size); None: the
    module's default (set_unroll_default), True lets LLVM decide. interleave=n
    asks the loop vectorizer for n vector iterations side by side: a body that is one long
    dependency chain per element (mathfn's range reductions and polynomials) then has
    independent chains to overlap, where the vectorizer's cost model picks one."""
    start = ir.Constant(intp, start) if isinstance(start, int) else start
    stop = ir.Constant(intp, stop) if isinstance(stop, int) else stop
    pre = b.block
    header = b.append_basic_block(f"{name}.head")
    body = b.append_basic_block(f"{name}.body")
    first = len(b.function.blocks) - 1
    end = b.append_basic_block(f"{name}.end")
    b.branch(header)
    b.position_at_end(header)
    i = b.phi(intp, name=name)
    i.add_incoming(start, pre)
    phis = []
    for v in init:
        p = b.phi(v.type)
        p.add_incoming(v, pre)
        phis.append(p)
    b.cbranch(b.icmp_signed("<", i, stop), body, end)
    b.position_at_end(body)
    c = Carried(i, phis)
    yield c
    nxt = b.add(i, ir.Constant(intp, step), name=f"{name}.next", flags=["nsw"])
    i.add_incoming(nxt, b.block)
    for p, v in zip(phis, c.next if c.next is not None else phis):
        p.add_incoming(v, b.block)
    br = b.branch(header)
    if unroll is None:
        unroll = getattr(b.module, "_glowpy_unroll", True) or interleave > 1 or \
            not _vector_body(b.function, first)
    if not unroll:
        br.set_metadata("llvm.loop", _no_unroll(b.module))
    elif interleave > 1:
        br.set_metadata("llvm.loop", _interleave(b.module, interleave))
    b.position_at_end(end)
    c.results = phis


@contextmanager
def loop_nest(b: ir.IRBuilder, shape, intp=I64, name="d", interleave=0, unroll=None):
    """Nested loops over a static shape; yields the list of indices (outermost first).
    `interleave`, `unroll`: for the innermost loop (for_range_carry)."""
    with _nest(b, list(shape), intp, name, [], interleave, unroll) as idx:
        yield idx


@contextmanager
def _nest(b, shape, intp, name, acc, interleave=0, unroll=None):
    if not shape:
        yield acc
        return
    last = len(shape) == 1
    with for_range(b, shape[0], intp=intp, name=f"{name}{len(acc)}",
                   interleave=interleave if last else 0, unroll=unroll if last else None) as i:
        with _nest(b, shape[1:], intp, name, acc + [i], interleave, unroll) as idx:
            yield idx


def collapse(shape, strides_list):
    """Merges adjacent dims that every operand walks contiguously, and drops size-1 dims, so
    loop nests are as shallow (and inner loops as long) as the layout allows."""
    dims = [(n, [s[i] for s in strides_list]) for i, n in enumerate(shape) if n != 1]
    out = []
    for n, st in dims:
        if out and all(ps == s * n for ps, s in zip(out[-1][1], st)):
            out[-1] = (out[-1][0] * n, st)
        else:
            out.append((n, st))
    if not out:
        return [1], [[0] for _ in strides_list]
    return [n for n, _ in out], [[st[k] for _, st in out] for k in range(len(strides_list))]


@contextmanager
def strided_loop(b: ir.IRBuilder, shape, strides_list, offsets=None, intp=I64, name="e",
                 interleave=0, unroll=None):
    """Loops over `shape`; yields, per operand, its element offset (intp value)
    `offsets[k] + sum(idx[d] * strides_list[k][d])`. Strides are in elements, 0 to broadcast.
    `interleave`, `unroll`: for the innermost loop (for_range_carry)."""
    shape, strides_list = collapse(shape, strides_list)
    offsets = offsets or [0] * len(strides_list)
    with loop_nest(b, shape, intp, name, interleave, unroll) as idx:
        yield [linear(b, idx, st, off, intp) for st, off in zip(strides_list, offsets)]


def linear(b, idx, strides, base=0, intp=I64):
    """base + sum(idx[d] * strides[d]) with constants folded."""
    acc = ir.Constant(intp, base) if isinstance(base, int) else base
    for i, s in zip(idx, strides):
        if s == 0:
            continue
        term = i if s == 1 else b.mul(i, ir.Constant(intp, s), flags=["nsw"])
        acc = term if (isinstance(acc, ir.Constant) and acc.constant == 0) else b.add(acc, term, flags=["nsw"])
    return acc


def floordiv(b: ir.IRBuilder, a, s: int):
    """Python's a // s for a positive constant s (sdiv truncates toward zero)."""
    s_ = ir.Constant(a.type, s)
    q, r = b.sdiv(a, s_), b.srem(a, s_)
    return b.sub(q, b.zext(b.icmp_signed("<", r, ir.Constant(a.type, 0)), a.type))


def contiguous_strides(shape) -> list[int]:
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= d
    return st[::-1]


def broadcast_strides(shape, out_shape) -> list[int]:
    """Element strides of a row-major `shape` read as `out_shape` (numpy broadcasting)."""
    st = contiguous_strides(shape)
    pad = len(out_shape) - len(shape)
    return [0] * pad + [0 if d == 1 and o != 1 else s for d, s, o in zip(shape, st, out_shape[pad:])]


@contextmanager
def if_then(b: ir.IRBuilder, cond):
    with b.if_then(cond):
        yield


def either(b: ir.IRBuilder, cond, then, otherwise):
    """then() where cond holds, otherwise() elsewhere: two blocks joined after them."""
    with b.if_else(cond) as (yes, no):
        with yes:
            then()
        with no:
            otherwise()


def gep(b: ir.IRBuilder, ptr, offset, elt: ir.Type):
    if isinstance(offset, int):
        offset = ir.Constant(I64, offset)
    return b.gep(ptr, [offset], inbounds=True, source_etype=elt)


def load(b, ptr, offset, elt, align=None):
    return b.load(gep(b, ptr, offset, elt), typ=elt, align=align)


def store(b, value, ptr, offset, align=None):
    return b.store(value, gep(b, ptr, offset, value.type), align=align)


def freeze(b: ir.IRBuilder, value):
    """`freeze value` (llvmlite's builder has no method for it): the same value to every use,
    and an operation the instruction selector does not look through."""
    instr = ir.Instruction(b.block, value.type, "freeze", [value])
    b._insert(instr)
    return instr


def const(ty: ir.Type, value):
    if isinstance(ty, ir.VectorType):  # a splat (the scalar op code also runs on vectors)
        return ir.Constant(ty, [const(ty.element, value)] * ty.count)
    if isinstance(ty, (ir.FloatType, ir.DoubleType)):
        return ir.Constant(ty, float(value))
    return ir.Constant(ty, int(value))


def alloca_in_entry(b: ir.IRBuilder, ty: ir.Type, name=""):
    """An alloca in the function's entry block, so loops do not grow the stack."""
    with b.goto_entry_block():
        return b.alloca(ty, name=name)


def stack_block(b: ir.IRBuilder, ty: ir.Type, count: int, name=""):
    """An entry-block array of `count` ty, aligned to a cache line (its rows start on vector
    boundaries), as an untyped pointer like the arguments (llvmlite's view only)."""
    block = alloca_in_entry(b, ir.ArrayType(ty, count), name)
    block.align = 64
    block.type = PTR
    return block


def for_runs(b: ir.IRBuilder, count: int, nr: int, body, intp=I64, name="q", start=None):
    """body(first, n) over [start, start + count) in runs of nr (start: an IR value, 0 when
    None): a loop over the full runs (none for a single one), then the rest with its own n
    (the kernels' partial tiles)."""
    full, rest = divmod(count, nr)

    def at(offset):
        return offset if start is None else b.add(start, offset)
    if full == 1:
        body(at(ir.Constant(intp, 0)), nr)
    elif full > 1:
        with for_range(b, full, 0, 1, intp, name) as q:
            body(at(b.mul(q, ir.Constant(intp, nr))), nr)
    if rest:
        body(at(ir.Constant(intp, full * nr)), rest)
