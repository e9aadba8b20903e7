"""A channels-last copy of a convolution's input image for conv/channel.py's tiles (the row
tiles and the flat ones across row ends).

The channel-vectorized kernel broadcasts one input value per pixel and reduction step, the
steps running over the input channels: in NCHW each step reads another plane, a whole plane
further on. With deep inputs a tile's sweep over the channels of its kernel rows touches more
lines (and pages) than L1 holds, and its kernel columns read them again. In a channels-last
copy ([H][W][C], one image) the steps read consecutive floats: sixteen channels per line. The
copy is made once per image into a scratch output in a gap of the activation region
(kernels/gaps.py, after planning), by in-register transposes of width x width blocks
(turn.transpose). Where no gap is free the kernel reads the planes as before, unless the input
is past a few L2 sizes and time comes first: then the region grows by the copy (`place`).

The flat tiles of small planes read it too: a 3x3 on 512 channels of 7x7 or 14x14 sweeps 512
planes of 196 or 784 bytes per kernel row and tile, a line or two each, past L1 every tile.
Real Zen 3, AVX2, 5 x 2 flat tiles, one layer, best of 4 alternating rounds: the 3x3/2 512 on
14x14 3,462 -> 2,637 us on the copy (onnxruntime 2,965), the 3x3 on 7x7 2,597 -> 2,351 (2,589);
in ResNet-50 (layer_profile, min of 4 rounds) its 3x3/2 3,461 -> 2,745 us and its two 7x7 3x3s
2,779 / 2,732 -> 2,293 / 2,291."""
from __future__ import annotations

from glowpy.codegen.kernels import gaps
from glowpy.codegen.kernels.conv.channel_chunks import stream_chunk
from glowpy.codegen.kernels.vectors import LINE
from glowpy.codegen.registry import variants
from glowpy.codegen.kernels.conv.pixel import form
from glowpy.codegen.kernels.conv.turn import transpose

SCRATCH = "_channels_last"  # name suffix of the scratch output


def scratch_of(k):
    """The instruction's channels-last scratch output, or None."""
    outs = k.instr.outputs
    return outs[1] if len(outs) == 2 and outs[1].name.endswith(SCRATCH) else None


def pitches(c: int, win: int) -> tuple[int, int]:
    """(column pitch, row pitch) in floats of the copy: whole lines, an odd number of them, so
    that a tile's pixels and kernel rows spread over L1's sets. With the pitches of the plain
    layout (128 channels: 512 bytes a column, 28 KiB a row at 56 wide) a stride-2 tile's 13
    columns x 3 rows fell on 4 of the 64 sets of a 32 KiB L1 and ran 20% slower than reading
    the planes (Zen 3); the odd pitches ran 15-20% faster than the planes."""
    line = LINE // 4  # floats of a cache line
    cp = -(-c // line) * line
    cp += line * (cp // line % 2 == 0)
    rp = win * cp
    rp += line * (rp // line % 2 == 0)
    return cp, rp


def channels_last(k, vec, dst, n, c: int, hin: int, win: int):
    """dst[ih*rp + iw*cp + ch] = input[n][ch][ih][iw] (pitches()): blocks of width channels x
    width columns of a row loaded as runs of columns, turned around in registers, stored as
    runs of channels (masked at the channel and column tails)."""
    b, w = k.b, vec.w
    cp, rp = pitches(c, win)
    p = hin * win
    src0 = b.mul(n, k.c(c * p))
    cfull, ctail = divmod(c, w)
    qfull, qtail = divmod(win, w)

    def block(ih, c0, nc, q0, nq):
        qmask = None if nq == w else tuple(q < nq for q in range(w))
        cmask = None if nc == w else tuple(i < nc for i in range(w))
        at = b.add(b.add(src0, b.mul(ih, k.c(win))), q0)
        cols = [vec.load(k.inp(0), b.add(at, b.mul(b.add(c0, k.c(i)), k.c(p))), qmask)
                if i < nc else vec.zero() for i in range(w)]
        rows = transpose(b, cols, w, w)  # rows[q]: channels c0.. of column q0 + q
        to = b.add(b.add(b.mul(ih, k.c(rp)), b.mul(q0, k.c(cp))), c0)
        for q in range(nq):
            vec.store(rows[q], dst, b.add(to, k.c(q * cp)), cmask)

    def over_channels(ih, q0, nq):
        if cfull:
            with k.for_range(cfull, name="cb") as cb:
                block(ih, b.mul(cb, k.c(w)), w, q0, nq)
        if ctail:
            block(ih, k.c(cfull * w), ctail, q0, nq)

    with k.for_range(hin, name="ih") as ih:
        if qfull:
            with k.for_range(qfull, name="qb") as qb:
                over_channels(ih, b.mul(qb, k.c(w)), w)
        if qtail:
            over_channels(ih, k.c(qfull * w), qtail)


def scratch_bytes(c: int, hin: int, win: int) -> int:
    return 4 * hin * pitches(c, win)[1]


def sweep_past_l1(cg: int, kh: int, caps) -> bool:
    """Whether a row tile's sweep over the channels of its kernel rows (a line per channel and
    row) exceeds half of L1, where the channels-last copy pays; no cache figures: never."""
    return bool(caps.l1d_bytes) and cg * kh * 64 > caps.l1d_bytes // 2


class _Planned:
    """What plan() reads of a Kernel, from an instruction before code generation."""
    def __init__(self, ins, caps):
        self.instr, self.node, self.caps = ins, ins.node, caps

    def in_buf(self, i):
        return self.instr.inputs[i] if i < len(self.instr.inputs) else None

    def out_buf(self, i=0):
        return self.instr.outputs[i]


def place(prog, caps, plan, rank: int, grow: bool = False) -> None:
    """catalog.post_planning: a channels-last copy of the input in a gap for each Conv whose
    tiles conv/channel.py would run (`plan` and `rank`: its plan and rank; one group, at
    least a vector of channels; 2D and 1D windows; strided 1x1 windows too: ResNeXt's 1024 ->
    2048 at 10x10 -> 5x5 0.88 of the cycles reading the planes) when their sweep over the
    channels passes L1.

    grow (time first, no activation budget): where no gap has room, past the region's end, for
    the inputs `_grows` names."""
    def wants(ins):
        if ins.op != "Conv" or len(ins.outputs) != 1 or ins.node is None:
            return None
        k = _Planned(ins, caps)
        f = form(k)
        if f is None:
            return None
        s = f[0]
        one_d = s.rank == 1 and len(ins.inputs[0].shape) == 3  # (not a flattened 1x1)
        if s.g != 1 or not (s.rank == 2 or one_d) or s.c < f[1].width or \
                not sweep_past_l1(s.cg, s.kh, caps):
            return None
        p = plan(k)
        if p is None or any(v.rank > rank and v.params_for(k) is not None
                            for v in variants("Conv")):
            return None  # (a variant ranked above the channel-vectorized one takes it)
        if p.get("kc") and not p.get("flat") and \
                stream_chunk(caps, s, p["nvo"] * f[1].width, p["npx"]) == p["kc"]:
            return None  # (its blocks' weights stream: chunks of them without the copy)
        return scratch_bytes(s.c, s.hin, s.win), SCRATCH, "float32", 64
    gaps.place(prog, wants, grow=(lambda ins: _grows(ins, caps)) if grow else None)


# L2 sizes of input from which the copy may grow the region: smaller inputs of wider rows gained
# little for the bytes (ResNet-50's 56x56 128-channel 3x3, Inception's 35x35 3x3s: activations
# +35-43%, the layers level to 4% faster, Zen 3, -instrument-profile, min of 6 alternating rounds)
GROW_L2 = 4
TALL_ROWS = 5  # input rows a tile's window spans from which short rows may grow the region


def _grows(ins, caps) -> bool:
    """Whether the copy may grow the region: an input past GROW_L2 times the L2, one whose
    rows each fit a cache line (14x14, 7x7 planes), or rows of two lines under a tall window.

    Large inputs: on the planes each block of output channels sweeps the input from L3, a line
    per plane and tile, as many pages as channels in a chunk: with 4 KiB pages such a layer
    passes the L2 TLB's reach and its time went with where the pages fell. wav2vec2's first
    Conv1d k3/2 512 -> 512 over 3,199 frames (6.5 MB in; real Zen 3, AVX2, one layer, best of
    4 alternating rounds): 39.8 to 143 ms chunked on the planes from one compile to the next
    (onnxruntime 33.6-34.9), 30.7-31.4 ms on the copy (87% of the peak); on 2 MiB pages the
    planes took 36.7-50 ms. In the model (-instrument-profile, min of 6 rounds) the encoder's
    six Conv1d went 222 -> 79 ms; conformer's 256-channel 3x3/2 on 199x39 (8 MB in) 61 -> 43-48
    ms as one layer.

    Rows within a line: every tile of an output row reads the same few lines of each plane,
    and a sweep of the channels past L1 evicts them before the next tile comes back. No gap
    is free there only where the layer holds the activation peak: a plain chain of deep 3x3s
    (VGG's, a U-Net's bottom) whose Winograd scratch does not fit the budget either. Three 3x3s +
    Relu (real Zen 3, AVX2, best of 3 alternating rounds, planes -> copy, onnxruntime): 160 on
    14x14 3,564 -> 2,880 us (2,826), 256 on 14x14 9,845 -> 7,158 (7,676), 384 (chunked on the
    planes) 17.8 -> 17.0 ms (16.9), 512 31.2 -> 30.5 ms (29.6); the region grows by one copy
    (the copies share that room), +53% for the 256-channel chain's two 14x14 buffers.

    Rows within two lines under a tall unstrided window (TALL_ROWS input rows or more a tile,
    dilation counted): the tile sweeps as many rows of every plane, twice the lines where a
    row straddles two. One layer between Relus (real Zen 3, AVX2, best of 5 alternating
    rounds, planes -> copy, onnxruntime): Inception-v3's 7x1 160 -> 160 on 17x17 1,175 ->
    1,014 us (1,059), 192 -> 192 1,776 -> 1,440 (1,504); 7x1 128 -> 128 on 28x28 2,331 ->
    1,908 (2,016) and on 32x32 3,094 -> 2,638 (2,568); 3x3 dilation 2 160 -> 160 on 17x17
    1,530 -> 1,246 (1,401). Level where the window is short or strided: 3x3 dilation 2 256 on
    28x28 9.95 -> 10.09 ms (9.88), 3x3/2 192 on 17x17 536 -> 573 us (610); those keep the
    planes."""
    x = ins.inputs[0]
    row = x.shape[-1] * x.dtype.itemsize
    if bool(caps.l2_bytes) and x.nbytes > GROW_L2 * caps.l2_bytes or row <= LINE:
        return True
    win = ins.node.opdef.window(ins.node)
    return row <= 2 * LINE and len(win.kernel) == 2 and tuple(win.strides) == (1, 1) and \
        (win.kernel[0] - 1) * win.dilations[0] + 1 >= TALL_ROWS
