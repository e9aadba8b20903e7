"""Transpose's tiles (kernels/tensor/movement.py tiled_copy: float tiles of a vector's lanes
and 16 x 16 byte tiles transposed in registers, register_tile and byte_tile; cache-line tiles
of other types): every element lands where numpy puts it, with tiles that divide the dims and
with rows and columns left over, for 4-byte and 1-byte elements, at every vector level this
host runs (4, 8 and 16 lanes) and in NEON code under qemu-aarch64."""
import numpy as np
import pytest
from util import compile_and_run, make_model
from vector_levels import RUNNABLE

CASES = [((1, 56, 56, 96), (0, 3, 1, 2)), ((1, 14, 14, 40), (0, 3, 1, 2)), ((1, 40, 14, 14), (0, 2, 3, 1)),
         ((3, 37, 21), (0, 2, 1)), ((5, 17), (1, 0)), ((2, 3, 33, 70), (1, 3, 0, 2)), ((16, 16), (1, 0)),
         ((4, 9, 8), (2, 0, 1))]


@pytest.mark.parametrize("level", RUNNABLE, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.int8])
def test_transpose_matches_numpy(level, dtype, tmp_path):
    rng = np.random.default_rng(3)
    for i, (shape, perm) in enumerate(CASES):
        x = (rng.standard_normal(shape) * 50).astype(dtype)
        model = make_model("Transpose", {"x": x}, attrs={"perm": list(perm)}, opset=13)
        got = compile_and_run(model, {"x": x}, tmp_path / str(i), **level.options)[0]
        np.testing.assert_array_equal(got, x.transpose(perm), err_msg=f"{shape} {perm}")


def test_transpose_tiles_on_aarch64(tmp_path):
    """The same tiles in NEON code (4 float lanes, 16 x 16 byte tiles), run under qemu-aarch64:
    float and int8 transposes with tiles and rows and columns left over, exact."""
    from onnx import helper
    from test_cross import run_on_aarch64
    rng = np.random.default_rng(5)
    cases = [((1, 40, 14, 14), (0, 2, 3, 1), np.float32), ((2, 3, 33, 70), (1, 3, 0, 2), np.float32),
             ((1, 56, 20, 36), (0, 3, 1, 2), np.int8), ((2, 3, 33, 70), (1, 3, 0, 2), np.int8),
             ((3, 37, 21), (0, 2, 1), np.uint8)]
    feeds, nodes, ins, outs = {}, [], [], []
    for i, (shape, perm, dtype) in enumerate(cases):
        x = rng.integers(-100, 100, shape).astype(dtype) if dtype != np.float32 else \
            rng.standard_normal(shape).astype(dtype)
        feeds[f"x{i}"] = x
        et = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        ins.append(helper.make_tensor_value_info(f"x{i}", et, shape))
        outs.append(helper.make_tensor_value_info(f"y{i}", et, x.transpose(perm).shape))
        nodes.append(helper.make_node("Transpose", [f"x{i}"], [f"y{i}"], perm=list(perm)))
    model = helper.make_model(helper.make_graph(nodes, "t", ins, outs),
                              opset_imports=[helper.make_opsetid("", 13)])
    info, got = run_on_aarch64(model, feeds, str(tmp_path))
    assert len(got) == len(cases)
    for i, ((shape, perm, dtype), y) in enumerate(zip(cases, got)):
        want = feeds[f"x{i}"].transpose(perm)
        np.testing.assert_array_equal(np.asarray(y).reshape(want.shape).astype(dtype), want,
                                      err_msg=f"{shape} {perm} {dtype.__name__}")
