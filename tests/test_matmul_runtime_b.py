"""Products whose B is computed at run time (attention's Q x K^T and P x V, a Gemm of two
activations): gemm/vector.py takes the row blocks outermost within column chunks of B that
fit three quarters of the L2 (chunk_columns), and where there are PACK_MIN_BLOCKS row blocks
or more and B is over a quarter of the L2, packs each chunk into panels in a scratch buffer
first (packed_floats). The chunk widths follow the target's L2, and bundles with one chunk,
several, a narrower last chunk and a last panel narrower than a vector, packed and read in
place, agree with onnxruntime at every vector level this host runs."""
import numpy as np
import pytest
from onnx import helper
from util import check_against_onnxruntime, make_graph_model, memory_report
from vector_levels import RUNNABLE

from glowpy.codegen.kernels.gemm.blocking import chunk_columns
from glowpy.codegen.kernels.tiles import choose_tile
from glowpy.codegen.kernels.vectors import Simd
from glowpy.codegen.target import resolve_target

F = np.float32
RNG = np.random.default_rng(11)


def test_chunks_follow_the_l2():
    """Under the x86-64 family's 512 KiB L2 (any explicit CPU): B of 64 x 1500 (a head's keys
    at 1500 tokens, 384 KB) is one chunk; 1000 rows take 96 columns a chunk (panels of 16);
    with no cache figures (microcontrollers) every column is one chunk."""
    caps = resolve_target(mcpu="x86-64-v3").caps
    assert caps.l2_bytes == 512 << 10
    assert chunk_columns(caps, 64, 1500, 16) == 1500
    assert chunk_columns(caps, 1000, 250, 16) == 96
    assert chunk_columns(caps, 100000, 250, 16) == 16  # at least one panel
    mcu = resolve_target(target="thumbv7em-none-eabihf", mcpu="cortex-m7").caps
    assert chunk_columns(mcu, 1000, 250, 4) == 250


def attention(heads, tokens, d):
    """Softmax(Q K^T / sqrt(d)) V over a packed qkv input, as exporters split it."""
    nodes = [helper.make_node("Split", ["qkv", "sizes"], ["q", "k", "v"], axis=3),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Div", ["s", "scale"], ["z"]),
             helper.make_node("Softmax", ["z"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    inits = {"sizes": np.array([d, d, d], np.int64), "scale": np.array(np.sqrt(d), F)}
    feeds = {"qkv": RNG.standard_normal((1, heads, tokens, 3 * d)).astype(F)}
    return make_graph_model(nodes, feeds, ["y"], inits, opset=13), feeds


@pytest.mark.parametrize("level", RUNNABLE, ids=str)
@pytest.mark.parametrize("heads, tokens, d", [(2, 77, 64), (1, 300, 40)])
def test_attention_matches_onnxruntime(level, heads, tokens, d, tmp_path):
    model, feeds = attention(heads, tokens, d)
    check_against_onnxruntime(model, feeds, tmp_path, rtol=1e-4, atol=1e-5, **level.options)


@pytest.mark.parametrize("level", RUNNABLE, ids=str)
@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
@pytest.mark.parametrize("rows", [60, 12])
def test_chunked_product_matches_onnxruntime(level, op, rows, tmp_path):
    """K = 1000 rows of B: 96 columns a chunk under the family's L2 at every level's tile
    (panels of 8, 16 or 32), so 250 columns are two chunks in the loop and a last one of 58,
    whose last panel is narrower than a vector. 60 rows are four row blocks or more at every
    level: B (1 MB) is packed a chunk at a time into a scratch of K x 96 floats; 12 rows (two
    blocks or one) read it in place."""
    k, n = 1000, 250
    caps = resolve_target(**level.options).caps
    simd = Simd.of(caps)
    nb = choose_tile(simd, rows, n, 1)[1] * simd.width
    assert chunk_columns(caps, k, n, nb) == 96 and 58 % nb and (58 % nb) % simd.width
    feeds = {"a": RNG.standard_normal((rows, k)).astype(F), "b": RNG.standard_normal((k, n)).astype(F)}
    if op == "Gemm":
        node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], alpha=0.5, beta=1.0)
        inits = {"c": RNG.standard_normal(n).astype(F)}
    else:
        node = helper.make_node("MatMul", ["a", "b"], ["y"])
        inits = {}
    model = make_graph_model([node], feeds, ["y"], inits, opset=13)
    report = memory_report(model, tmp_path / "plan", **level.options)
    scratch = [b["size"] for b in report["buffers"] if b["name"].endswith("_packed_b")]
    assert scratch == ([4 * k * 96] if rows == 60 else []), scratch
    check_against_onnxruntime(model, feeds, tmp_path, rtol=1e-4, atol=1e-4, **level.options)


@pytest.mark.parametrize("level", RUNNABLE, ids=str)
@pytest.mark.parametrize("batch, k, n", [((), 70, 300), ((3,), 64, 517), ((2,), 33, 5)])
def test_one_row_by_a_runtime_b(level, batch, k, n, tmp_path):
    """One row of A (a decode step's query) by a B read in place: panels as wide as the
    registers hold (registers - 2 vectors), the last one narrower and ending inside a vector."""
    feeds = {"a": RNG.standard_normal(batch + (1, k)).astype(F),
             "b": RNG.standard_normal(batch + (k, n)).astype(F)}
    model = make_graph_model([helper.make_node("MatMul", ["a", "b"], ["y"])], feeds, ["y"], {},
                             opset=13)
    check_against_onnxruntime(model, feeds, tmp_path, rtol=1e-4, atol=1e-4, **level.options)
