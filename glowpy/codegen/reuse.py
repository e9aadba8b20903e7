"""Kernels taken over from an equal instruction without being emitted again.

module._share merges kernels whose emitted text is identical, so LLVM compiles each once; but
each is still emitted and formatted first, and a Winograd kernel's transforms take some
0.1-0.15 s of Python to emit. FCN-ResNet50's 3x3 head, split over 32 chunks of input channels,
emitted 32 equal Winograd kernels: about 5 of its 26 s of compile on an AVX-512 Zen 4.

An instruction of an op in PURE whose emission inputs equal an earlier one's (`key`: its op,
attributes, fused epilogue, operand shapes and types, the small constants kernels make
immediates of, which operands share an address, their alignments and aliasing) calls that
kernel's function instead. What else an emitter may ask -- whether the region has room around
an operand for whole-vector loads (Kernel.readable), which depends on where the planner put
it -- is recorded with the first emission (`trace`) and asked again of the new instruction;
only equal answers reuse. PURE lists ops whose emitters write nothing outside their function:
no tables, no packed constants (emission is checked for that, and a kernel that wrote any is
never reused), no helper functions. TABLED ops write their tables first and then ask
(Kernel.taken_over): the new instruction's tables are written, its code is not, where an
equal kernel laid its tables out the same way (ResNet-50 int8: 53 QConvs, 24 emitted)."""
from __future__ import annotations

import numpy as np

PURE = frozenset({"ConvWinograd"})  # weights transformed and packed before emission (select)
# ops whose emitters may write tables and then ask Kernel.taken_over whether an equal kernel
# with the same table layout was emitted (take): the integer GEMMs, which read the output zero
# point at run time (quant.runtime_zp), so it is left out of their key
TABLED = frozenset({"QConv"})
# ... and `_fix_share`, the share of corrected quads in a layer's own weights: it chose the
# variant (groups.Quads16), which the params taken over with name. (A per-tensor multiplier is
# an input of one value per channel, never in the key by value: pairs.PairsEmitter reads it at
# run time, or puts it in those params where its code holds it.)
RUNTIME_ATTRS = ("y_zp", "_fix_share")
SMALL = 1  # constant operands this small go into the key by value (epilogues make immediates of them)


def key(ins, index: list, slots: list, overlapping: list):
    """What an emitter of `ins` can read, or None when `ins` is not of a PURE or TABLED op."""
    n = ins.node
    if ins.op not in PURE | TABLED or (n is not None and n.attrs.get("_band_of")):
        return None  # patch-based bands: Kernel.inp marks what each reads for the others
    drop = RUNTIME_ATTRS if ins.op in TABLED else ()
    attrs = repr(sorted((a, v) for a, v in ins.attrs.items() if a not in drop))
    node = None if n is None else (n.op, repr(sorted((a, v) for a, v in n.attrs.items()
                                                     if a not in drop)))
    operands = []
    for b in ins.inputs + list(ins.outputs):
        if b is None:
            operands.append(None)
            continue
        c = b.value.const if b.value is not None else None
        small = np.asarray(c).tobytes() if c is not None and np.size(c) <= SMALL else None
        operands.append((b.dtype.str, tuple(b.shape), b.region, small))
    return (ins.op, attrs, node, tuple(operands), tuple(index),
            tuple(s[3] for s in slots), tuple(overlapping))


class Reuse:
    """The kernels emitted so far, by key, with the placement questions each one asked."""

    def __init__(self):
        self.seen: dict = {}  # key -> [(trace, (function, attributes its emission noted))]

    def find(self, k, kk):
        """(an earlier function for kernel `k` (Kernel) with key `kk`, the instruction
        attributes its emission noted: the variant chosen), or None."""
        for trace, kept in self.seen.get(kk, ()):
            if all(k.readable(k.operands[pos], floats) == answer
                   for (pos, floats), answer in trace):
                return kept
        return None

    def tracing(self, k) -> list:
        """Records k's placement questions from now on: (operand position, floats) -> answer."""
        trace, asked = [], k.readable

        def readable(buf, floats):
            answer = asked(buf, floats)
            pos = [i for i, b in enumerate(k.operands) if b is buf]
            trace.append(((pos[0], floats), answer) if pos else None)
            return answer
        k.readable = readable
        return trace

    def take(self, k, kk, params):
        """For an instruction of a TABLED op whose emitter has written its tables (and asked
        its placement questions so far): an earlier function with key kk, the same variant
        params and the same table layout (offsets from the first table, sizes), or None;
        Kernel.taken_over: (function, attributes its emission noted). Remembers the layout
        key for add()."""
        k.reuse_key = (kk, repr(params), tuple(k.layout))
        return self.find(k, k.reuse_key)

    def add(self, kk, trace: list, fn, noted: dict, wrote: bool):
        """Keeps `fn` for key kk with the attributes its emission noted on the instruction,
        unless the emission wrote outside the function or asked about memory that is not an
        operand."""
        if kk is not None and not wrote and None not in trace:
            self.seen.setdefault(kk, []).append((trace, (fn, noted)))
