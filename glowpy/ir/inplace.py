"""In-place decisions, taken on the instruction list once the order is fixed: an instruction
may write over an input that dies at it when the kernel reads each input element before it
writes the output element(s) that share its bytes.

  * elementwise ops (fused chains included): out[i] is computed from in[i] only, so the output
    takes the input's storage (relation "reuse"); so do Softmax, LogSoftmax and
    LayerNormalization, whose every kernel reads a whole group (row) before writing it and each
    element before writing it. Attention's scores are the largest tensors of a transformer:
    DETR's (8, 850, 850) activations 47.1 -> 25.7 MB, Whisper's encoder 112.6 -> 63.6, T5's
    5.2 -> 4.2; the store over the bytes just read also skips the write-allocate of a second
    23 MB stream (DETR's Softmax 2.60 -> 2.45 ms, AVX2 code on a Zen 4);
  * 1x1 stride-1 Conv: ConvPointwiseInPlace computes a tile of positions for all output
    channels into a small scratch buffer, then writes it back over the input tile it consumed;
  * Conv whose first epilogue step adds a full-size tensor that dies there (a residual): the
    output takes that tensor's storage and the kernel accumulates onto it ("accumulate");
  * window ops that stream block by block (depthwise/grouped Conv, pooling; int8: grouped
    QConv, MaxPool, QAvgPool): the output may start below the input and overlap it by as much
    as the blocks already consumed allow; recorded in Program.overlaps for the planner as
    (instr, in storage, out storage, D), the largest allowed out_offset - in_offset."""
from __future__ import annotations

import numpy as np

from glowpy.ir import epilogue
from glowpy.ir.liveness import uses
from glowpy.ir.program import ACTIVATION, Buffer, Program

# kernels that read element i of every input before writing element i of the output (the
# row ops: and every element of a row before writing any of it)
INPLACE_OPS = epilogue.ELEMENTWISE | {"Cast", "FusedElementwise", "Softmax", "LogSoftmax",
                                      "LayerNormalization"}
# kernels that write their output plane after plane (docs/CONTRIBUTING.md, kernel contracts)
STREAMING_OPS = {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}
# the integer-output ones whose every variant streams so (grouped QConv: depthwise_dsp and
# direct, the only QConv variants that take group > 1; MaxPool: pool/direct and int8/pool;
# QAvgPool: quant and int8/pool). Their
# overlaps are slow in-place forms (lower's slow_in_place; planner._relax keeps one only where
# the region would grow without it): input and output lose noalias, so loads cannot move above
# the previous stores. Measured on the M7 with every overlap kept, VWW int8's depthwise_dsp
# layers whose output the plan put over their input: 73,140 -> 80,700 instructions (6x6,
# column by column), 50,220 -> 58,940 (3x3); the model 9,928,010 -> 9,998,960 at the same
# region (55,296 B: the peak is a pointwise layer); relaxed, all are given back.
INT_STREAMING_OPS = {"QConv", "MaxPool", "QAvgPool"}

SCRATCH_BYTES = 4096  # ConvPointwiseInPlace tile buffer budget
MAX_TILE = 32  # positions per tile (the kernel unrolls a tile)


def _children_kinds(prog: Program) -> dict:
    """storage -> kinds of placed children ("slice", "part", "reuse")."""
    kids: dict = {}
    seen = set()
    for ins in prog.instrs:
        for b in list(ins.inputs) + list(ins.outputs):
            if b is None:
                continue
            s = b.storage
            if id(s) in seen:
                continue
            seen.add(id(s))
            if s.base is not None:
                kids.setdefault(s.base.storage, set()).add(s.relation)
    return kids


def _dying_input(b: Buffer, i: int, live: dict, kids: dict) -> Buffer | None:
    """The storage of input b if its bytes are free after instruction i."""
    if b is None or b.root.region != ACTIVATION:
        return None
    s = b.storage
    if s.nbytes != b.nbytes or (s.base is not None and s.relation != "reuse"):
        return None
    if kids.get(s, set()) & {"slice", "part"} or live.get(s, (0, -1))[1] != i:
        return None
    return s


def _fresh_output(b: Buffer, i: int, live: dict, kids: dict) -> Buffer | None:
    s = b.storage
    if s.region != ACTIVATION or s.base is not None or s.nbytes != b.nbytes:
        return None
    if "slice" in kids.get(s, set()) or live.get(s, (-1, 0))[0] != i:
        return None
    return s


def _same_elements(x: Buffer, y: Buffer) -> bool:
    """x is read at the output's own element index (no broadcasting)."""
    return np.dtype(x.dtype).itemsize == np.dtype(y.dtype).itemsize and \
        int(np.prod(x.shape)) == int(np.prod(y.shape)) and x.nbytes == y.nbytes


def _core(shape) -> tuple:
    """The shape without leading 1s (how it broadcasts against a same-size output)."""
    shape = tuple(shape)
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape


def _reuse(out: Buffer, inp: Buffer, kids: dict):
    out.base, out.view_offset, out.relation = inp, 0, "reuse"
    kids.setdefault(inp, set()).add("reuse")


def pointwise_conv(ins) -> bool:
    """A 1x1, stride-1, unpadded, ungrouped 2-D Conv (the in-place tiled kernel's form)."""
    n = ins.node
    if ins.op != "Conv" or n is None or n.attrs.get("group", 1) != 1:
        return False
    x, w = ins.inputs[0], ins.inputs[1]
    win = n.opdef.window(n)
    return (len(x.shape) >= 3 and all(k == 1 for k in win.kernel) and all(s == 1 for s in win.strides)
            and not any(win.pads_begin) and not any(win.pads_end) and w.value.is_const)


def streaming_overlap(ins) -> int | None:
    """D (bytes) for a window op whose output blocks are written in order, each after the
    input block it reads was last needed; None if the op does not stream."""
    n = ins.node
    x, y = ins.inputs[0], ins.outputs[0]
    # (itemsizes differ for QConv's int32 sums over int8 input)
    plane_in = int(np.prod(x.shape[2:])) * np.dtype(x.dtype).itemsize
    plane_out = int(np.prod(y.shape[2:])) * np.dtype(y.dtype).itemsize
    if ins.op in ("Conv", "QConv"):
        g = n.attrs.get("group", 1)
        if g == 1:
            return None
        blocks = x.shape[0] * g
        bin_, bout = x.shape[1] // g * plane_in, y.shape[1] // g * plane_out
    elif ins.op in STREAMING_OPS | INT_STREAMING_OPS:
        blocks, bin_, bout = x.shape[0] * x.shape[1], plane_in, plane_out
    else:
        return None
    d = -bout if bin_ >= bout else (blocks - 1) * (bin_ - bout) - bout
    return d if d > -y.nbytes else None


def slow_overlap(ins) -> bool:
    """An overlap of an integer kernel (INT_STREAMING_OPS: slower than the kernel apart)."""
    return ins.outputs[0].dtype != np.float32


def assign_in_place(prog: Program, avoid_slow: set = frozenset()):
    live = uses(prog)
    kids = _children_kinds(prog)
    for i, ins in enumerate(prog.instrs):
        if len(ins.outputs) != 1 or ins.node is None:
            continue
        so = _fresh_output(ins.outputs[0], i, live, kids)
        if so is None:
            continue
        out = ins.outputs[0]
        extras = [b.storage for b in ins.inputs[epilogue.base_count(ins.node):] if b is not None]
        if ins.op in INPLACE_OPS:
            for b in ins.inputs:
                s = _dying_input(b, i, live, kids)
                if s is not None and _same_elements(b, out) and not any(
                        o is not None and o.storage is s and _core(o.shape) != _core(b.shape)
                        for o in ins.inputs):  # the same bytes read in another order
                    _reuse(so, s, kids)
                    break
            continue
        if out.dtype != np.float32:  # the float kernels' loop orders are known below
            if ins.op in INT_STREAMING_OPS and ins.node.name not in avoid_slow:
                _stream(prog, i, ins, so, live, kids, extras)
            continue
        if ins.op == "Conv":
            steps = epilogue.steps(ins.node)
            if steps and steps[0]["op"] in ("Add", "Sum") and len(steps[0]["args"]) == 2 \
                    and None in steps[0]["args"]:
                j = [a for a in steps[0]["args"] if a is not None][0]
                r = ins.inputs[j]
                s = _dying_input(r, i, live, kids)
                others = [ins.inputs[a] for st in steps[1:] for a in st["args"] if a is not None]
                if s is not None and _same_elements(r, out) and _core(r.shape) == _core(out.shape) \
                        and s is not ins.inputs[0].storage and all(o.storage is not s for o in others):
                    _reuse(so, s, kids)
                    ins.attrs["accumulate"] = j
                    continue
            sx = _dying_input(ins.inputs[0], i, live, kids)
            if sx is None or sx in extras:
                continue
            if pointwise_conv(ins) and ins.node.name not in avoid_slow:
                x = ins.inputs[0]
                n_, c, m = x.shape[0], x.shape[1], out.shape[1]
                if n_ == 1 or m <= c:
                    plane = int(np.prod(x.shape[2:]))
                    # the tile buffer must cost far less than the buffer the in-place run saves;
                    # a multiple of 8 positions keeps the kernel's unrolled row in whole vectors
                    budget = min(SCRATCH_BYTES, min(x.nbytes, out.nbytes) // 4)
                    tile = max(1, min(plane, MAX_TILE, budget // (m * np.dtype(out.dtype).itemsize)))
                    tile = tile // 8 * 8 if 8 <= tile < plane else tile
                    scratch = Buffer(f"{ins.name}_tile", out.dtype, (m, tile), ACTIVATION)
                    ins.op = "ConvPointwiseInPlace"
                    ins.attrs["tile"] = tile
                    ins.outputs = [out, scratch]
                    _reuse(so, sx, kids)
                    continue
        if ins.op in STREAMING_OPS:
            _stream(prog, i, ins, so, live, kids, extras)


def _stream(prog: Program, i: int, ins, so: Buffer, live: dict, kids: dict, extras: list):
    """Records the streaming overlap of instruction i's output so over its dying input."""
    sx = _dying_input(ins.inputs[0], i, live, kids)
    if sx is None or sx in extras:
        return
    d = streaming_overlap(ins)
    if d is not None:
        prog.overlaps.append((i, sx, so, d))
