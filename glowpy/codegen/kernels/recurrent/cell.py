"""RecurrentCell: one direction of an LSTM, GRU or RNN over input projections that a Gemm
computed for all time steps beforehand (glowpy/ir/passes/recurrent.py). Per time step:

1. the hidden-state product h[batch, H] x R^T[H, gates*H] as register tiles of MR batch rows x
   NV vectors of gate columns (tiles.choose_tile, accumulators.Acc: the Gemm kernel's
   machinery, at the target's vector width; scalar on the Cortex-M7), stored to the planned
   scratch output; GRU without linear_before_reset adds a second product (r * h) x Rh^T;
2. the gates fused, one vector of hidden units at a time: projections + product (+ peepholes),
   clip, activations (mathfn: no libm), the new cell and hidden states written to Y_h/Y_c
   (which hold the state between steps) and to Y.

Sequence lengths are compile-time constants: a batch row past its length keeps its state and
its Y rows stay zero (Y is cleared first); the loop stops at the longest sequence."""
from __future__ import annotations

import numpy as np

from glowpy.codegen import cgutils as cg
from glowpy.codegen import mathfn
from glowpy.codegen.kernels.accumulators import Acc, const_input, pack_constant, pack_panels
from glowpy.codegen.kernels.elementwise.arith import fmax, fmin, scalar
from glowpy.codegen.kernels.tiles import choose_tile
from glowpy.codegen.kernels.vectors import Simd, Vec
from glowpy.codegen.registry import emits
from glowpy.ir.ops.recurrent import RecurrentCell


def activation(k, act, x):
    """ONNX recurrent activation (name, alpha, beta) on a float or vector value. Sigmoid and
    Tanh, the usual gates, are mathfn's accurate forms (<= 2 ulp). The rational forms
    (mathfn.rational: one division each, as onnxruntime's own cells) took a biLSTM's gates
    (seq 64, batch 4, hidden 128, AVX2 Zen 3) from 0.39 to 0.18 M cycles a direction, but their
    2.7e-7 absolute error fails the ONNX node test test_gru_seq_length (outputs near 1e-7,
    atol 1e-7)."""
    name, alpha, beta = act
    b, f = k.b, (lambda v: cg.const(x.type, v))
    if name == "Sigmoid":
        return mathfn.sigmoid(b, x)
    if name == "Tanh":
        return mathfn.tanh(b, x)
    if name == "Affine":
        return b.fadd(b.fmul(x, f(alpha)), f(beta))
    if name == "ThresholdedRelu":
        return b.select(b.fcmp_ordered(">", x, f(alpha)), x, f(0.0))
    if name == "ScaledTanh":
        return b.fmul(f(alpha), mathfn.tanh(b, b.fmul(x, f(beta))))
    if name == "Softplus":
        return mathfn.softplus(b, x)
    if name == "Softsign":  # (arith's Softsign declares llvm.fabs for scalar types only)
        return b.fdiv(x, b.fadd(f(1.0), mathfn.fabs(b, x)))
    return scalar(b, name, {"alpha": alpha, "beta": beta}, np.float32, [x], k.caps)


class Cell:
    def __init__(self, k):
        self.k, self.b = k, k.b
        a = k.attrs
        self.kind, self.acts, self.clip = a["kind"], a["acts"], a["clip"]
        self.reverse, self.lens, self.lbr = a["reverse"], a["lens"], a["lbr"]
        self.seq, self.batch, self.gh = k.in_buf(0).shape
        self.hid = k.in_buf(1).shape[0]
        self.vec = Vec(k, Simd.of(k.caps))
        # the gates on up to four registers per IR vector (Simd.widened): one vector's chain
        # of activations is long and latency-bound, four side by side overlap (biLSTM seq 64,
        # batch 4, hidden 128 on an AVX2 Zen 3: the gates of a direction 0.57 -> 0.39 M cycles)
        self.gv = Vec(k, Simd.of(k.caps).widened(self.hid))
        outs = len(k.instr.outputs)
        self.y, self.h = k.out(0), k.out(1)
        self.c = k.out(2) if self.kind == "LSTM" else None
        self.scr = k.out(outs - 1)
        self.sw = k.out_buf(outs - 1).shape[1]

    # -- helpers ------------------------------------------------------------------------------
    def lanes(self, count, body):
        """body(j0, mask) over `count` floats in vectors (a masked tail)."""
        k, w = self.k, self.gv.w
        full, tail = divmod(count, w)
        if full:
            with k.for_range(full, name="j") as i:
                body(self.b.mul(i, k.c(w)), None)
        if tail:
            body(k.c(full * w), tuple(l < tail for l in range(w)))

    def fill(self, dst, src, count):
        """dst[0:count] = src[0:count] (src None: zeros)."""
        vec = self.gv
        self.lanes(count, lambda j, m: vec.store(
            vec.zero() if src is None else vec.load(src, j, m), dst, j, m))

    def act(self, i, x, clip=True):
        if clip and self.clip is not None:
            c = self.clip
            x = fmin(self.b, fmax(self.b, x, cg.const(x.type, -c)), cg.const(x.type, c))
        return activation(self.k, self.acts[i], x)

    # -- the hidden-state product -------------------------------------------------------------
    def ranges(self):
        """The column ranges of RT the products cover, each with its tile (MR, NV)."""
        hid = self.hid
        cols = [(0, 2 * hid), (2 * hid, hid)] if self.kind == "GRU" and not self.lbr else \
            [(0, self.gh)]
        return [(c0, n) + choose_tile(self.vec.simd, self.batch, n, 1)[:2] for c0, n in cols]

    def pack(self):
        """A constant RT re-laid out in panels of each range's tile width (pack_panels, as the
        Gemm kernel packs B): a tile's K rows are consecutive, so the per-step stream through
        R is sequential (measured on an AVX2 EPYC, LSTM seq 100, input and hidden 128: batch 1
        0.59 -> 0.50 ms, batch 8 3.59 -> 3.13 ms)."""
        rt = const_input(self.k, 1)
        if rt is None:
            return None
        w = self.vec.w
        return pack_constant(self.k, 1, np.concatenate(
            [pack_panels(rt[:, c0:c0 + n], nv * w) for c0, n, _, nv in self.ranges()]), "packed_rt")

    def product(self, a_ptr, a_col, a_stride, col0, ncols):
        """scr[b, col0:col0+ncols] = A[b, :H] x RT[:, col0:col0+ncols] for every batch row b,
        A's row b at a_ptr[b*a_stride + a_col]."""
        k, b, vec = self.k, self.b, self.vec
        w = vec.w
        mr, nv = next((mr, nv) for c0, n, mr, nv in self.ranges() if c0 == col0)
        nb = nv * w
        packed = self.packed is not None

        def tile(m0, rows, n0, width):
            nvp = -(-width // w)
            masks = [tuple(j * w + l < width for l in range(w)) for j in range(nvp)]
            acc = Acc(vec, rows, nvp)
            arow = [b.add(b.mul(b.add(m0, k.c(i)), k.c(a_stride)), k.c(a_col)) for i in range(rows)]
            with acc.loop(k, self.hid, name="kk") as kk:
                av = [k.load(a_ptr, b.add(r, kk), np.float32) for r in arow]
                if packed:  # the range's panels start at col0*H, the tile's at + n0*H
                    boff = b.add(b.mul(b.add(n0, k.c(col0)), k.c(self.hid)),
                                 b.mul(kk, k.c(width)))
                else:
                    boff = b.add(b.mul(kk, k.c(self.gh)), b.add(n0, k.c(col0)))
                acc.fma(av, [vec.load(self.packed if packed else k.inp(1),
                                      b.add(boff, k.c(j * w)), masks[j]) for j in range(nvp)])
            for i in range(rows):
                base = b.add(b.mul(b.add(m0, k.c(i)), k.c(self.sw)), b.add(n0, k.c(col0)))
                for j in range(nvp):
                    vec.store(acc.value(i, j), self.scr, b.add(base, k.c(j * w)), masks[j])

        def blocks(count, size, body):
            full, tail = divmod(count, size)
            if full:
                with k.for_range(full, name="blk") as i:
                    body(b.mul(i, k.c(size)), size)
            if tail:
                body(k.c(full * size), tail)

        blocks(ncols, nb, lambda n0, width: blocks(
            self.batch, mr, lambda m0, rows: tile(m0, rows, n0, width)))

    # -- one step -----------------------------------------------------------------------------
    def rows(self, s, body):
        """body(bi, t) for every batch row active at step s (t: its time index)."""
        k, b = self.k, self.b
        with k.for_range(self.batch, name="row") as bi:
            if self.lens is None:
                t = b.sub(k.c(self.seq - 1), s) if self.reverse else s
                body(bi, t)
                return
            ln = b.sext(k.load(self.len_table, bi, np.int32), k.intp)
            with cg.if_then(b, b.icmp_signed("<", s, ln)):
                t = b.sub(b.sub(ln, k.c(1)), s) if self.reverse else s
                body(bi, t)

    def gates(self, bi, t, j, m):
        k, b, vec, hid = self.k, self.b, self.gv, self.hid
        pbase = b.add(b.mul(b.add(b.mul(t, k.c(self.batch)), bi), k.c(self.gh)), j)
        sbase = b.add(b.mul(bi, k.c(self.sw)), j)
        hoff = b.add(b.mul(bi, k.c(hid)), j)

        def pre(g, scr=True):  # projection + hidden product of gate g
            x = vec.load(k.inp(0), b.add(pbase, k.c(g * hid)), m)
            return b.fadd(x, vec.load(self.scr, b.add(sbase, k.c(g * hid)), m)) if scr else x

        hprev = vec.load(self.h, hoff, m)
        if self.kind == "RNN":
            hn = self.act(0, pre(0))
        elif self.kind == "GRU":
            z = self.act(0, pre(0))
            if self.lbr:
                r = self.act(0, pre(1))
                rec = vec.load(self.scr, b.add(sbase, k.c(2 * hid)), m)
                if k.inp(5) is not None:
                    rec = b.fadd(rec, vec.load(k.inp(5), j, m))
                hh = self.act(1, b.fadd(pre(2, scr=False), b.fmul(r, rec)))
            else:
                hh = self.act(1, pre(2))
            one = cg.const(vec.ty, 1.0)
            hn = b.fadd(b.fmul(b.fsub(one, z), hh), b.fmul(z, hprev))
        else:
            hn = self.lstm(pre, j, m, hoff)
        vec.store(hn, self.h, hoff, m)
        if k.attrs["y"]:
            row = b.add(b.mul(t, k.c(self.batch)), bi)
            vec.store(hn, self.y, b.add(b.mul(row, k.c(hid)), j), m)

    def lstm(self, pre, j, m, hoff):
        k, b, vec, hid = self.k, self.b, self.gv, self.hid
        p = k.inp(4)
        cprev = vec.load(self.c, hoff, m)

        def peep(x, g, cv):  # gate order of P: i, o, f
            return x if p is None else b.fadd(x, b.fmul(vec.load(p, b.add(j, k.c(g * hid)), m), cv))

        i = self.act(0, peep(pre(0), 0, cprev))
        if k.attrs["input_forget"]:
            f = b.fsub(cg.const(vec.ty, 1.0), i)
        else:
            f = self.act(0, peep(pre(2), 2, cprev))
        cn = b.fadd(b.fmul(f, cprev), b.fmul(i, self.act(1, pre(3))))
        o = self.act(0, peep(pre(1), 1, cn))
        vec.store(cn, self.c, hoff, m)
        return b.fmul(o, self.act(2, cn, clip=False))

    def reset_product(self, bi, t, j, m):
        """GRU (linear_before_reset=0): scr[b, 3H + j] = r * h, the operand of the h gate."""
        k, b, vec, hid = self.k, self.b, self.gv, self.hid
        pbase = b.add(b.mul(b.add(b.mul(t, k.c(self.batch)), bi), k.c(self.gh)), j)
        sbase = b.add(b.mul(bi, k.c(self.sw)), j)
        x = b.fadd(vec.load(k.inp(0), b.add(pbase, k.c(hid)), m),
                   vec.load(self.scr, b.add(sbase, k.c(hid)), m))
        h = vec.load(self.h, b.add(b.mul(bi, k.c(hid)), j), m)
        vec.store(b.fmul(self.act(0, x), h), self.scr, b.add(sbase, k.c(3 * hid)), m)

    def emit(self):
        k, hid = self.k, self.hid
        n = self.batch * hid
        self.fill(self.h, k.inp(2), n)
        if self.c is not None:
            self.fill(self.c, k.inp(3), n)
        self.packed = self.pack()
        steps = self.seq
        if self.lens is not None:
            self.len_table = k.add_table(np.asarray(self.lens, np.int32), "lens")
            if k.attrs["y"]:
                self.fill(self.y, None, self.seq * n)  # rows past a sequence's end stay zero
            steps = max(self.lens)
        two_products = self.kind == "GRU" and not self.lbr
        if steps:
            with k.for_range(steps, name="step") as s:
                self.product(self.h, 0, hid, 0, 2 * hid if two_products else self.gh)
                if two_products:
                    self.rows(s, lambda bi, t: self.lanes(
                        hid, lambda j, m: self.reset_product(bi, t, j, m)))
                    self.product(self.scr, 3 * hid, self.sw, 2 * hid, hid)
                self.rows(s, lambda bi, t: self.lanes(hid, lambda j, m: self.gates(bi, t, j, m)))
        for bi, ln in enumerate(self.lens or ()):
            if ln == 0:  # onnxruntime: the final states of an empty sequence are zero
                for st in (self.h, self.c):
                    if st is not None:
                        self.fill(cg.gep(self.b, st, k.c(bi * hid), cg.F32), None, hid)


@emits("RecurrentCell")
def emit_cell(k):
    assert k.out_buf(len(k.instr.outputs) - 1).shape[1] == RecurrentCell.scratch_width(
        k.attrs["kind"], k.in_buf(1).shape[0], k.attrs["lbr"])
    Cell(k).emit()
