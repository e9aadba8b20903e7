"""Register-blocked float Gemm and MatMul (gemm_micro): Y = A x B in tiles of MR rows x NV
vectors of columns. Each reduction step broadcasts MR values of A (any layout: transA is just
a stride) and loads NV vectors of one row of B; a constant B is re-laid out at compile time
into panels of NV x width columns, each panel K rows of its columns in the order the kernel
reads them (transB disappears in the packing). Small tiles (the usual batch-1 Gemm: one row)
keep several independent partial sums per accumulator (K unrolled) so the FMA latency does
not serialize the reduction. alpha, beta * C and the fused epilogue are applied to the
accumulator vectors before the single store."""
from __future__ import annotations

import numpy as np

from glowpy.codegen import cgutils as cg
from glowpy.codegen.kernels.gemm.blocking import SCRATCH, product_form, chunk_columns, row_chunk
from glowpy.codegen.kernels.tiles import choose_tile
from glowpy.codegen.kernels.accumulators import Acc, const_input, pack_constant, pack_panels
from glowpy.codegen.kernels.vectors import Simd, Vec
from glowpy.codegen.kernels.vector_epilogue import Finisher
from glowpy.codegen.registry import variant


class GemmEmitter:
    """One (M, K) x (K, N) product per `matrix` call; B packed (constant) or read as rows.

    Column panels are the outer loop and row blocks the inner one, so a panel of packed B is
    fetched from beyond L2 by its first row block and re-read from cache by the others (an A
    too large for the L2 runs in chunks of rows, each over all the panels: row_chunk). Where
    there are other row blocks (M > MR), every reduction step also prefetches its row of the
    next panel into L2 (a line per 16 columns), so that first pass does not wait on L3 or
    memory. With one row block the panels are read once, one after the other: a stream the
    hardware prefetchers follow, and the prefetches only cost instructions. AVX2 code (-mcpu
    znver3) on the Zen 4, -instrument-profile, min of 8 alternating rounds, the models'
    packed MatMuls 3-8% faster; the time summed over the layers: GPT's decoder 0.937 (its
    128 x 256 x 8192 LM head 0.96), BERT-mini 0.936, ViT-Tiny 0.962, ConvNeXt-T 0.950,
    MLP-Mixer 0.954; Swin and the batch-1 Gemm autoencoder level. Prefetched into L1 instead:
    GPT 0.966, MLP-Mixer level (its panels of K = 1024-2048 rows outgrow L1 and evict the
    current one); also with M = MR: the autoencoder 1.11x. AVX-512 code: GPT 0.989, ViT level,
    MLP-Mixer 0.982 (a 16-lane step does twice the multiply-adds per line of B; prefetching
    one line of its two per row made it 1.02-1.03x slower).

    A B computed at run time (attention's Q x K^T and P x V) is read in place, so nothing
    favours its panels; there the row blocks go outermost within column chunks of B that fit
    the L2 (`chunk_columns`), and each output row is written as one run per chunk instead of
    a strip of a few lines per panel. With K = 64 (a head's width) a tile does 64 steps per
    store, and the strips of an output larger than the L2 (1500 x 1500 scores: 9 MB a head,
    a new page every row) cost more than the products: Whisper's 6-head Q x K^T at 1500
    tokens 28.0 -> 18.1 ms, onnxruntime 18.0 (AVX2 code, benchmarks/op_probe.py's
    attention_qk_1500); P x V level. Inside the zoo's Whisper encoder (-instrument-profile,
    6 alternating rounds, the time summed over the layers) 0.899 on AVX2 code, 0.974 on
    AVX-512; BERT, ViT, GPT, Swin, the Conformer and wav2vec 2.0 level (0.99-1.005)."""

    def __init__(self, k, m: int, kk: int, n: int, out_shape, rows_shape=None,
                 b_in_place: bool = False, row_chunk: int | None = None):
        self.k, self.b = k, k.b
        self.row_chunk = row_chunk or m  # rows of A per chunk of a packed product (row_chunk)
        self.pack = None  # where a run-time B's chunks are packed (the scratch), if anywhere
        # the output dims a flat row index m runs over, when batch dims were folded into M
        self.rows_shape = rows_shape
        self.simd = Simd.of(k.caps)
        self.vec = Vec(k, self.simd)
        self.m, self.kk, self.n = m, kk, n
        self.mr, self.nv, _ = choose_tile(self.simd, m, n, 1)
        if m == 1 and b_in_place and self.vec.w > 1:
            # one row of A by a B read in place (a decode step's Q x K^T over its cache): each
            # pass over B's K rows reads a run of nv vectors from every row, so the runs are
            # as long as the registers hold (all but the broadcast and a load). AVX2 code
            # against onnxruntime: 32 heads of 1 x 64 x 2048 1.49 -> 0.81, 1 x 1024 x 1024
            # 1.62 -> 0.91 (two vectors a row before)
            self.nv = min(self.simd.registers - 2, -(-n // self.vec.w))
        self.nb = self.nv * self.vec.w
        acc = self.mr * self.nv
        # independent partial sums per accumulator so that about 8 FMAs are in flight
        self.ku = 1 if self.vec.w == 1 else max(1, min(4, 8 // acc))
        self.fin = Finisher(k, self.vec, out_shape[-1:])

    def panels(self, body, start=None, count=None):
        """body(n0, nb) over the column panels of columns [start, start + count) (all by
        default): full panels in a loop, then the narrower tail."""
        cg.for_runs(self.b, self.n if count is None else count, self.nb, body, self.k.intp,
                    "pn", start)

    def rows(self, body):
        cg.for_runs(self.b, self.m, self.mr, body, self.k.intp, "mb")

    def matrix(self, a_ptr, a_off, a_st, bsrc, y_off, lead, finish=None):
        """Y[y_off + m*N + n] for all m, n. bsrc: ("packed", ptr, off) or ("rows", ptr, off).
        `lead`: IR indices of the output dims before the last two; finish(m, n0_lane, acc,
        mask) adds alpha / beta*C before the epilogue."""
        def tile(m0, mr, n0, nb):
            self.tile(a_ptr, a_off, a_st, bsrc, y_off, lead, finish, m0, mr, n0, nb)

        if bsrc[0] == "packed":
            mc = self.row_chunk
            if mc >= self.m:
                self.panels(lambda n0, nb: self.rows(lambda m0, mr: tile(m0, mr, n0, nb)))
                return

            def rows_chunk(r0, count):
                self.panels(lambda n0, nb: cg.for_runs(
                    self.b, count, self.mr, lambda m0, mr: tile(m0, mr, n0, nb), self.k.intp,
                    "mb", r0))
            cg.for_runs(self.b, self.m, mc, rows_chunk, self.k.intp, "mc")
            return

        def chunk(c0, width):
            src = bsrc
            if self.pack is not None:  # panels of the chunk at (column - c0) x K in the scratch
                self.pack_chunk(bsrc, c0, width)
                src = ("packed", self.pack, self.b.mul(c0, self.k.c(-self.kk)))
            self.rows(lambda m0, mr: self.panels(
                lambda n0, nb: self.tile(a_ptr, a_off, a_st, src, y_off, lead, finish, m0, mr, n0, nb),
                c0, width))
        cg.for_runs(self.b, self.n, chunk_columns(self.k.caps, self.kk, self.n, self.nb), chunk,
                    self.k.intp, "nc")

    def pack_chunk(self, bsrc, c0, width: int):
        """Columns [c0, c0 + width) of a run-time B into the scratch as panels of nb (the
        constant B's layout, pack_panels), B's rows read one after the other."""
        k, b, vec = self.k, self.b, self.vec
        _, bptr, boff = bsrc
        with k.for_range(self.kk, name="pk") as r:
            row = b.add(boff, b.add(b.mul(r, k.c(self.n)), c0))

            def panel(r0, nbp):
                masks = [tuple(j * vec.w + lane < nbp for lane in range(vec.w))
                         for j in range(-(-nbp // vec.w))]
                dst = b.add(b.mul(r0, k.c(self.kk)), b.mul(r, k.c(nbp)))
                for j, mask in enumerate(masks):
                    v = vec.load(bptr, b.add(row, b.add(r0, k.c(j * vec.w))), mask)
                    vec.store(v, self.pack, b.add(dst, k.c(j * vec.w)), mask)
            cg.for_runs(b, width, self.nb, panel, k.intp, "pp")

    def tile(self, a_ptr, a_off, a_st, bsrc, y_off, lead, finish, m0, mr, n0, nb):
        k, b, vec = self.k, self.b, self.vec
        w = vec.w
        nvp = -(-nb // w)
        masks = [tuple(j * w + l < nb for l in range(w)) for j in range(nvp)]
        ku = self.ku
        kind, bptr, boff = bsrc
        # packed: the panel at column n0 starts at n0*K and holds K rows of nb columns
        bbase = b.add(boff, b.mul(n0, k.c(self.kk))) if kind == "packed" else b.add(boff, n0)
        bstride = nb if kind == "packed" else self.n
        arow = [b.add(a_off, b.mul(b.add(m0, k.c(i)), k.c(a_st[0]))) for i in range(mr)]
        acc = Acc(vec, mr * ku, nvp)

        def step(kidx, u):
            av = [None] * (mr * ku)
            for i in range(mr):
                av[u * mr + i] = k.load(a_ptr, b.add(arow[i], b.mul(kidx, k.c(a_st[1]))), np.float32)
            brow = b.add(bbase, b.mul(kidx, k.c(bstride)))
            if kind == "packed" and self.m > self.mr:
                # the same row of the next panel, into L2 (see the class docstring)
                vec.prefetch_run(bptr, b.add(brow, k.c(self.kk * nb)), nb, locality=2)
            bv = [vec.load(bptr, b.add(brow, k.c(j * w)), masks[j]) for j in range(nvp)]
            acc.fma(av, bv)

        steps, rem = divmod(self.kk, ku)
        if steps:
            with acc.loop(k, steps, name="kk") as s:
                for u in range(ku):
                    step(b.add(b.mul(s, k.c(ku)), k.c(u)), u)
        for u in range(rem):
            step(k.c(steps * ku + u), u)
        for i in range(mr):
            m = b.add(m0, k.c(i))
            for j in range(nvp):
                val = acc.value(i, j)
                for u in range(1, ku):
                    val = b.fadd(val, acc.value(u * mr + i, j))
                col = b.add(n0, k.c(j * w))
                if finish is not None:
                    val = finish(m, col, val, masks[j])
                self.fin.finish(val, self.row_index(lead, m), col,
                                b.add(y_off, b.add(b.mul(m, k.c(self.n)), col)), masks[j])


    def row_index(self, lead, m):
        """The output's indices before its last dim for row m (IR values)."""
        if self.rows_shape is None:
            return list(lead) + [m]
        idx = []
        for d in reversed(self.rows_shape):
            idx.append(self.b.urem(m, self.k.c(d)))
            m = self.b.udiv(m, self.k.c(d))
        return idx[::-1]


def _pack_buffer(k):
    """The instruction's packing scratch (an IR pointer), or None."""
    outs = k.instr.outputs
    return next((k.out(i) for i, x in enumerate(outs) if i and x.name.endswith(SCRATCH)), None)


def plan_gemm(k):
    """{} for float32 Gemm whose B is constant or row-major (strided rows of a run-time
    transposed B go to the generic kernel); {"rows": chunk} where the rows of a packed
    product run in chunks (row_chunk)."""
    if any(x is not None and x.dtype != np.float32
           for x in (k.in_buf(0), k.in_buf(1), k.in_buf(2), k.out_buf())):
        return None
    if const_input(k, 1) is None:
        return None if k.node.attrs["transB"] else {}
    return _chunked({}, k.caps, *k.node.opdef.dims(k.node))


def _chunked(params, caps, m: int, kk: int, n: int) -> dict:
    """params plus {"rows": chunk} where a packed product runs its rows in chunks
    (row_chunk)."""
    mc = row_chunk(caps, m, kk, n)
    return params | {"rows": mc} if mc < m else params


@variant("Gemm", "vector", rank=10, plan=plan_gemm)
def emit_gemm(k, params):
    node = k.node
    a, y = k.in_buf(0), k.out_buf()
    m, kk, n = node.opdef.dims(node)
    bconst = const_input(k, 1)
    g = GemmEmitter(k, m, kk, n, y.shape, b_in_place=bconst is None,
                    row_chunk=params.get("rows"))
    g.pack = _pack_buffer(k)
    vec = g.vec
    a_st = (1, a.shape[1]) if node.attrs["transA"] else (a.shape[1], 1)
    if bconst is not None:
        bmat = bconst.T if node.attrs["transB"] else bconst
        bsrc = ("packed", pack_constant(k, 1, pack_panels(bmat, g.nb), "packed_b"), k.c(0))
    else:
        bsrc = ("rows", k.inp(1), k.c(0))
    g.matrix(k.inp(0), k.c(0), a_st, bsrc, k.c(0), [], gemm_finish(k, vec, m, n))


def gemm_finish(k, vec, m: int, n: int):
    """finish(row, col, acc, mask): a Gemm's alpha and beta * C applied to the accumulator
    vector of output row `row`, columns from `col` (before the fused epilogue)."""
    node, b, c = k.node, k.b, k.in_buf(2)
    alpha, beta = float(node.attrs["alpha"]), float(node.attrs["beta"])
    c_st = cg.broadcast_strides(c.shape, (m, n)) if c is not None and beta != 0.0 else None

    def finish(row, col, acc, mask):
        if alpha != 1.0:
            acc = b.fmul(acc, cg.const(vec.ty, alpha))
        if c_st is not None:
            base = b.mul(row, k.c(c_st[0]))
            if c_st[1] == 0:
                cv = vec.splat(k.load(k.inp(2), base, np.float32))
            else:
                cv = vec.gather(k.inp(2), b.add(base, b.mul(col, k.c(c_st[1]))),
                                [l * c_st[1] for l in range(vec.w)], mask) if vec.w > 1 else \
                    k.load(k.inp(2), b.add(base, b.mul(col, k.c(c_st[1]))), np.float32)
            acc = b.fadd(acc, cv if beta == 1.0 else b.fmul(cv, cg.const(vec.ty, beta)))
        return acc
    return finish


def plan_matmul(k):
    """{} for float32 MatMul of matrices (1-D operands drop a dim of the output: the generic
    kernel); {"fold": True} where a batched A by one B runs as one product (fold_batch),
    {"rows": chunk} where the rows of a packed product run in chunks (row_chunk)."""
    form = product_form(k.caps, k.node)
    if form is None:
        return None
    params = {"fold": True} if form[3] else {}
    return _chunked(params, k.caps, *form[:3]) if const_input(k, 1) is not None else params


@variant("MatMul", "vector", rank=10, plan=plan_matmul)
def emit_matmul(k, params):
    node = k.node
    a, bb, y = k.in_buf(0), k.in_buf(1), k.out_buf()
    batch, m, kk, n = node.opdef.shapes(node)
    rows_shape = None
    if params.get("fold"):  # one (batch * M) x K product; rows name the output's leading dims
        batch, m, rows_shape = (), int(np.prod(batch)) * m, y.shape[:-1]
    g = GemmEmitter(k, m, kk, n, y.shape, rows_shape, b_in_place=const_input(k, 1) is None,
                    row_chunk=params.get("rows"))
    g.pack = _pack_buffer(k)
    b = k.b
    a_bst = [s * m * kk for s in cg.broadcast_strides(a.shape[:-2], batch)] if batch else []
    b_bst = [s * kk * n for s in cg.broadcast_strides(bb.shape[:-2], batch)] if batch else []
    y_bst = [s * m * n for s in cg.contiguous_strides(batch)] if batch else []
    bconst = const_input(k, 1)
    if bconst is not None:
        mats = bconst.reshape((-1, kk, n))
        packed = np.concatenate([pack_panels(x, g.nb) for x in mats])
        bptr = pack_constant(k, 1, packed, "packed_b")
    with k.loop_nest(batch or (1,), name="bt") as idx:
        idx = idx if batch else []
        a_off = cg.linear(b, idx, a_bst, 0, k.intp)
        b_off = cg.linear(b, idx, b_bst, 0, k.intp)  # packing keeps each matrix's place
        y_off = cg.linear(b, idx, y_bst, 0, k.intp)
        bsrc = ("packed", bptr, b_off) if bconst is not None else ("rows", k.inp(1), b_off)
        g.matrix(k.inp(0), a_off, (kk, 1), bsrc, y_off, idx)
