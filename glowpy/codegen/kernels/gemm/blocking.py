"""How the float products are blocked against the target's caches (gemm/vector.py runs
them): rows of A in chunks past the L2 (row_chunk), a run-time B's column chunks
(chunk_columns) and its packing scratch (packed_floats, add_pack_scratch), batched rows as
one product (fold_batch)."""
from __future__ import annotations

import numpy as np

from glowpy.codegen.kernels.tiles import choose_tile, reread_cost
from glowpy.codegen.kernels.vectors import Simd


def row_chunk(caps, m: int, kk: int, n: int) -> int:
    """Rows of A per chunk of a product by a packed B (m: all of them, no chunks). Column
    panels go outermost, so each panel reads all of A again, from memory once A outgrows the
    L2. Rows then run in chunks (a multiple of MR) whose A fills a quarter of the L2 (B's
    panels and the output pass through the rest), each chunk reading every panel once,
    wherever that re-reads fewer bytes (tiles.reread_cost: chunks x B against panels x the A
    they re-read). NeRF's MLP (16,384 x 256 by 256 x 256, eight layers), AVX2 code on the Zen
    4: 213 -> 172 ms (onnxruntime's AVX2 kernels 209), AVX-512 181 -> 165; chunks of 48, 120
    or 256 rows level, of 510 (A past half of the L2) 200 ms. Whisper's encoder (1500 tokens)
    0.98 of the time, the zoo's other transformers level."""
    if not caps.l2_bytes:
        return m
    mr, nv, _ = choose_tile(Simd.of(caps), m, n, 1)
    nb = nv * Simd.of(caps).width
    row = 4 * kk
    mc = max(mr, caps.l2_bytes // 4 // row // mr * mr)
    if mc >= m:
        return m
    panels = -(-n // nb)

    def cost(c):
        chunks = -(-m // c)
        return chunks * reread_cost(caps, 4 * kk * n) + (panels - 1) * chunks * reread_cost(caps, min(c, m) * row)
    return mc if cost(mc) < cost(m) else m


def chunk_columns(caps, kk: int, n: int, nb: int) -> int:
    """Columns of a run-time B (K = kk rows, n columns, panels of nb) per chunk: the most whole
    panels whose K rows fit three quarters of the target's L2 (every column without cache
    figures), at least one panel. Between two reads of a chunk only MR rows of A and of the
    output pass through, so the chunk can hold most of the L2; each further chunk reads all of
    A again. P x V at 1500 tokens (B: 1500 x 64, 384 KB) in one chunk 17.5 ms, in two of 32
    columns 22 ms; the 1500 x 1500 Q x K^T in one chunk or two of 1024 columns level (AVX2
    code)."""
    if not caps.l2_bytes:
        return n
    return min(n, max(nb, caps.l2_bytes * 3 // 4 // (4 * kk) // nb * nb))


def fold_batch(caps, batch, m: int, kk: int, n: int) -> bool:
    """Whether a MatMul of a batched A by one B runs as a single (batch * M) x K product.
    Per batch entry, B is read once and each M x K slice of A once per column panel; folded,
    B once and all of A once per panel (of the tile the folded rows get): fold where that
    re-reads less (tiles.reread_cost: from L1, L2 or beyond). ConvNeXt-T's last stage
    ((1,7,7,768) x (768,3072) and back: seven 7-row products, each streaming 9.4 MB of B),
    AVX2 Zen 3, six such MatMuls: 59.3 -> 45.6 Mcycles (best of 6 alternating runs)."""
    if not batch:
        return False
    simd, count = Simd.of(caps), int(np.prod(batch))

    def panels(rows):
        return -(-n // (choose_tile(simd, rows, n, 1)[1] * simd.width))
    b_cost = reread_cost(caps, 4 * kk * n)
    apart = count * (b_cost + panels(m) * reread_cost(caps, 4 * m * kk))
    return count > 1 and b_cost + panels(count * m) * reread_cost(caps, 4 * count * m * kk) < apart


SCRATCH = "_packed_b"  # name suffix of a run-time B's packing buffer
# row blocks from which a run-time B is packed chunk by chunk before the products: in place,
# a panel's rows lie a row of B apart, and a B row a multiple of 4 KiB long puts them all in
# one L1 set (and few L2 sets), so every row block re-reads the panel from past the caches
PACK_MIN_BLOCKS = 4


def product_form(caps, node):
    """(m, kk, n, fold) of a float32 MatMul of matrices or a Gemm with a row-major B, as the
    vector kernel runs it (m per product; fold: batched rows as one product, fold_batch), or
    None."""
    ins = [x for x in node.inputs if x is not None] + list(node.outputs)
    if any(np.dtype(x.dtype) != np.float32 for x in ins):
        return None
    if node.op == "Gemm":
        return None if node.attrs["transB"] else tuple(node.opdef.dims(node)) + (False,)
    a, bb, y = node.inputs[0], node.inputs[1], node.outputs[0]
    if len(a.shape) < 2 or len(bb.shape) < 2:
        return None
    batch, m, kk, n = node.opdef.shapes(node)
    one_b = len(bb.shape) == 2 or int(np.prod(bb.shape[:-2])) == 1
    fold = one_b and len(y.shape) == len(a.shape) and a.shape[:-2] == tuple(batch) and \
        fold_batch(caps, batch, m, kk, n)
    return (int(np.prod(batch)) * m if fold else m), kk, n, fold


def packed_floats(caps, m: int, kk: int, n: int) -> int:
    """Floats of the buffer a run-time B (K = kk rows, n columns) is packed into, chunk by
    chunk, for a product of m rows: 0 (read in place) for fewer than PACK_MIN_BLOCKS row
    blocks, where a chunk's packing would not be re-read enough to pay, for a B within a
    quarter of the L2 (attention's heads: 32-50 KB of K^T or V, level either way), and on
    scalar targets."""
    simd = Simd.of(caps)
    mr, nv, _ = choose_tile(simd, m, n, 1)
    if simd.width == 1 or -(-m // mr) < PACK_MIN_BLOCKS or 4 * kk * n <= caps.l2_bytes // 4:
        return 0
    return kk * chunk_columns(caps, kk, n, nv * simd.width)


def add_pack_scratch(prog, caps) -> None:
    """The backend's post-lowering step: each MatMul or Gemm of a run-time B that
    packed_floats packs gets the buffer as a scratch output (the planner places it)."""
    from glowpy.ir.program import ACTIVATION, Buffer
    for ins in prog.instrs:
        b = ins.inputs[1] if ins.op in ("MatMul", "Gemm") and len(ins.inputs) > 1 else None
        if b is None or ins.node is None or len(ins.outputs) != 1 or \
                (b.value is not None and b.value.const is not None):
            continue
        form = product_form(caps, ins.node)
        floats = packed_floats(caps, *form[:3]) if form is not None else 0
        if floats:
            ins.outputs = [ins.outputs[0], Buffer(ins.name + SCRATCH, np.dtype(np.float32),
                                                  (floats,), ACTIVATION)]
