"""QConv 3x3, stride 1, as integer Winograd F(2x2, 3x3) on pmaddwd pairs (x86 without VNNI):
exact, with 2.25x fewer multiplies than the direct kernels (winograd_choice.py: the arithmetic,
when it applies and pays, the weights' transform).

The backend's post-lowering step (select, after conv/winograd_select.py's for float Conv) takes
a QConv marked for x86's integer kernels (pairs.mark) where the model says it pays over the
grouping it would have, or forced (-kernel-variant=QConv:winograd), under the same scratch
budget as the float Winograd: 4U replaces the weights in the constant region (int32 words of
two int16: 32/9 of the int8 bytes), the scratch is a second output the planner places (named
as the float one's, so the manifest's activations_scratch counts it), and the executed
multiply-adds are recorded (ir/macs.py). Per block of tile rows, in that scratch:
  1. input transform: for each pair of input channels and tile row, per vector of 8 tiles of
     the row, the 4 input rows' 4 column phases (one 32-byte load and four byte shuffles) as
     int16 d = x - zp (0 in the padding), V = B^T d B (winograd_transforms, integer adds), the
     two channels' values interleaved into int32 lanes: V[xi][c/2][tile];
  2. per block of MR output channels, the 16 GEMMs M[xi][k][tile] = sum over channel pairs of
     pmaddwd(4U word, V) on MR x NV register tiles (pairs.PairAcc, the Pairs grouping);
  3. output transform of those MR channels: A^T M A, >> 2 (exact: 4 S), the bias, the QConv's
     requantization and clamp, the two column phases interleaved into 16 output bytes, stored.

A row's last vector of tiles stores lanes past the row's tiles into the next row's slots, which
that row (transformed after it) overwrites; V's and M's rows have room for the last row's."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen import registry
from glowpy.codegen.kernels.conv import winograd_transforms as tf
from glowpy.codegen.kernels.conv.winograd_plan import scratch_max
from glowpy.codegen.kernels.conv.winograd_select import (SCRATCH, live_bytes, packed,
                                                          transformed_weights)
from glowpy.codegen.kernels.int8 import winograd_choice as wc
from glowpy.codegen.kernels.int8.groups import Pairs
from glowpy.codegen.kernels.int8.pairs import (PairAcc, epilogue, finisher, integer, kind,
                                               simd_of, store_lanes)
from glowpy.codegen.kernels.int8.quant import I32
from glowpy.codegen.kernels.int8.taps import channel_params
from glowpy.codegen.kernels.vectors import Vec
from glowpy.ir import planner
from glowpy.ir.program import ACTIVATION, Buffer

I16 = ir.IntType(16)
W = 8  # int32 lanes (AVX2's pmaddwd)


class IntAr:
    """The transforms' arithmetic on integer vectors (F(2x2) has no multiplies)."""

    def __init__(self, b):
        self.b = b

    def add(self, x, y):
        return self.b.add(x, y)

    def sub(self, x, y):
        return self.b.sub(x, y)


def _wanted(caps, node) -> bool:
    """The node is marked for x86's integer kernels and Winograd pays over their grouping, or
    it is forced (and those kernels could run the node)."""
    if not integer(caps, node) or not wc.takes(caps, node):
        return False
    if registry.is_forced("QConv", "winograd"):
        return True
    return bool(node.attrs.get("_pairs")) and registry.allowed("QConv", "winograd") and \
        wc.pays(node, kind(caps, node))


def select(prog, caps):
    """The post-lowering step (the module's first paragraph)."""
    todo = [i for i, ins in enumerate(prog.instrs) if ins.op == "QConv" and ins.node is not None
            and len(ins.outputs) == 1 and _wanted(caps, ins.node)]
    if not todo:
        return prog
    live = live_bytes(prog)
    bound = max(live, default=0)
    forced = registry.is_forced("QConv", "winograd")
    for idx in todo:
        ins = prog.instrs[idx]
        budget = scratch_max(caps) if forced else \
            min(scratch_max(caps), int(bound * (1 + planner.TRANSFORM_GROWTH)) - live[idx])
        block = wc.blocking(caps, ins.node, budget)
        if block is None:
            continue
        w = ins.node.inputs[1].const
        transformed_weights(prog, ins, packed(w, "int8 F(2x2)", lambda: wc.weights(w)),
                            f"4U of F(2x2,3x3) [K/{wc.MR}][16][C/2][{wc.MR}] int16 pairs")
        ins.attrs["winograd"] = dict(rows=block["rows"], tpad=block["tpad"], macs=wc.macs(ins.node))
        ins.outputs = [ins.outputs[0], Buffer(ins.name + SCRATCH, np.dtype(np.int32),
                                              (block["bytes"] // 4,), ACTIVATION)]
        prog.transformed = True
        prog.transform_forced |= forced
    return prog


def plan(k):
    """{"mr", "nv", "rows", "tpad", "wide", "ties"} of a QConv select rewrote; None otherwise."""
    a = k.instr.attrs.get("winograd")
    if not isinstance(a, dict) or len(k.instr.outputs) != 2:
        return None
    return {"mr": wc.MR, "nv": wc.NV, "rows": a["rows"], "tpad": a["tpad"],
            **epilogue(k, k.attrs["x_zp"])}


class WinogradPairs:
    def __init__(self, k, p):
        self.k, self.b = k, k.b
        x, y = k.in_buf(0), k.out_buf()
        self.n, self.c, self.h, self.wd = x.shape
        self.m, self.ho, self.wo = y.shape[1:]
        self.xdt = x.dtype
        win = k.node.opdef.window(k.node)
        self.pt, self.pl = win.pads_begin
        self.th, self.tw = wc.tiles(k.node)
        self.rows, self.tpad, self.mr, self.nv = p["rows"], p["tpad"], p["mr"], p["nv"]
        self.wide, self.ties = p["wide"], p["ties"]
        self.c2 = -(-self.c // 2)
        self.vec = Vec(k, simd_of(k.caps, W))
        self.grp = Pairs(k.caps, x.dtype, k.attrs["x_zp"])
        self.vp = k.out(1)  # V [16][C/2][tpad], then M [16][MR][tpad]
        self.vplane = self.c2 * self.tpad
        self.mp = cg.gep(self.b, self.vp, k.c(16 * self.vplane), I32)
        self.mplane = self.mr * self.tpad
        self.u = k.inp(1)  # 4U (select)
        self.q, self.s = channel_params(k, 3), channel_params(k, 4)
        # a 32-byte window of a row may stray past the input where the region has room
        self.room = k.room_around(k.inp(0), 8)

    def emit(self):
        k, b = self.k, self.b
        full, tail = divmod(self.th, self.rows)
        with k.for_range(self.n, name="n") as n:
            if full:
                with k.for_range(full, name="blk") as blk:
                    self.block(n, b.mul(blk, k.c(self.rows)), self.rows)
            if tail:
                self.block(n, k.c(full * self.rows), tail)

    def block(self, n, r0, rows):
        k, b = self.k, self.b
        with k.for_range(self.c2, name="cp") as cp, k.for_range(rows, name="ri") as rr:
            self.input_row(n, cp, b.add(r0, rr), rr)
        nvec = -(-rows * self.tw // W)

        def channels(o0, count):
            with k.for_range(16, name="xi") as xi:
                cg.for_runs(b, nvec, self.nv,
                            lambda v0, nv: self.gemm(xi, o0, count, b.mul(v0, k.c(W)), nv),
                            k.intp, "tv")
            with k.for_range(count, name="i") as i, k.for_range(rows, name="ro") as rr:
                self.output_row(n, b.add(o0, i), i, b.add(r0, rr), rr)
        cg.for_runs(b, self.m, self.mr, channels, k.intp, "kb")

    # -- 1. V = B^T d B ------------------------------------------------------------------------
    def _phases(self, row, ok, first):
        """The 4 column phases of input row `row` (an offset; `ok`: an i1 that the row lies
        inside the input) for the tiles first .. first + 8 of a row: lane l of phase e is
        column 2 (first + l) + e - pl, as int16 x - zp (0 outside the input)."""
        k, b = self.k, self.b
        et = cg.llvm_type(self.xdt)
        cols = [[2 * (first + l) + e - self.pl for l in range(W)] for e in range(4)]
        valid = [[0 <= x < self.wd for x in ph] for ph in cols]
        zero = cg.const(ir.VectorType(I16, W), 0)
        if not any(map(any, valid)):
            return [zero] * 4
        s = cols[0][0]
        if self.room or (0 <= s and s + 4 * W <= self.wd):
            lo, n = s, 4 * W  # one 32-byte window (past the row: inside the region)
        else:  # a row's edge: its valid columns alone (legalized as a few smaller loads)
            lo = max(s, 0)
            n = min(s + 2 * W + 2, self.wd) - lo
        v = b.load(cg.gep(b, k.inp(0), b.add(row, k.c(lo)), et), typ=ir.VectorType(et, n),
                   align=1)
        raw = [b.shuffle_vector(v, ir.Constant(v.type, ir.Undefined), ir.Constant(
            ir.VectorType(I32, W), [x - lo if ok_ else 0 for x, ok_ in zip(ph, okp)]))
            for ph, okp in zip(cols, valid)]
        out = []
        for v, ok_ in zip(raw, valid):
            v = self.grp.lanes(b, v)  # int16 x - zp
            if not all(ok_):
                v = b.select(ir.Constant(ir.VectorType(cg.I1, W), ok_), v, zero)
            out.append(b.select(ok, v, zero))
        return out

    def input_row(self, n, cp, r, rr):
        """V[xi][cp][rr * tw + t] for the tiles t of tile row r, input channels 2cp, 2cp + 1."""
        k, b = self.k, self.b
        odd = self.c % 2
        vs = []
        for s in range(2):
            c = b.add(b.mul(cp, k.c(2)), k.c(s))
            if s and odd:  # the last pair's second channel is past C: read the first's rows,
                c = b.select(b.icmp_signed("<", c, k.c(self.c)), c, k.c(self.c - 1))
            plane = b.mul(b.add(b.mul(n, k.c(self.c)), c), k.c(self.h * self.wd))
            rows = []
            for a in range(4):
                iy = b.add(b.mul(r, k.c(2)), k.c(a - self.pt))
                ok = b.and_(b.icmp_signed(">=", iy, k.c(0)), b.icmp_signed("<", iy, k.c(self.h)))
                if s and odd:  # ... and count them as zeros
                    ok = b.and_(ok, b.icmp_signed("<", b.add(b.mul(cp, k.c(2)), k.c(1)),
                                                  k.c(self.c)))
                rows.append((b.add(plane, b.mul(b.select(ok, iy, k.c(0)), k.c(self.wd))), ok))
            vs.append(rows)
        slot = b.add(b.mul(cp, k.c(self.tpad)), b.mul(rr, k.c(self.tw)))
        for first in range(0, self.tw, W):
            v = [tf.input_2d(IntAr(b), [self._phases(row, ok, first) for row, ok in rows])
                 for rows in vs]
            for xi in range(16):
                a, e = divmod(xi, 4)
                word = self.grp.interleave(b, [v[0][a][e], v[1][a][e]])
                self.vec_store(word, self.vp,
                               b.add(slot, k.c(xi * self.vplane + first)))

    def vec_store(self, v, ptr, off):
        self.b.store(v, cg.gep(self.b, ptr, off, I32), align=4)

    def vec_load(self, ptr, off):
        return self.b.load(cg.gep(self.b, ptr, off, I32), typ=ir.VectorType(I32, W), align=4)

    # -- 2. M[xi] = 4U[xi] V[xi] ---------------------------------------------------------------
    def gemm(self, xi, o0, rows, t0, nv):
        """M[xi][0:rows][t0 ...] for output channels o0 .. o0 + rows over nv vectors of tiles."""
        k, b = self.k, self.b
        acc = PairAcc(self.vec, self.grp, rows, nv)
        ublk = b.add(b.mul(o0, k.c(16 * self.c2)), b.mul(xi, k.c(self.c2 * rows)))
        vrow = b.add(b.mul(xi, k.c(self.vplane)), t0)
        with acc.loop(k, self.c2, name="cp") as cp:
            x0 = b.add(vrow, b.mul(cp, k.c(self.tpad)))
            xs = [self.vec_load(self.vp, b.add(x0, k.c(j * W))) for j in range(nv)]
            u0 = b.add(ublk, b.mul(cp, k.c(rows)))
            ws = [self.vec.isplat(k.load(self.u, b.add(u0, k.c(i)), np.int32))
                  for i in range(rows)]
            acc.madd(ws, xs)
        mrow = b.add(b.mul(xi, k.c(self.mplane)), t0)
        for i in range(rows):
            for j in range(nv):
                self.vec_store(acc.value(i, j), self.mp,
                               b.add(mrow, k.c(i * self.tpad + j * W)))

    # -- 3. A^T M A >> 2, bias, requantization -------------------------------------------------
    def output_row(self, n, oc, i, r, rr):
        k, b = self.k, self.b
        finish = finisher(k, self.vec, oc, k.inp(2), self.q, self.s, self.wide, self.ties)
        plane = b.mul(b.add(b.mul(n, k.c(self.m)), oc), k.c(self.ho * self.wo))
        slot = b.add(b.mul(i, k.c(self.tpad)), b.mul(rr, k.c(self.tw)))
        two = cg.const(ir.VectorType(I32, W), 2)
        for first in range(0, self.tw, W):
            x = [[self.vec_load(self.mp, b.add(slot, k.c((4 * a + e) * self.mplane + first)))
                  for e in range(4)] for a in range(4)]
            for dy, y in enumerate(tf.output_2d(2, IntAr(b), x)):
                out = [finish(b.ashr(v, two)) for v in y]
                both = b.shuffle_vector(out[0], out[1], ir.Constant(
                    ir.VectorType(I32, 2 * W), [h * W + l for l in range(W) for h in range(2)]))
                oy = b.add(b.mul(r, k.c(2)), k.c(dy))
                lanes = min(2 * W, self.wo - 2 * first)
                at = b.add(plane, b.add(b.mul(oy, k.c(self.wo)), k.c(2 * first)))
                if dy and self.ho % 2:  # the last tile row's second row is past the plane
                    with cg.if_then(b, b.icmp_signed("<", oy, k.c(self.ho))):
                        store_lanes(k, both, at, lanes)
                else:
                    store_lanes(k, both, at, lanes)


@registry.variant("QConv", "winograd", rank=33, plan=plan)
def emit(k, p):
    WinogradPairs(k, p).emit()

