"""Channel-vectorized tiles whose taps are checked at run time (conv/channel_edges.py) and
the loop over the kernel columns of tiles whose taps are all valid (conv/channel.py).

A row with more than EDGE_CODES distinct full edge tiles (a dilated or long kernel with a
wide padding: HiFi-GAN's k11 dilation 5 has five a side) runs them all through one code that
finds each tap's validity at run time and zeroes the taps in the padding. The cases force
the channel-vectorized tiles, with and without chunks of input channels (a chunk of 4: with a
short row the masked tiles are the common ones and run inside the chunked segments too), on
every vector level this host runs, and check the outputs against onnxruntime; each case's
rows are checked to have masked tiles, so the path under test is the one that runs."""
from __future__ import annotations

import pytest

from glowpy.codegen.kernels.conv.channel_edges import EDGE_CODES, tile_sigs
from glowpy.codegen.kernels.tiles import Shape
from test_channel_chunks import _model as chunk_model
from util import check_against_onnxruntime
from vector_levels import RUNNABLE

NPX = 5  # pixels a tile (5 x 2 vectors: 10 accumulators, within SSE's and AVX2's 16 registers)

# name: (C, M, input spatial dims, kernel, stride, dilation, pad, residual). M = 20 or 24: a
# last block of fewer channels than NVO vectors on some level
CASES = {"conv1d_k11_d5": (16, 20, (300,), 11, 1, 5, 25, False),
         "conv1d_k9_s2_d3_residual": (24, 16, (250,), 9, 2, 3, 12, True),
         "conv1d_short_row": (16, 16, (40,), 11, 1, 5, 25, False),
         "3x3_d6": (32, 16, (20, 20), 3, 1, 6, 6, True),
         "5x5_s2_d6": (16, 24, (23, 61), 5, 2, 6, 12, False)}


def _model(c, m, spatial, k, s, d, p, residual):
    """test_channel_chunks' model: LeakyRelu(Conv(x)), or with a residual Relu(Conv(Relu(x)) +
    Exp(r)) (the Conv accumulating onto the residual's buffer); and the output's dims."""
    model, feeds = chunk_model(c, m, spatial, k, s, p, d, residual)
    return model, feeds, tuple((q + 2 * p - d * (k - 1) - 1) // s + 1 for q in spatial)


def _shape(c, m, spatial, k, s, d, p, out) -> Shape:
    hin, win = (1, spatial[0]) if len(spatial) == 1 else spatial
    ho, wo = (1, out[0]) if len(out) == 1 else out
    kh = 1 if len(spatial) == 1 else k
    return Shape(1, c, m, 1, hin, win, ho, wo, kh, k, s, s, d, d, p, p, len(spatial))


def test_only_wide_edges_are_masked():
    """A 3x3 or 7x7 with its usual padding keeps every edge tile's own code (at most two
    kinds); the cases' rows each have masked tiles."""
    for c, m, spatial, k, s, d, p in [(16, 16, (56, 56), 3, 1, 1, 1), (16, 16, (57, 57), 3, 2, 1, 1),
                                      (8, 16, (112, 112), 7, 2, 1, 3)]:
        out = tuple((q + 2 * p - d * (k - 1) - 1) // s + 1 for q in spatial)
        assert all(sig[1] is not None for sig in tile_sigs(_shape(c, m, spatial, k, s, d, p, out), NPX))
    for name, (c, m, spatial, k, s, d, p, _) in CASES.items():
        out = tuple((q + 2 * p - d * (k - 1) - 1) // s + 1 for q in spatial)
        sigs = tile_sigs(_shape(c, m, spatial, k, s, d, p, out), NPX)
        masked = [i for i, sig in enumerate(sigs) if sig[1] is None]
        assert masked, name
        kinds = {sig for sig in sigs if sig[1] is not None and sig[0] == NPX}
        assert len(kinds) <= 1 + EDGE_CODES, name


@pytest.mark.parametrize("level", RUNNABLE, ids=str)
@pytest.mark.parametrize("chunk", [0, 4], ids=["whole", "kc4"])
@pytest.mark.parametrize("case", list(CASES))
def test_masked_edges_match_onnxruntime(case, chunk, level, tmp_path):
    model, feeds, _ = _model(*CASES[case])
    params = {"npx": NPX, "nvo": 2} | ({"kc": chunk} if chunk else {})
    check_against_onnxruntime(model, feeds, tmp_path, rtol=1e-4, atol=1e-4,
                              kernel_variants={"Conv": ("channel_vectorized", params)},
                              **level.options)
