"""Transpose's tiles (kernels/tensor/movement.py tiled_copy: float tiles of a vector's lanes
transposed in registers, register_tile; cache-line tiles of other types): every element
lands where numpy puts it, with tiles that divide the dims and with rows and columns left
over, for 4-byte and 1-byte elements, at every vector level this host runs (4, 8 and 16
lanes)."""
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
