"""Channel-vectorized float Conv: lanes over output channels, pixels broadcast.

The micro-kernel of conv_fast with the operands' roles swapped: per reduction step it loads
NVO vectors of weights (NVO x width consecutive output channels, packed contiguously at
compile time) and broadcasts the input value of each of NPX output pixels of one output row;
every pixel/vector pair is one accumulator. No lane is ever wasted on pixels, so this wins
where the pixel-vectorized tilings waste lanes -- small planes (7x7, 14x14) and strided
convolutions, whose input columns are not contiguous -- provided the reduction is long enough
to amortize writing the result out: the tile is turned around in registers into per-channel
runs of pixels and stored row-contiguous by a store routine shared by every tile of that shape
(a one-pixel tile scatters). Which input pixels of which kernel column are valid is known at
compile time for every tile position along the row, as in the row tiling, and an edge tile
gets code of its own; where a row has more than channel_edges.EDGE_CODES kinds of them (a long or dilated
kernel with a wide padding) they share one code that checks the taps at run time
(channel_edges.py). The valid kernel rows of an output row are a run-time range, and so are the
kernel columns of a tile whose taps are all valid or checked at run time (a loop: one copy
of a column's code instead of one per column). Deep inputs are read from a channels-last copy
where the activation region has a gap for it (conv/channel_last.py). Only for vector targets
(width > 1)."""
from __future__ import annotations

import math

from llvmlite import ir

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernel import Kernel
from glowpy.codegen.kernels.tiles import (Shape, _blocks, _pack, kh_range, prefetch_ahead,
                                         block_streams, shape_of, tap_range, tiles_outermost)
from glowpy.codegen.kernels.accumulators import Acc, const_input, pack_constant
from glowpy.codegen.kernels.vectors import Simd, Vec
from glowpy.codegen.kernels.conv import channel_chunks, channel_edges, runtime_weights
from glowpy.codegen.kernels.conv.channel_last import channels_last, pitches, scratch_of
from glowpy.codegen.kernels.conv.channel_plan import flat_shape, plan
from glowpy.codegen.kernels.conv.turn import row_start, store_rows
from glowpy.codegen.kernels.vector_epilogue import Finisher, LaneFinisher
from glowpy.codegen.registry import variant
from glowpy.errors import UsageError, show

# kernel columns from which a tile whose taps are all valid (or checked at run time) loops over
# them instead of copying a column's code per column. With both: HiFi-GAN 38.5 -> 21.4 s of
# compile, wav2vec2 17.9 -> 8.1, and run times level (Zen 3, -instrument-profile, sums of
# per-layer minima over 6-8 alternating rounds: HiFi-GAN 0.98, ResNet-18 1.00, ResNet-50 1.02,
# YOLO 0.99, DeepLabV3 1.02, Inception 0.91, wav2vec2 1.01; whole-model timings of HiFi-GAN
# 0.99, DeepLabV3 0.88). A column loop runs kc to cg channel steps per iteration.
LOOP_COLUMNS = 2
INPUT_PREFETCH = 16  # input lines a row tile prefetches for the next row at most (prefetch_input)


class ChanEmitter:
    def __init__(self, k, s: Shape, npx: int, nvo: int, flat: bool = False, nhwc: bool = False,
                 kc: int = 0):
        self.k, self.s, self.b = k, s, k.b
        # nhwc: the tiles read a channels-last copy of each image (channel_last.py)
        self.nhwc = nhwc
        self.pitch = pitches(s.c, s.win)
        # flat: tiles run over the flattened output plane, across row ends (small planes);
        # the stores then see the plane as one row (`so`)
        self.flat = flat
        self.so = flat_shape(s) if flat else s
        self.simd = Simd.of(k.caps)
        self.vec = Vec(k, self.simd)
        self.npx, self.nvo = npx, nvo
        self.ob = nvo * self.vec.w
        # per group and block of OB channels: kernel row, kernel column, channel, OB channels
        w = const_input(k, 1)
        self.wp = pack_constant(k, 1, _pack(w, s, self.ob, (2, 3, 1)), "packed_w") \
            if w is not None else runtime_weights.pack(k, s, self.ob, (2, 3, 1))
        self.fin = LaneFinisher(k, self.vec, 1)
        self.bias = k.inp(2)
        # store through an in-register transpose when a pixel run fits a power-of-two vector
        pw = 1
        while pw < npx:
            pw *= 2
        pw = min(pw, self.vec.w)
        self.transposed = None
        if self.vec.w > 1 and pw > 1:
            tv = Vec(k, Simd(pw, self.simd.registers, self.simd.cheap_masks))
            spatial = k.out_buf().shape[2:]
            lanes = spatial if (self.so.rank == 1 or len(spatial) != 2) else spatial[-1:]
            tfin = Finisher(k, tv, lanes)  # (marks the epilogue done for module.py)
            self.transposed = (tv, tfin)
        self.store_fns, self.tile_buf = {}, None
        self.next_block = 0  # floats to the next block's weights when they are prefetched
        # kc: input channels per reduction chunk (channel_chunks.py); row tiles that turn
        # their result around only
        self.kc = kc if not flat and self.transposed is not None else 0

    def emit(self):
        k, s = self.k, self.s
        with k.for_range(s.n, name="n") as n:
            if self.nhwc:
                channels_last(k, self.vec, k.out(1), n, s.c, s.hin, s.win)
            if s.g == 1:
                self.group(n, k.c(0))
            else:
                with k.for_range(s.g, name="g") as gi:
                    self.group(n, gi)

    def sigs(self):
        return channel_edges.tile_sigs(self.s, self.npx)

    def runs(self):
        """Tile positions along a row sharing a sig (`sigs`): (first, end, sig)."""
        out = []
        for t, sig in enumerate(self.sigs()):
            if out and out[-1][2] == sig and out[-1][1] == t:
                out[-1] = (out[-1][0], t + 1, sig)
            else:
                out.append((t, t + 1, sig))
        return out

    def group(self, n, gi):
        k, b, s = self.k, self.b, self.s
        runs = self.runs()
        full, tail = _blocks(s.mg, self.ob)

        def blocks(body):
            if full == 1:
                body(k.c(0), self.ob)
            elif full > 1:
                with k.for_range(full, name="ob") as ob:
                    body(b.mul(ob, k.c(self.ob)), self.ob)
            if tail:
                body(k.c(full * self.ob), tail)

        def rows(body):
            if s.ho == 1:
                body(k.c(0))
            else:
                with k.for_range(s.ho, name="oh") as oh:
                    body(oh)

        def tiles(oh, body):
            for t0, t1, sig in runs:
                if t1 - t0 == 1:
                    body(oh, k.c(t0 * self.npx), sig)
                else:
                    with k.for_range(t1, start=t0, name="t") as t:
                        body(oh, b.mul(t, k.c(self.npx)), sig)

        def kernel(o0, nch, oh, ow0, sig):
            self.kernel(n, gi, o0, nch, oh, ow0, sig)

        w_bytes, x_bytes = s.mg * s.ktot * 4, s.cg * s.hin * s.win * 4
        plane = s.ho * s.wo
        ntile = math.ceil(plane / self.npx) if self.flat else s.ho * math.ceil(s.wo / self.npx)
        nblk = full + (tail > 0)
        outer = s.g > 1 or tiles_outermost(k.caps, w_bytes, x_bytes, ntile, nblk) \
            or self.copy_outweighs(w_bytes, x_bytes) or block_streams(k.caps, w_bytes, nblk)
        if not outer and full > 1 and ntile > 1:
            self.next_block = self.ob * s.ktot  # (see below)
        if self.flat:  # every tile its own code: the taps each pixel reads are constants
            def flat(q0, o0, nch):
                self.flat_kernel(n, gi, o0, nch, q0, min(self.npx, plane - q0))
            if outer:
                for q0 in range(0, plane, self.npx):
                    blocks(lambda o0, nch, q0=q0: flat(q0, o0, nch))
            else:  # each block's weights streamed once (as below): a 3x3 on 512 channels of
                # 7x7 has 9.4 MB of them, read 10 times from L3 or memory with the tiles
                # outermost, once and then from L2 this way. Zen 4, -mcpu=znver3 code (5 x 2
                # flat tiles), -instrument-profile, min of 10 alternating rounds: ResNet-50's
                # 7x7 3x3 layers 7.0-7.3 -> 5.6-5.7 M cycles (88% of the peak), ResNet-18's
                # 7.0-7.2 -> 6.1-6.2; both models 2% faster
                blocks(lambda o0, nch: [flat(q0, o0, nch) for q0 in range(0, plane, self.npx)])
            return

        if self.kc:
            channel_chunks.emit(self, n, gi, blocks, outer)
        elif outer:
            rows(lambda oh: tiles(oh, lambda oh_, ow0, sig: blocks(
                lambda o0, nch: kernel(o0, nch, oh_, ow0, sig))))
        else:  # stream the weights once, re-read the (smaller) input per block
            # every row re-reads the block's weights from L2 but the first, which waits on
            # memory (a deep layer's weights are not in any cache inside a model): each step
            # also prefetches its own position in the next block, into L2, so the next block's
            # first pass finds them there. Zen 4, -instrument-profile, min of 8-12 alternating
            # rounds: MobileNetV1's 7x7 layers (2-4 MB of weights) 9-11% faster, ResNet-50's
            # 7x7 1x1 and 3x3 layers 6-19% (conv_397 5.27 -> 4.44 M cycles)
            blocks(lambda o0, nch: rows(lambda oh: tiles(
                oh, lambda oh_, ow0, sig: kernel(o0, nch, oh_, ow0, sig))))

    def copy_outweighs(self, w_bytes: int, x_bytes: int) -> bool:
        """Tiles outermost for unchunked tiles on a channels-last copy over twice the weights,
        the weights past the L2: each block would sweep the whole copy again from L3, while in
        the tiles' order the packed weights, one contiguous run, stream once per tile. Zen 3,
        AVX2, one layer, best of 4 alternating rounds, blocks -> tiles outermost: FCN-ResNet50's
        128-channel 3x3/2 on 130x130 (8.7 MB copy, 0.6 MB of weights) 26.8-32.7 -> 19.6-20.0
        ms; conformer's 256-channel 3x3/2 on 199x39 (8 MB, 2.4 MB) 41.6-46.0 -> 30.7 (in the
        model, -instrument-profile, min of 6 rounds: 44.7 -> 32.1, onnxruntime 29.9-31.4);
        wav2vec2's Conv1d 512 k3/2 over 3,199 frames (6.5 MB, 3.1 MB) and Whisper's 384 k3/2 over
        3,000 (4.6 MB, 1.8 MB) level. Copies under twice the weights, or weights that fit the
        L2, kept the blocks outermost: R(2+1)D's 2D layers (0.35-1.4 MB of weights) -4% to +7%
        with the tiles outermost, a 256-channel 3x3/2 on 57x57 (3.3 MB, 2.4 MB) level."""
        l2 = self.k.caps.l2_bytes
        return self.nhwc and not self.kc and bool(l2) and w_bytes > l2 and x_bytes > 2 * w_bytes

    def kh_range(self, oh):
        return kh_range(self.k, self.s, oh)

    def flat_kernel(self, n, gi, o0, nch, q0: int, npx: int):
        """Output positions q0 .. q0+npx-1 of the flattened plane: per tap (static) the input
        offset of each pixel is a constant and a pixel in the padding is skipped."""
        k, s = self.k, self.s
        nvo, chmask, xb, wb = self.bases(n, gi, o0, nch)
        acc = Acc(self.vec, npx, nvo)
        # (offsets in floats: on a channels-last copy a row is not a whole number of columns)
        rp, cp = (self.pitch[1], self.pitch[0]) if self.nhwc else (s.win, 1)
        if self.nhwc:
            xb = k.c(0)  # (one image, one group: flat tiles are for g == 1 only)
        for a in range(s.kh):
            taps = []
            for c in range(s.kw):
                offs = []
                for q in range(q0, q0 + npx):
                    ih = (q // s.wo) * s.sh + a * s.dh - s.pt
                    iw = (q % s.wo) * s.sw + c * s.dw - s.pl
                    offs.append(ih * rp + iw * cp if 0 <= ih < s.hin and 0 <= iw < s.win else None)
                if any(o is not None for o in offs):  # weights of column c: c * cg * nch on
                    taps.append((c * s.cg * nch, offs))
            if taps:
                self.channels(acc, k.b.add(wb, k.c(a * s.kw * s.cg * nch)), xb, nch, chmask,
                              None, taps, col=1)
        self.finish(acc, n, gi, o0, k.c(0), k.c(q0), npx, nvo, chmask)

    def kernel(self, n, gi, o0, nch, oh, ow0, sig):
        npx, valid = sig
        nvo, chmask, xb, wb = self.bases(n, gi, o0, nch)
        acc = Acc(self.vec, npx, nvo)
        self.prefetch_rows(n, gi, o0, nch, oh, ow0)
        self.prefetch_input(xb, oh, ow0, npx)
        self.reduce(acc, xb, wb, nch, chmask, oh, ow0, valid)
        self.finish(acc, n, gi, o0, oh, ow0, npx, nvo, chmask)

    def reduce(self, acc, xb, wb, nch, chmask, oh, ow0, valid, ic=None, prefetch=True):
        """acc += the tile's products over its valid kernel rows and columns and the input
        channels ic = (first, end) (IR values; default: all of the group's); prefetch: the
        weights ahead (channel_chunks: only a segment's first tile)."""
        k, b, s = self.k, self.b, self.s
        npx = acc.mr
        lo, hi = self.kh_range(oh)
        with acc.loop(k, hi, lo, name="kh") as a:
            ih = b.sub(b.add(b.mul(oh, k.c(s.sh)), b.mul(a, k.c(s.dh))), k.c(s.pt))
            if self.nhwc:
                row0 = b.add(b.mul(ih, k.c(self.pitch[1])), b.mul(ow0, k.c(s.sw * self.pitch[0])))
            else:
                row0 = b.add(b.add(xb, b.mul(ih, k.c(s.win))), b.mul(ow0, k.c(s.sw)))
            # kernel columns outside the channel loop: one column's NPX broadcasts are live at
            # a time (shared across columns they would crowd the accumulators out of registers)
            whole = valid is not None and all(all(v) for v in valid)
            if s.kw >= LOOP_COLUMNS and (valid is None or whole):
                # one copy of the column's code in a loop: its taps differ from the next
                # column's by constants alone (or are checked at run time anyway), and a loop
                # of kw iterations around a channel loop of cg costs nothing measurable
                # (an edge tile: only the columns some pixel of it reads inside the row; a
                # long kernel with a wide padding, wav2vec2's positional k128 over 49 frames,
                # has half of each tile's columns in the padding)
                first = b.mul(ow0, k.c(s.sw))
                cols = (0, s.kw) if valid is not None else tap_range(
                    k, b.sub(k.c(s.pl - (npx - 1) * s.sw), first),
                    b.sub(k.c(s.win - 1 + s.pl), first), s.dw, s.kw)
                with acc.loop(k, cols[1], cols[0], name="kw") as c:
                    self.column(acc, a, c, row0, wb, nch, chmask, ow0, valid, ic, prefetch)
            else:
                for c in range(s.kw):
                    if valid is None or any(valid[c]):
                        self.column(acc, a, k.c(c), row0, wb, nch, chmask, ow0, valid, ic,
                                    prefetch, c)

    def column(self, acc, a, c, row0, wb, nch, chmask, ow0, valid, ic, prefetch, cs=None):
        """acc += kernel row a, column c's products (c an IR value; cs: the same column as a
        constant, when the tile's valid taps are those of `valid` (else they are all valid,
        or with valid None checked at run time))."""
        k, b, s, npx = self.k, self.b, self.s, acc.mr
        wcol = b.add(wb, b.mul(b.add(b.mul(a, k.c(s.kw)), c), k.c(s.cg * nch)))
        if valid is None:  # (sigs: an edge tile whose taps are checked at run time)
            offs = channel_edges.masked(self, ow0, c, npx)
        elif cs is None:  # every tap valid: the column's start, then constant offsets
            col = self.pitch[0] if self.nhwc else 1
            row0 = b.add(row0, b.mul(b.sub(b.mul(c, k.c(s.dw)), k.c(s.pl)), k.c(col)))
            offs = [p * s.sw for p in range(npx)]
        else:
            offs = [p * s.sw + cs * s.dw - s.pl if valid[cs][p] else None for p in range(npx)]
        self.channels(acc, wcol, row0, nch, chmask, offs, ic=ic, prefetch=prefetch)

    def prefetch_rows(self, n, gi, o0, nch: int, oh, ow0):
        """The row runs the tile will store (and read as residual), prefetched before its
        reduction: a run per output channel, as many streams as the block has channels
        (conv/pixel.py's prefetch_store). Zen 4, ResNet-50, -instrument-profile, min of 8
        rounds in either order: its 7x7 layers 4-9% faster (the 2048 -> 512 + residual chunks
        0.68 -> 0.63 M cycles, the 3x3s 5.03 -> 4.82)."""
        if self.transposed is None or self.so.rank != 2 or len(self.k.out_buf().shape) != 4:
            return
        k, b, s = self.k, self.b, self.s
        tfin = self.transposed[1]
        oc0 = b.add(b.mul(gi, k.c(s.mg)), o0)
        for c in range(nch):
            oc = b.add(oc0, k.c(c))
            tfin.prefetch([n, oc, oh], ow0, row_start(k, self.so, n, oc, oh, ow0))

    def prefetch_input(self, xb, oh, ow0, npx: int):
        """The input lines the next output row adds to the window, at this tile's columns (the
        last min(sh, kh) kernel rows of row oh + 1, every input channel), prefetched into L1
        during this tile, for planes read directly with at most INPUT_PREFETCH such lines a
        tile. A first layer reads the network's input, which the previous call's weights and
        activations have pushed out of every cache, across more rows at once (3 channels x 7
        kernel rows) than the hardware prefetchers follow: ResNet-18's 3 -> 64 7x7/2 stem on
        224x224, in the model (-instrument-profile, min of 3 rounds, 4 runs alternating, Zen 5)
        1,159-1,183 -> 1,017-1,057 us, onnxruntime 981-1,010. Deeper layers' inputs come
        from the layer before, mostly from L2: ResNet-18's 64 -> 128 and 128 -> 256 3x3/2
        (128 and 256 lines a tile) were level with the same prefetch, so they go without."""
        k, b, s = self.k, self.b, self.s
        new = min(s.sh, s.kh)
        if self.nhwc or self.flat or s.dh != 1 or s.cg * new > INPUT_PREFETCH:
            return
        col = b.add(b.mul(ow0, k.c(s.sw)), k.c((s.kw - 1) * s.dw - s.pl))
        for a in range(s.kh - new, s.kh):
            ih = b.add(b.mul(b.add(oh, k.c(1)), k.c(s.sh)), k.c(a - s.pt))
            row = b.add(b.add(xb, b.mul(ih, k.c(s.win))), col)
            for c in range(s.cg):  # (a prefetch past the plane's end is harmless)
                self.vec.prefetch_run(k.inp(0), b.add(row, k.c(c * s.hin * s.win)), npx * s.sw)

    def bases(self, n, gi, o0, nch):
        """(channel vectors, their lane masks, input base, packed weight base) of a block."""
        k, b, s, w = self.k, self.b, self.s, self.vec.w
        nvo = math.ceil(nch / w)
        chmask = [tuple(v * w + l < nch for l in range(w)) for v in range(nvo)]
        xb = b.mul(b.add(b.mul(n, k.c(s.c)), b.mul(gi, k.c(s.cg))), k.c(s.hin * s.win))
        wb = b.mul(b.add(b.mul(gi, k.c(s.mg)), o0), k.c(s.ktot))
        return nvo, chmask, xb, wb

    def channels(self, acc, wcol, xbase, nch, chmask, offs, taps=((0, None),), ic=None,
                 prefetch=True, col=None):
        """The reduction over the input channels: per channel the block's weight vectors and
        the tile's pixels (constant offsets from xbase; None: padding), for each tap of
        `taps`, (weight offset from wcol, that tap's offsets or None for `offs`): the flat
        tiles run a kernel row's taps in one loop (a third of the loops for LLVM to compile).
        col: floats per unit of offset (default: a column of the layout read)."""
        k, b, vec, w = self.k, self.b, self.vec, self.vec.w
        # planes: a channel is a plane further on; channels last: the next float, a column
        # the number of channels further on
        x, ic_step, pitch = (k.out(1), 1, self.pitch[0]) if self.nhwc else \
            (k.inp(0), self.s.hin * self.s.win, 1)
        col = pitch if col is None else col
        first, end = ic if ic is not None else (0, self.s.cg)
        ahead = prefetch_ahead(len(taps))
        with acc.loop(k, end, first, name="ic") as ic:
            # base pointers, then constant offsets: less IR for LLVM to chew on
            wptr = cg.gep(b, self.wp, b.add(wcol, b.mul(ic, k.c(nch))), cg.F32)
            xptr = cg.gep(b, x, b.add(xbase, b.mul(ic, k.c(ic_step))), cg.F32)
            for wo, tap in taps:
                bv = [vec.load(wptr, wo + v * w, chmask[v]) for v in range(len(chmask))]
                # the weight streams, 4 KiB ahead in all (measured: -15% time on a cold
                # cache), and the next block's into L2 (see group): each line of the step's
                # weights once
                if prefetch:
                    vec.prefetch_run(wptr, wo + ahead, len(chmask) * w)
                    if self.next_block:
                        vec.prefetch_run(wptr, wo + self.next_block, len(chmask) * w, 2)
                acc.fma([None if o is None else channel_edges.splat(self, xptr, o, col)
                         for o in (offs if tap is None else tap)], bv)

    def finish(self, acc, n, gi, o0, oh, ow0, npx, nvo, chmask):
        k, b, s, w = self.k, self.b, self.so, self.vec.w
        vec = self.vec
        if self.transposed is not None:
            self.store_transposed(acc, n, gi, o0, oh, ow0, npx, nvo, chmask)
            return
        spatial = k.out_buf().shape[2:]
        for v in range(nvo):
            oc = b.add(b.add(b.mul(gi, k.c(s.mg)), o0), k.c(v * w))
            bias = vec.load(self.bias, oc, chmask[v]) if self.bias is not None else None
            for p in range(npx):
                val = acc.value(p, v)
                if bias is not None:
                    val = b.fadd(val, bias)
                ow = b.add(ow0, k.c(p))
                if len(spatial) == 2 and s.rank == 2:
                    pos = [oh, ow]
                else:  # a flattened 1x1 convolution: ow is the position in the whole plane
                    pos, rem = [], ow
                    for st in cg.contiguous_strides(spatial):
                        pos.append(b.udiv(rem, k.c(st)) if st > 1 else rem)
                        rem = b.urem(rem, k.c(st)) if st > 1 else k.c(0)
                self.fin.finish_at(val, [n, oc] + pos, chmask[v])

    def store_transposed(self, acc, n, gi, o0, oh, ow0, npx, nvo, chmask):
        """The tile is handed to a store routine shared by every tile of its shape (an
        internal function of its own: one copy of the store code instead of one per edge
        class and block, a good part of the code LLVM has to compile), through a small
        stack buffer that stays in L1."""
        k, b, s = self.k, self.b, self.s
        key = (npx, nvo, tuple(chmask))
        if key not in self.store_fns:
            self.store_fns[key] = self.make_store_fn(npx, nvo, chmask)
        w = self.vec.w
        if self.tile_buf is None:
            buf = cg.alloca_in_entry(b, ir.ArrayType(cg.F32, self.npx * math.ceil(self.ob / w) * w), "tile")
            buf.type = cg.PTR  # an untyped pointer, as the arguments are (llvmlite's view only)
            self.tile_buf = buf
        for p in range(npx):
            for v in range(nvo):
                self.vec.store(acc.value(p, v), self.tile_buf, (p * nvo + v) * w)
        oc0 = b.add(b.mul(gi, k.c(s.mg)), o0)
        b.call(self.store_fns[key], k.params + [k.cbase, self.tile_buf, n, oc0, oh, ow0])

    def make_store_fn(self, npx, nvo, chmask):
        k = self.k
        nops = len(k.params)
        fnty = ir.FunctionType(ir.VoidType(), [cg.PTR] * (nops + 2) + [k.intp] * 4)
        fn = ir.Function(k.module, fnty, f"{k.b.function.name}_store{len(self.store_fns)}")
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        fn.attributes.add("noinline")
        for a, src in zip(fn.args, k.params):
            for attr in src.attributes:
                a.add_attribute(attr)
            a.attributes.align = src.attributes.align
        bb = ir.IRBuilder(fn.append_basic_block("entry"))
        kk = Kernel(bb, k.instr, k.args_from(fn.args[:nops]), k.intp, k.module, k.prog,
                    fn.args[nops], target=k.target, tables=k.tables)
        buf = fn.args[nops + 1]
        n, oc0, oh, ow0 = fn.args[nops + 2:]
        vec = Vec(kk, self.simd)
        vals = [[vec.load(buf, (p * nvo + v) * vec.w) for v in range(nvo)] for p in range(npx)]
        tv = Vec(kk, Simd(self.transposed[0].w, self.simd.registers, self.simd.cheap_masks))
        tfin = Finisher(kk, tv, self.transposed[1].lane_shape)
        tfin.accumulate = False  # the residual is added when the rows are first stored
        store_rows(kk, self.so, vec, tv, tfin, kk.inp(2), vals, n, oc0, oh, ow0, npx, nvo, chmask)
        bb.ret_void()
        return fn


RANK = 30


@variant("Conv", "channel_vectorized", rank=RANK, plan=plan)
def emit(k, p):
    if p.get("nhwc") and scratch_of(k) is None:  # (params forced through the Python API)
        raise UsageError(f"instruction '{show(k.instr.name)}' (Conv): the forced params ask for "
                         "a channels-last copy ('nhwc') but no gap of the activation region "
                         "holds one here; force the params without 'nhwc'")
    ChanEmitter(k, shape_of(k, runtime_weights=True), p["npx"], p["nvo"], p.get("flat", False),
                p.get("nhwc", False), p.get("kc", 0)).emit()
