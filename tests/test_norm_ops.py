"""LRN, LayerNormalization (opset 17: axis, epsilon, stash_type, the Mean and InvStdDev
outputs), InstanceNormalization and Softplus: single-node models compiled, linked and run,
compared with onnxruntime and with the ops' numpy references."""
import numpy as np
import onnx
import pytest

import glowpy
from glowpy.errors import ModelError
from util import check_against_onnxruntime, compile_and_run, make_model, reference_of
from vector_levels import params

RNG = np.random.default_rng(11)


def R(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def check(model, feeds, tmp_path, rtol=1e-4, atol=1e-5, **options):
    got, expected = check_against_onnxruntime(model, feeds, tmp_path, rtol=rtol, atol=atol, **options)
    for r, e in zip(reference_of(model, feeds), expected):
        np.testing.assert_allclose(r, e, rtol=rtol, atol=atol)


LRN_CASES = {
    "defaults": ((2, 5, 4, 3), {"size": 3}),
    "even_size": ((1, 6, 3, 3), {"size": 4, "alpha": 0.01, "beta": 0.5, "bias": 2.0}),
    "size1": ((1, 3, 2, 5), {"size": 1, "alpha": 0.2}),
    "wide_window": ((1, 4, 5, 5), {"size": 9, "alpha": 1e-3, "beta": 0.9, "bias": 0.5}),
    "rank3": ((2, 7, 6), {"size": 5, "alpha": 0.1, "beta": 0.75}),
    "rank5": ((1, 3, 2, 2, 3), {"size": 3, "beta": 1.25}),
}


# onnxruntime's LRN takes only odd sizes and 4-D inputs (and onnx.reference's LRN loops over
# the batch instead of the channels): these cases follow the ONNX spec's formula, written here
LRN_SPEC_ONLY = {"even_size", "rank3", "rank5"}


def lrn_spec(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    """square_sum[n, c] = sum x[n, i]^2 for i in [c - floor((size-1)/2), c + ceil((size-1)/2)]
    clipped to the channels; y = x / (bias + alpha / size * square_sum) ^ beta."""
    x = x.astype(np.float64)
    out = np.empty_like(x)
    for c in range(x.shape[1]):
        lo, hi = max(0, c - (size - 1) // 2), min(x.shape[1], c + -(-(size - 1) // 2) + 1)
        out[:, c] = x[:, c] / (bias + alpha / size * (x[:, lo:hi] ** 2).sum(axis=1)) ** beta
    return out


@pytest.mark.parametrize("case", sorted(LRN_CASES))
def test_lrn(case, tmp_path):
    shape, attrs = LRN_CASES[case]
    x = R(*shape, scale=3)
    m = make_model("LRN", {"X": x}, attrs=attrs, opset=17)
    expected = lrn_spec(x, **attrs)
    if case not in LRN_SPEC_ONLY:
        got, ort = check_against_onnxruntime(m, {"X": x}, tmp_path)
        np.testing.assert_allclose(ort[0], expected, rtol=1e-4, atol=1e-5)
    else:
        np.testing.assert_allclose(compile_and_run(m, {"X": x}, tmp_path)[0], expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(reference_of(m, {"X": x})[0], expected, rtol=1e-5, atol=1e-6)


LN_CASES = {
    "last_axis": ((2, 3, 8), {}, (8,), True, 1),
    "axis1": ((2, 3, 4, 5), {"axis": 1, "epsilon": 1e-3}, (3, 4, 5), True, 1),
    "neg_axis": ((3, 4, 5), {"axis": -2}, (4, 5), True, 1),
    "axis0": ((4, 6), {"axis": 0}, (4, 6), True, 1),
    "no_bias": ((5, 7), {}, (7,), False, 1),
    "broadcast_scale": ((2, 3, 4), {"axis": 1}, (1, 4), True, 1),
    "stash_type": ((2, 6), {"stash_type": 1}, (6,), True, 1),
    "mean_and_invstd": ((2, 3, 4), {"axis": 1}, (3, 4), True, 3),
    "mean_only": ((3, 10), {}, (10,), True, 2),
}


@pytest.mark.parametrize("case", sorted(LN_CASES))
def test_layer_normalization(case, tmp_path):
    shape, attrs, pshape, bias, nout = LN_CASES[case]
    x = R(*shape, scale=2) + 1
    inits = {"Scale": R(*pshape)}
    if bias:
        inits["B"] = R(*pshape)
    m = make_model("LayerNormalization", {"X": x}, outputs=nout, attrs=attrs, initializers=inits,
                   opset=17)
    check(m, {"X": x}, tmp_path)


@pytest.mark.parametrize("level", params())
@pytest.mark.parametrize("d", [1, 3, 8, 16, 17, 37, 256, 259])
def test_layer_normalization_vector_lengths(d, level, tmp_path):
    """Rows shorter than a vector, whole vectors only, whole vectors plus a masked tail at 4,
    8 and 16 lanes (the moments and the normalizing pass on vectors); rows far from zero mean
    (the masked lanes must not count in the variance); every output."""
    x = R(5, d, scale=2) + 100
    m = make_model("LayerNormalization", {"X": x}, outputs=3, attrs={"axis": -1},
                   initializers={"Scale": R(d), "B": R(d)}, opset=17)
    check(m, {"X": x}, tmp_path, **level.options)


@pytest.mark.parametrize("level", params())
def test_instance_normalization_vector_lengths(level, tmp_path):
    """Planes of 5, 17 and 40 elements (a tail; whole vectors) far from zero mean."""
    for shape in [(2, 3, 5), (1, 2, 17), (1, 3, 5, 8)]:
        x = R(*shape, scale=3) + 50
        c = shape[1]
        m = make_model("InstanceNormalization", {"X": x}, initializers={"scale": R(c), "B": R(c)},
                       opset=17)
        check(m, {"X": x}, tmp_path / "x".join(map(str, shape)), **level.options)


@pytest.mark.parametrize("shape,eps", [((2, 3, 5), 1e-5), ((1, 4, 3, 6), 1e-2), ((2, 2, 2, 3, 4), 1e-5)])
def test_instance_normalization(shape, eps, tmp_path):
    x = R(*shape, scale=3) - 1
    c = shape[1]
    m = make_model("InstanceNormalization", {"X": x}, attrs={"epsilon": eps},
                   initializers={"scale": R(c), "B": R(c)}, opset=17)
    check(m, {"X": x}, tmp_path)


def test_softplus(tmp_path):
    x = np.concatenate([np.linspace(-100, 100, 401, dtype=np.float32), R(99, scale=5),
                        np.asarray([0.0, -0.0, 1e-8, -1e-8, 88.0, 89.0, -104.0], np.float32)])
    check(make_model("Softplus", {"X": x}, opset=17), {"X": x}, tmp_path, rtol=1e-5, atol=1e-6)


def test_bad_shapes_are_model_errors(tmp_path):
    x = R(2, 3, 4)
    cases = [
        make_model("InstanceNormalization", {"X": x}, initializers={"scale": R(4), "B": R(3)}),
        make_model("LayerNormalization", {"X": x}, attrs={"axis": 1}, initializers={"Scale": R(5)}),
        make_model("LRN", {"X": R(3, 4)}, attrs={"size": 3}),
    ]
    for i, m in enumerate(cases):
        p = tmp_path / f"m{i}.onnx"
        onnx.save(m, p)
        with pytest.raises(ModelError):
            glowpy.compile(str(p), str(tmp_path / f"b{i}"))
