"""QConv on x86 vectors as an integer GEMM: neighbouring steps of the reduction multiplied and
added by one instruction, pairs of int16 (pmaddwd) or, with VNNI, quads of u8 x s8
(vpdpbusd; groups.py), and the requantization in the tile's epilogue.

pmaddwd multiplies 2w int16 lanes pairwise and adds neighbouring products into w int32 lanes:
2w multiply-adds per instruction, exact, where a float FMA does w; vpdpbusd does 4w. Measured
on this Zen 4 with a 6 x 2 register tile of 8-lane vectors from L1 (benchmarks/pair_madd.py):
FMA 58.6 G multiply-adds/s, pmaddwd 95-117, vpdpbusd 234, so the float path
(passes/quant/float_exact.py) would run these layers at a half or a quarter of the rate.
Layout: a panel of positions is packed once into a stack buffer [tile][K/g][NR] of int32
lanes of g reduction steps, reading the int8 input straight (no float copy of it); the
weights are packed [M/MR][K/g][MR] (conv/pointwise_packed.py's layout, groups for floats);
MR output channels x NV vectors accumulate over K/g in int32; each accumulator gets the bias,
the QConv's requantization (quant.requantize on vectors, as QFinish) and its clamp, and is
stored as int8: no float output to write and read back."""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.accumulators import Acc, pack_constant
from glowpy.codegen.kernels.conv.pointwise_packed import panel_tiles
from glowpy.codegen.kernels.conv.pointwise_strided import SCRATCH_MAX
from glowpy.codegen.kernels.int8.groups import Pairs, Quads, Quads16, fits_quads, grouping
from glowpy.codegen.kernels.int8.pairs_lanes import LanesTile, lanes_width
from glowpy.codegen.kernels.int8.pairs_tiles import (pointwise, reduction_steps, simd_of,
                                                     tile_model, tile_shape)
from glowpy.codegen.kernels.int8.quant import I32, clamp, requantize, runtime_zp
from glowpy.codegen.kernels.int8.taps import channel_params
from glowpy.codegen.kernels.vectors import Vec
from glowpy.codegen import registry
from glowpy.ir import qmath

GROUP = {c.name: c.g for c in (Pairs, Quads, Quads16)}  # reduction steps per int32 lane
# the groupings in the order a node takes the first that applies (kind)
ORDER = ("quads", "quads16", "pairs")
# packed tile bytes a window layer may need: past the stack's SCRATCH_MAX it takes a gap of the
# activation region, or grows it (pairs_window.place); 3x3 over 512 channels as pairs on 8 lanes
# needs 72 KiB a vector (ResNet-18/50's last stage, 2.0-2.2 ms a layer on the float path
# against 1.5 as pairs on AVX2 code)
TILE_MAX = 256 << 10


def integer(caps, node) -> bool:
    """A QConv or QMatMul x86's integer multiply-adds can run: constant weights, bias and
    requantization tables, 8-bit input, 8-bit output (QMatMul: or int32 sums), sums within
    int32 (what every grouping here and winograd.py need)."""
    if not caps.pair_madd or node.op not in ("QConv", "QMatMul"):
        return False
    x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
    outs = (np.int8, np.uint8) + ((np.int32,) if node.op == "QMatMul" else ())
    tables = node.inputs[1:3] if y.dtype == np.int32 else node.inputs[1:5]
    if any(v is None or v.const is None for v in tables) or \
            np.dtype(x.dtype) not in (np.dtype(np.int8), np.dtype(np.uint8)) or \
            np.dtype(y.dtype) not in [np.dtype(d) for d in outs]:
        return False
    zp = node.attrs["x_zp" if node.op == "QConv" else "a_zp"]
    return bool(np.all(qmath.sum_bound(w.const, node.inputs[2].const, x.dtype, zp) < 1 << 31))


def takes(caps, node, name: str = "pairs") -> bool:
    """A node these kernels run (integer; pairs_matmul.py the QMatMul) as `name` (pairs;
    quads on a target with VNNI, quads16 on one with AVX2, or forced), the variant
    not passed over (-kernel-variant=QConv:!pairs): quads need int8 weight values; a QConv
    has one group, one or two spatial dims, one tile's groups within SCRATCH_MAX (a 1x1) or
    TILE_MAX (a window)."""
    if not registry.allowed(node.op, name) or not integer(caps, node):
        return False
    x, w, y = node.inputs[0], node.inputs[1], node.outputs[0]
    if name == "quads" and not ((caps.quad_madd or registry.is_forced(node.op, name)) and
                                fits_quads(w.const)):
        return False
    lanes = simd_of(caps).width if node.op == "QMatMul" else 0  # its columns on the lanes
    if name == "quads16" and not (caps.pair_madd >= 8 and fits_quads(w.const) and  # AVX2,
                                  (registry.is_forced(node.op, name) or  # AVX512BW
                                   Quads16.pays(node, lanes))):
        return False
    if node.op == "QMatMul":  # at least a vector of output columns
        return len(w.shape) == 2 and y.shape[-1] >= simd_of(caps).width
    return node.attrs["group"] == 1 and len(x.shape) in (3, 4) and \
        tile_shape(caps, node, GROUP[name], SCRATCH_MAX if pointwise(node) else TILE_MAX) \
        is not None


def kind(caps, node) -> str | None:
    """The grouping (ORDER) these kernels run a node with, or None."""
    return next((name for name in ORDER if takes(caps, node, name)), None)


def mark(caps, node, graph, winograd: bool = True) -> bool:
    """Where time comes first (-quantized-convolutions=auto; compiler._qconv_in_float): marks
    a QConv these kernels take for them, which the float rewrite then leaves integer; for the
    pairs its weights become int16 (the same values): the kernel's int32 pairs are then the
    same bytes and replace them in the constant region (pack_constant) instead of joining a
    second, int8 copy (quads are int8 bytes already). Elsewhere the integer kernels keep int8
    weights (ResNet-50 int8: 25 MB of weights; with the int8 copy beside the pairs, 86 MB of
    constants, 70 without). With Winograd (-winograd) forced (-kernel-variant=QConv:winograd),
    a layer it can run (winograd_choice.takes) is marked with int8 weights."""
    from glowpy.codegen.kernels.int8 import winograd_choice
    name = kind(caps, node)
    if name is None and winograd and registry.is_forced(node.op, "winograd") and \
            integer(caps, node) and winograd_choice.takes(caps, node):
        node.attrs["_pairs"] = 1
        return True
    if name is None:
        return False
    node.attrs["_pairs"] = 1
    if name == "pairs":
        w = node.inputs[1]
        node.inputs[1] = graph.constant(w.const.astype(np.int16), w.name + "_int16")
    return True


def chosen_kind(caps, node) -> str | None:
    """The grouping these kernels run a node with (kind) where it was marked for them (mark)
    or that variant is forced; None otherwise."""
    name = kind(caps, node)
    if name is None or not (node.attrs.get("_pairs") or registry.is_forced(node.op, name)):
        return None
    return name


def chosen(k, name: str) -> bool:
    """The instruction runs on these kernels as `name` (chosen_kind)."""
    return chosen_kind(k.caps, k.node) == name


def epilogue(k, zp: int) -> dict:
    """{"wide", "ties"} of the requantization (quant.requantize) after these sums: the
    product's high word where every shift allows it, the tie correction where a tie can occur
    (both False for int32 sums). From the node's tables (a kernel may read its weights
    transformed: winograd.py)."""
    if k.attrs["out_dtype"] == "int32":
        return {"wide": False, "ties": False}
    w, bias, mult, shifts = (v.const for v in k.node.inputs[1:5])
    bound = qmath.sum_bound(w, bias, k.in_buf(0).dtype, zp)
    return {"wide": k.attrs["mode"] == "even" and bool(np.all(shifts <= -2)),
            "ties": qmath.ties_possible(bound, mult, shifts)}


def scratch_of(k):
    """The instruction's scratch output for the packed tile (pairs_window.place), or None."""
    outs = k.instr.outputs
    return outs[1] if len(outs) == 2 and outs[1].name.endswith(SCRATCH) else None


SCRATCH = "_packed_tile"


def plan(k, name: str = "pairs"):
    """{"group", "mr", "nv", "rows", "tiles", "window", "wide", "ties"}: the float packed
    GEMM's register tile (the same registers, one int32 vector per accumulator), panels of
    whole tiles within SCRATCH_MAX (a 1x1; one tile, ROWS rows or a row's positions,
    otherwise; within the scratch output where pairs_window.place gave one)."""
    if not chosen(k, name):
        return None
    scratch = scratch_of(k)
    best = tile_model(k.caps, k.node, GROUP[name],
                  scratch.nbytes if scratch is not None else SCRATCH_MAX)
    if best is None:  # no scratch for a tile past the stack's budget (not placed)
        return None
    cycles, mr, nv, rows = best
    y = k.out_buf()
    steps = reduction_steps(k.node, GROUP[name])
    nr = nv * simd_of(k.caps).width
    tiles = panel_tiles(steps, nr, math.ceil(math.prod(y.shape[2:]) / nr), SCRATCH_MAX) \
        if pointwise(k.node) else 1
    fixes = name == "quads16" and Quads16.fix_share(k.node) > 0
    lanes = lanes_width(simd_of(k.caps), name, y.shape[1], steps, math.prod(y.shape[2:]),
                        cycles, fixes)
    return {"group": name, "mr": mr, "nv": nv, "rows": rows, "tiles": tiles, "lanes": lanes,
            "window": not pointwise(k.node), **epilogue(k, k.attrs["x_zp"])}


def weights(k, grp, mr: int, w: np.ndarray | None = None):
    """The packed weights (grp.packed) of [M, K] w (default: the node's, in grp's order): in
    place of the model's where they are the same bytes (int16 weights for pairs, int8 ones for
    quads, K a multiple of g), else a table."""
    words = grp.packed(grp.ordered(k.node, k.const(1)) if w is None else w, mr)
    dt = k.in_buf(1).dtype
    if np.dtype(dt).itemsize * grp.g == 4:
        return pack_constant(k, 1, words.view(dt), f"[{mr}-block][K/{grp.g}][{mr}] {grp.name}")
    return k.add_table(words, grp.name)


def bias_of(k, grp):
    """The bias pointer: the model's, or a table of the one u8 quads need (groups.Quads)."""
    full = grp.bias(k.const(1), k.const(2))
    return k.inp(2) if full is None else k.add_table(full, "bias for u8 quads")


def store_lanes(k, v, off, lanes: int):
    """The first `lanes` lanes of vector v at out[off...] (all: one store)."""
    b = k.b
    et = v.type.element
    if lanes == v.type.count:
        b.store(v, cg.gep(b, k.out(), off, et), align=1)
        return
    for e in range(lanes):
        b.store(b.extract_element(v, ir.Constant(I32, e)),
                cg.gep(b, k.out(), b.add(off, k.c(e)), et))


def finisher(k, vec, oc, bias, q, s, wide: bool, ties: bool, attrs=None):
    """v (an int32 vector of output channel oc's sums) -> the output's vector: the bias (table
    `bias`; None: the sums started from it), the QConv's requantization (q and s: Python ints
    where every channel shares them, else None: loaded from its tables) and clamp, truncated to
    the output type. attrs: runtime_zp's, where the caller asked for them first."""
    b = k.b
    bias = None if bias is None else vec.isplat(k.load(bias, oc, np.int32))
    q = q if q is not None else vec.isplat(k.load(k.inp(3), oc, np.int32))
    s = s if s is not None else vec.isplat(k.load(k.inp(4), oc, np.int32))
    et = cg.llvm_type(k.out_buf().dtype)
    attrs = attrs or runtime_zp(k, vec.isplat)

    def finish(*vs):
        """One vector of the outputs of the accumulators vs, their lanes in order: two
        neighbouring vectors of a channel leave through one pair of packs and one store
        (AVX2: 5 instructions for 16 outputs where each vector of 8 took 4)."""
        cs = [clamp(b, requantize(b, v if bias is None else b.add(v, bias), q, s,
                                  k.attrs["mode"], wide, ties), attrs) for v in vs]
        both = cs[0] if len(cs) == 1 else b.shuffle_vector(cs[0], cs[1], ir.Constant(
            ir.VectorType(I32, 2 * vec.w), list(range(2 * vec.w))))
        return b.trunc(both, ir.VectorType(et, len(cs) * vec.w))
    return finish


class PairAcc(Acc):
    """MR x NV int32 accumulators carried as phis (Acc's loop), added to by the grouping's
    multiply-add."""

    def __init__(self, vec: Vec, grp, mr: int, nv: int):
        self.vec, self.grp, self.mr, self.nv = vec, grp, mr, nv
        vt = ir.VectorType(I32, vec.w)
        self.vals = [[cg.const(vt, 0) for _ in range(nv)] for _ in range(mr)]

    def madd(self, rows, cols, act_rows: bool = False):
        """acc[i][j] += the products of rows[i] and cols[j] (int32 vectors of groups; the
        activations are the columns, or the rows with act_rows)."""
        b = self.vec.b
        for i, r in enumerate(rows):
            for j, c in enumerate(cols):
                act, wt = (r, c) if act_rows else (c, r)
                self.vals[i][j] = self.grp.madd(b, self.vals[i][j], act, wt)


class PairsEmitter(LanesTile):
    def __init__(self, k, p):
        self.k, self.b = k, k.b
        self.vec = Vec(k, simd_of(k.caps))
        # the output zero point's table ahead of the others, whose sizes may depend on the
        # weights (Quads16's corrections): at one offset in every kernel of this shape
        self.attrs = runtime_zp(k, self.vec.isplat)
        # ... and beside it a multiplier every channel shares (per-tensor weights, onnxruntime's
        # default), so that layers of one shape emit one code (module._share, and Kernel.
        # taken_over, whose key then holds no immediate q); microcontrollers keep it in the code
        self.q, self.s = channel_params(k, 3), channel_params(k, 4)
        self.q_code = self.q  # the multiplier the code holds (None: read from a table)
        if self.q is not None and not k.caps.memory_first:
            self.q, self.q_code = self.vec.isplat(k.runtime_int(self.q, "y_q")), None
        self.w = self.vec.w
        self.mr, self.nv, self.nt = p["mr"], p["nv"], p["tiles"]
        self.wide, self.ties = p["wide"], p["ties"]
        x, y = k.in_buf(0), k.out_buf()
        self.xdt = x.dtype
        self.grp = grouping(p["group"], k.caps, x.dtype, k.attrs["x_zp"])
        self.g = self.grp.g
        self.n, self.c, self.m = x.shape[0], x.shape[1], y.shape[1]
        self.taps = math.prod(k.in_buf(1).shape[2:])
        self.c2 = self.grp.steps(self.c * self.taps)  # int32 lanes per position
        self.npos = math.prod(y.shape[2:])
        self.in_plane = math.prod(x.shape[2:])
        # a strided 1x1: per output position (oh, ow), its input's offset in a plane
        win = k.node.opdef.window(k.node)
        self.strided = any(v != 1 for v in win.strides)
        self.wo, self.wi = y.shape[-1], x.shape[-1]
        self.sh, self.sw = ((1,) + tuple(win.strides))[-2:]
        self.nr = self.nv * self.w
        self.lanes = p.get("lanes", 0)  # output channels a block with them on the lanes
        self.wp = weights(k, self.grp, self.lanes or self.mr)
        self.bias = bias_of(k, self.grp)
        # the input channels' plane offsets in the packed order, ahead of the corrections
        # (whose sizes depend on the weights), where quads16 re-pairs them (pair_order.py)
        order = self.grp.order(k.node)
        self.chans = None if order is None else \
            k.add_table((order * self.in_plane).astype(np.int32), "quads16 channel order")
        self.fixes = self.grp.tables(k) if isinstance(self.grp, Quads16) else None
        self.stage = self.lanes_stage() if self.lanes else None
        if scratch_of(k) is not None:
            self.buf = k.out(1)
        else:
            self.buf = cg.stack_block(self.b, I32, self.nt * self.c2 * self.nr, "pairs")

    def emit(self):
        k, b = self.k, self.b
        full, rest = divmod(self.npos, self.nr)
        panels, left = divmod(full, self.nt)
        with k.for_range(self.n, name="n") as n:
            if panels == 1:
                self.panel(n, k.c(0), self.nt, None)
            elif panels > 1:
                with k.for_range(panels, name="panel") as pi:
                    self.panel(n, b.mul(pi, k.c(self.nt * self.nr)), self.nt, None)
            if left:
                self.panel(n, k.c(panels * self.nt * self.nr), left, None)
            if rest:
                self.panel(n, k.c(full * self.nr), 1, rest)

    def tiles(self, count, body):
        if count == 1:
            body(self.k.c(0))
        else:
            with self.k.for_range(count, name="t") as t:
                body(t)

    def panel(self, n, p0, count, last):
        self.pack(n, p0, count, last)
        b, k, w = self.b, self.k, self.w

        def spots(t):
            q0 = b.add(p0, b.mul(t, k.c(self.nr)))
            return [(b.add(q0, k.c(j * w)), w if last is None else min(w, last - j * w))
                    for j in range(self.nv if last is None else math.ceil(last / w))]

        self.blocks(lambda o0, rows: self.tiles(count, lambda t: self.tile(n, t, o0, rows,
                                                                           spots(t))),
                    lambda o0, chans: self.tiles(count, lambda t: self.lanes_block(
                        n, t, o0, chans, spots(t))))

    def blocks(self, tile, lanes_block):
        """Every block of output channels over the packed tile(s): MR channels a tile, or the
        channels on the lanes (pairs_lanes.py), `lanes` a block."""
        if self.lanes:
            cg.for_runs(self.b, self.m, self.lanes, lanes_block, self.k.intp, "mb")
        else:
            cg.for_runs(self.b, self.m, self.mr, tile, self.k.intp, "mb")

    def acc_of(self, rows: int, cols: int):
        return PairAcc(self.vec, self.grp, rows, cols)

    def _offsets(self, base, count):
        """A strided 1x1's input offsets (within a plane) of the output positions base ...
        base + count (IR values; the same for every channel), and for a whole vector an i1
        that they lie in one output row and the w s bytes from the first in its input row
        (one load then reaches them all)."""
        k, b = self.k, self.b
        out, row = [], None
        for e in range(count):
            p = b.add(base, k.c(e))
            oh = b.udiv(p, k.c(self.wo))
            ow = b.sub(p, b.mul(oh, k.c(self.wo)))
            out.append(b.add(b.mul(oh, k.c(self.sh * self.wi)), b.mul(ow, k.c(self.sw))))
            if not e:  # and the w s bytes from the first lie in its input row
                row = b.icmp_unsigned("<=", b.mul(b.add(ow, k.c(count)), k.c(self.sw)),
                                      k.c(self.wi))
                row = b.and_(row, b.icmp_unsigned("<=", b.add(ow, k.c(count)), k.c(self.wo)))
        return out, (row if count == self.w else None)

    def _gather(self, ch, offs, count):
        """x[ch][offs[e]] for e < count, lane by lane (a vector of w bytes; zeros past)."""
        k, b = self.k, self.b
        v = ir.Constant(ir.VectorType(cg.llvm_type(self.xdt), self.w), [0] * self.w)
        for e in range(count):
            v = b.insert_element(v, k.load(k.inp(0), b.add(ch, offs[e]), self.xdt),
                                 ir.Constant(I32, e))
        return v

    def _strided(self, ch, offs, row):
        """A strided 1x1's whole vector: within one output row whose input row holds the w s
        bytes from its first, one load of them and a byte shuffle; lane by lane otherwise."""
        k, b, w = self.k, self.b, self.w
        et = cg.llvm_type(self.xdt)
        with b.if_else(row) as (then, otherwise):
            with then:
                span = w * self.sw  # (a power of two: one load)
                v = b.load(cg.gep(b, k.inp(0), b.add(ch, offs[0]), et),
                           typ=ir.VectorType(et, span), align=1)
                fast = b.shuffle_vector(v, ir.Constant(v.type, ir.Undefined), ir.Constant(
                    ir.VectorType(I32, w), [e * self.sw for e in range(w)]))
                at_fast = b.block
            with otherwise:
                slow = self._gather(ch, offs, w)
                at_slow = b.block
        v = b.phi(fast.type)
        v.add_incoming(fast, at_fast)
        v.add_incoming(slow, at_slow)
        return v

    def _lanes(self, ch, base, last, strided=None):
        """x[ch][base ...] as the grouping stores it: w lanes, or the `last` valid ones of a
        partial tile (read one by one; the grouping's pad past them); a strided 1x1 reads the
        positions' input offsets (`strided`: _offsets) instead."""
        k, b, w = self.k, self.b, self.w
        et = cg.llvm_type(self.xdt)
        vt = ir.VectorType(et, w)
        ptr = k.inp(0)
        if strided is not None:
            offs, row = strided
            if last is None:
                return self.grp.lanes(b, self._strided(ch, offs, row))
            v = self._gather(ch, offs, last)
        elif last is None:
            return self.grp.lanes(b, b.load(cg.gep(b, ptr, b.add(ch, base), et), typ=vt,
                                            align=1))
        else:
            v = self._gather(b.add(ch, base), [k.c(e) for e in range(last)], last)
        return b.select(ir.Constant(ir.VectorType(cg.I1, w), [e < last for e in range(w)]),
                        self.grp.lanes(b, v), self.grp.pad(w))

    def pack(self, n, p0, count, last):
        """buf[t][cc][0:NR] = the groups (x[g cc + s][p], s < g) for the positions
        p0 + t*NR ...; a C that is no multiple of g ends with pad steps."""
        k, b, w, g = self.k, self.b, self.w, self.g

        def one(t):
            q0 = b.add(p0, b.mul(t, k.c(self.nr)))
            dst = b.mul(t, k.c(self.c2 * self.nr))
            plane = k.c(self.in_plane)
            img = b.mul(n, k.c(self.c * self.in_plane))
            offs = [self._offsets(b.add(q0, k.c(j * w)), w if last is None else
                                  max(0, min(w, last - j * w))) if self.strided else None
                    for j in range(self.nv)]

            def channel(cc, s):
                """The plane offset of step g cc + s's channel (in the packed order)."""
                if self.chans is None:
                    return b.add(img, b.mul(b.add(b.mul(cc, k.c(g)), k.c(s)), plane))
                off = k.load(self.chans, b.add(b.mul(cc, k.c(g)), k.c(s)), np.int32)
                return b.add(img, b.sext(off, k.intp) if k.intp.width > 32 else off)

            def group(cc, have):
                d = b.add(dst, b.mul(cc, k.c(self.nr)))
                for j in range(self.nv):
                    lanes = None if last is None else max(0, min(w, last - j * w))
                    lanes = None if lanes == w else lanes
                    if lanes == 0:
                        self.vec_store(cg.const(ir.VectorType(I32, w), 0), b.add(d, k.c(j * w)))
                        continue
                    base = b.add(q0, k.c(j * w))
                    vs = [self._lanes(channel(cc, s), base, lanes, offs[j])
                          if s < have else self.grp.pad(w) for s in range(g)]
                    self.vec_store(self.grp.interleave(b, vs), b.add(d, k.c(j * w)))
            with k.for_range(self.c // g, name="cc") as cc:
                group(cc, g)
            if self.c % g:
                group(k.c(self.c // g), self.c % g)
        self.tiles(count, one)

    def vec_store(self, v, off):
        self.b.store(v, cg.gep(self.b, self.buf, off, I32), align=4)

    def tile(self, n, t, o0, rows, spots):
        """Output channels o0 .. o0 + rows x the packed tile t, whose vector j holds the
        positions from spots[j] = (offset in the plane, valid lanes); consecutive spots are
        consecutive positions (a panel's, a row's, or whole rows' flat), every one but the last
        whole."""
        k, b, w = self.k, self.b, self.w
        tnv = len(spots)
        acc = PairAcc(self.vec, self.grp, rows, tnv)
        # the sums start from the bias: one vpaddd less per output vector in the epilogue
        acc.vals = [[self.vec.isplat(k.load(self.bias, b.add(o0, k.c(i)), np.int32))] * tnv
                    for i in range(rows)]
        xblk = b.mul(t, k.c(self.c2 * self.nr))
        wblk = b.mul(o0, k.c(self.c2))
        vt = ir.VectorType(I32, w)
        with acc.loop(k, self.c2, name="cc") as cc:
            x0 = b.add(xblk, b.mul(cc, k.c(self.nr)))
            xs = [b.load(cg.gep(b, self.buf, b.add(x0, k.c(j * w)), I32), typ=vt, align=4)
                  for j in range(tnv)]
            wrow = b.add(wblk, b.mul(cc, k.c(rows)))
            ws = [self.vec.isplat(k.load(self.wp, b.add(wrow, k.c(i)), np.int32))
                  for i in range(rows)]
            acc.madd(ws, xs)
        if self.fixes:
            self.grp.correct(k, self.fixes, acc, o0, rows,
                             lambda q, j: b.load(cg.gep(b, self.buf, b.add(b.add(
                                 xblk, b.mul(q, k.c(self.nr))), k.c(j * w)), I32), typ=vt, align=4))
        for i in range(rows):
            oc = b.add(o0, k.c(i))
            finish = finisher(k, self.vec, oc, None, self.q, self.s, self.wide, self.ties,
                              self.attrs)
            plane = b.mul(b.add(b.mul(n, k.c(self.m)), oc), k.c(self.npos))
            j = 0
            while j < tnv:  # spots are consecutive: two whole vectors leave as one
                (at, lanes), two = spots[j], j + 1 < tnv and spots[j][1] == spots[j + 1][1] == w
                store_lanes(k, finish(*(acc.value(i, j + e) for e in range(1 + two))),
                            b.add(plane, at), 2 * w if two else lanes)
                j += 1 + two
