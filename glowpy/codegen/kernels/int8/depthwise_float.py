"""Depthwise QConv on float vectors, int8 in and int8 out (QConv variant `depthwise_float`).

Where time comes first, float_exact.py turned a depthwise QConv into DequantizeLinear, the
float depthwise kernel and QFinish: three passes, the middle tensors float (4x the bytes),
and the two conversions cost as much as the products. MobileNetV2 int8 on the 2-core Zen 3
(AVX2 code, -instrument-profile, min of 6 rounds): its 17 depthwise layers' DequantizeLinear
0.98 M cycles and QFinish 1.78 against the float kernels' 1.92.

Here one pass does it, with the float depthwise kernel's tiles (conv/depthwise.py, the same
instructions and tilings): each input plane is converted to floats (x - x_zp, exact) into one
of two slots of a stack strip, one plane ahead of the tiles that read it; the products summed
in float32 are exact integers (float_exact.exact_chunks: every partial sum below 2**24), and
each accumulator vector goes out through the QConv's own bias, requantization and clamp
(pairs.finisher) as one narrow store. The slots have margins on both sides, so every edge tap
blends its lanes away instead of a masked load.

Planes are processed one (batch, channel) at a time, each written within its own iteration
and no input plane read before its own (the streaming contract of CONTRIBUTING.md)."""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen import registry
from glowpy.codegen.kernels import gaps
from glowpy.codegen.kernels.conv import depthwise_phase
from glowpy.codegen.kernels.conv.depthwise import DepthwiseEmitter, estimate
from glowpy.codegen.kernels.int8.groups import byte
from glowpy.codegen.kernels.int8.pairs import epilogue, finisher, store_lanes
from glowpy.codegen.kernels.int8.taps import channel_params
from glowpy.codegen.kernels.tiles import window_shape
from glowpy.codegen.kernels.vectors import Simd, load_bytes

# floats of the stack strip at most, margins included: the stack stays small and bounded
# (docs/cortex_m7.md; tensors live in the activation region). Two 56x56 planes with their
# margins take 6,400 (32 KiB holds 8,192). Larger strips, up to REGION_FLOATS, take a gap of the
# activation region that no buffer occupies while the layer runs, or a place past its end
# (place): two 112x112 planes take 25,990 floats (102 KiB), where the float rewrite's tensors
# were 4x the int8 input and output (MobileNetV2's 112x112 layers: 6.4 and 4.8 MB). Measured
# on the Zen 4 (AVX2 code, -instrument-profile): MobileNetV2 int8's two 112x112 depthwise layers
# 203 + 291 us as three kernels (their DequantizeLinear 50 + 108 and QFinish 55 + 42).
STRIP_FLOATS = 8192
REGION_FLOATS = 65536  # 256 KiB, as pairs.TILE_MAX: larger planes keep the float rewrite
SCRATCH = "_strip"


def _margin(s, w: int) -> int:
    """Floats an edge tap's window may stray before or after the plane: a kernel row's span and
    a vector's strided window, as DepthwiseEmitter's `reach` counts them (rows above or below
    the plane are never read)."""
    return s.pt * s.win + s.pl + s.kw * s.dw + (w - 1) * s.sw + 2 * w


def _slot(s, w: int) -> int:
    """Floats of one plane's slot in the strip, with its margins."""
    return s.hin * s.win + 2 * _margin(s, w)


def _shape(node):
    w = node.inputs[1]
    s = window_shape(node, node.inputs[0].shape, w.shape)
    if s is None or s.cg != 1 or s.mg != 1 or s.kh * s.kw == 1:
        return None
    return s


def phase_choice(caps, node):
    """("phase", R, NV) for a strided 2-D layer where conv/depthwise_phase.py's tiling, its
    copy included, is estimated cheaper than the plain tiles with the plane's conversion into
    the strip (the float kernel's rule, plus that pass): its copy of each input plane into
    phase-split rows converts as it copies (QPhaseEmitter), and no strip is needed. Else
    None."""
    simd = Simd.of(caps)
    s = _shape(node)
    if simd.width == 1 or s is None or s.rank != 2 or s.sw == 1:
        return None
    cost, choice = depthwise_phase.estimate(s, simd)
    if depthwise_phase.geometry(s, simd.width, choice[1])[0] is None:
        return None
    # the plain tiles read a strip the plane was first converted into: its vectors at the
    # copy's price each
    convert = math.ceil(s.hin * s.win / simd.width) * depthwise_phase.COPY[simd.pairs_in_lanes][0]
    return choice if cost < estimate(s, simd)[0] + convert else None


def strip_floats(caps, node) -> int | None:
    """Floats of the two plane slots (0 for phase_choice's layers, which take none), or None
    where the node is not a depthwise window or the target has no float vectors."""
    simd = Simd.of(caps)
    s = _shape(node)
    if simd.width == 1 or s is None:
        return None
    return 0 if phase_choice(caps, node) else 2 * _slot(s, simd.width)


def plan_for(caps, node):
    """The tiling (phase_choice, else conv/depthwise.estimate) where two plane slots fit
    REGION_FLOATS, or None."""
    need = strip_floats(caps, node)
    if need is None or need > REGION_FLOATS:
        return None
    return phase_choice(caps, node) or estimate(_shape(node), Simd.of(caps))[1]


def takes(caps, node) -> bool:
    """A depthwise QConv (one input and one output channel per group, more than one tap, one
    or two spatial dims) with constant weights, bias and requantization, 8-bit input and
    output, whose sums float32 holds exactly, on a float vector target, with a tiling whose
    strip fits REGION_FLOATS (on the stack, or in the activation region: place)."""
    from glowpy.ir.passes.quant.float_exact import exact_chunks
    if node.op != "QConv" or not registry.allowed(node.op, "depthwise_float"):
        return False
    x, y = node.inputs[0], node.outputs[0]
    eight = (np.dtype(np.int8), np.dtype(np.uint8))
    if np.dtype(x.dtype) not in eight or np.dtype(y.dtype) not in eight or \
            any(v is None or v.const is None for v in node.inputs[1:5]):
        return False
    if exact_chunks(node) != [0, 1] or node.attrs["group"] != x.shape[1]:
        return False
    return plan_for(caps, node) is not None


def mark(caps, node) -> bool:
    """Where time comes first (catalog.late_rewrites): marks a QConv this kernel takes, which
    the float rewrite then leaves integer."""
    if not takes(caps, node):
        return False
    node.attrs["_depthwise_float"] = 1
    return True


def place(prog, caps) -> None:
    """catalog.post_planning: the strip of a marked layer whose slots pass STRIP_FLOATS in a gap
    of the activation region, or past its end where no gap has room (the region grows by the
    largest such strip: each lives during its own instruction only)."""
    def wants(ins):
        node = ins.node
        if ins.op != "QConv" or len(ins.outputs) != 1 or node is None or \
                not node.attrs.get("_depthwise_float"):
            return None
        need = strip_floats(caps, node)
        return None if need is None or need <= STRIP_FLOATS else \
            (4 * need, SCRATCH, "float32", 64)
    gaps.place(prog, wants, grow=lambda ins: True)


def _scratch(k):
    outs = k.instr.outputs
    return outs[1] if len(outs) == 2 and outs[1].name.endswith(SCRATCH) else None


def plan(k):
    if not (k.node.attrs.get("_depthwise_float") or
            registry.is_forced("QConv", "depthwise_float")) or not takes(k.caps, k.node):
        return None
    if strip_floats(k.caps, k.node) > STRIP_FLOATS and _scratch(k) is None:
        return None  # a strip past the stack's budget that place() did not give
    return {"tiling": plan_for(k.caps, k.node), **epilogue(k, k.attrs["x_zp"])}


class Int8Tiles:
    """The int8 side of the float depthwise tiles: float weights, and each channel's accumulator
    vectors out through the QConv's own bias, requantization and clamp (pairs.finisher) as one
    narrow store."""

    def int8_setup(self, k, p):
        self.bias = None  # (the int32 bias comes after the conversion, in finish)
        self.qbias = k.inp(2)
        self.wsrc = k.add_table(k.const(1).astype(np.float32).reshape(-1), "float weights")
        self.xt = cg.llvm_type(k.in_buf(0).dtype)
        self.signed = np.dtype(k.in_buf(0).dtype) == np.dtype(np.int8)
        self.zp = k.attrs["x_zp"]
        self.q, self.s_ = channel_params(k, 3), channel_params(k, 4)
        self.wide, self.ties = p["wide"], p["ties"]

    def enter_channel(self):
        _, oc = self.lead
        self.finish_fn = finisher(self.k, self.vec, oc, self.qbias, self.q, self.s_,
                                  self.wide, self.ties)

    def floats(self, v, ity, fty):
        """Integer inputs v (a vector or a scalar) less x_zp, as floats (exact)."""
        b = self.b
        v = b.sext(v, ity) if self.signed else b.zext(v, ity)
        return b.sitofp(b.sub(v, cg.const(ity, self.zp)), fty)

    def finish(self, acc, p0, mask):
        b = self.b
        lanes = self.vec.w if mask is None else sum(mask)
        if lanes == 0:
            return
        assert mask is None or all(mask[:lanes]), "depthwise stores keep a prefix of lanes"
        y = self.finish_fn(b.fptosi(acc, self.vec.ity))
        store_lanes(self.k, y, b.add(self.ob, p0), lanes)


class QDepthwiseEmitter(Int8Tiles, DepthwiseEmitter):
    """The float depthwise tiles over two plane slots of a stack strip: while a plane's tiles
    run, the next plane is in the other slot, converted in the previous iteration. Converted
    right before its own tiles instead, MobileNetV2 int8 took 7.58 ms against 7.23 and VWW
    int8 259 us against 253 (the tiles' unaligned loads then wait for the conversion's
    stores); converting more planes ahead measured the same as one (Zen 3, AVX2 code,
    interleaved)."""

    def __init__(self, k, p):
        s = _shape(k.node)
        super().__init__(k, s, p["tiling"])
        self.int8_setup(k, p)
        w = self.vec.w
        self.margin, self.slot = _margin(s, w), _slot(s, w)
        self.room = (True, True)  # the slots' margins: every edge load may blend
        if _scratch(k) is not None:
            strip = k.out(1)
        else:
            strip = cg.alloca_in_entry(self.b, ir.ArrayType(cg.F32, 2 * self.slot), "strip")
            strip.align = 32
            strip.type = cg.PTR
        self.x, self.src = strip, k.inp(0)
        # zeros first: the margins are never written, and an edge tap's blended-away lanes
        # then read zeros rather than whatever the stack held
        with k.for_range(2 * self.slot // w, name="zero") as i:
            self.vec.store(self.vec.zero(), strip, self.b.mul(i, k.c(w)))

    def enter_plane(self):
        k, b, s = self.k, self.b, self.s
        n, oc = self.lead
        self.enter_channel()
        plane, total = s.hin * s.win, s.n * s.c
        g = b.add(b.mul(n, k.c(s.c)), oc)  # the plane's index; self.xb is its input offset
        odd = b.and_(g, k.c(1))
        with cg.if_then(b, b.icmp_signed("==", g, k.c(0))):
            self.convert(self.xb, k.c(0))
        with cg.if_then(b, b.icmp_signed("<", g, k.c(total - 1))):
            self.convert(b.add(self.xb, k.c(plane)), b.xor(odd, k.c(1)))
        self.xb = b.add(b.mul(odd, k.c(self.slot)), k.c(self.margin))

    def convert(self, src, slot):
        """Slot `slot` (an IR value) = the input plane at src, less x_zp, as floats."""
        k, b, vec, s = self.k, self.b, self.vec, self.s
        w, count = vec.w, s.hin * s.win
        base = b.add(b.mul(slot, k.c(self.slot)), k.c(self.margin))

        def one(i, ty, wid, fty):
            v = b.load(cg.gep(b, self.src, b.add(src, i), self.xt), typ=ty, align=1)
            b.store(self.floats(v, wid, fty), cg.gep(b, self.x, b.add(base, i), cg.F32), align=4)
        full = count // w
        if full:
            with k.for_range(full, name="cv") as i:
                one(b.mul(i, k.c(w)), ir.VectorType(self.xt, w), vec.ity, vec.ty)
        for i in range(full * w, count):
            one(k.c(i), self.xt, cg.I32, cg.F32)


class QPhaseEmitter(Int8Tiles, depthwise_phase.PhaseEmitter):
    """Strided layers (phase_choice) on conv/depthwise_phase.py's tiles: its copy of each
    block's input rows into phase-split rows reads the int8 bytes (one window of stride x w
    bytes a vector of each phase, the padding read as x_zp) and stores their floats less x_zp,
    so the conversion costs no pass of its own. MobileNetV2 int8's stride-2 layers through the
    strip took 1.2-1.7x onnxruntime's time (AVX2 code on the Zen 5, layer_profile.py)."""

    def __init__(self, k, p):
        super().__init__(k, _shape(k.node), p["tiling"])
        self.int8_setup(k, p)
        s, w = self.s, self.vec.w
        # masked-off bytes of a window stray at most the window past the row
        self.bytes_room = k.room_around(k.inp(0), math.ceil(w * s.sw / 4))

    def enter_plane(self):
        self.enter_channel()

    def phase_loads(self, at, mask):
        b, s, vec = self.b, self.s, self.vec
        w, n = vec.w, vec.w * self.s.sw
        raw = load_bytes(self.k, self.k.inp(0), at, n, mask[:n], byte(self.zp), self.bytes_room)
        f = self.floats(raw, ir.VectorType(cg.I32, n), ir.VectorType(cg.F32, n))
        undef = ir.Constant(f.type, ir.Undefined)
        return [b.shuffle_vector(f, undef, ir.Constant(ir.VectorType(cg.I32, w),
                                                      [l * s.sw + p for l in range(w)]))
                for p in range(s.sw)]


@registry.variant("QConv", "depthwise_float", rank=28, plan=plan)
def emit(k, p):
    (QPhaseEmitter if p["tiling"][0] == "phase" else QDepthwiseEmitter)(k, p).emit()
