"""GridSample and AffineGrid (glowpy/ir/ops/grid.py, kernels/tensor/grid_sample.py) through the
whole compiler: every mode, padding mode and align_corners on 2-D and 3-D inputs, in one bundle
per case set, against onnxruntime (rtol 1e-5: its bilinear and bicubic weights are summed in
another order) and bit for bit against glowpy's numpy reference; on every x86 vector level (the
channel loop vectorizes with gathers). Coordinates include the borders, half-pixel ties for
nearest, points far outside and, in their own test, NaN, infinities and 1e30 (run under
valgrind: no tap may read outside X). 3-D cubic, which onnxruntime refuses, against onnx's
reference implementation (zeros and reflection padding, where the two definitions agree)."""
from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import glowpy
from glowpy.runtime import Bundle
from hostile import refused
from test_cross import M7, check_bare_metal_object, run_on_aarch64
from test_memcheck import VALGRIND, VG_CPU, need
from util import make_graph_model, reference_of, run_onnxruntime
from vector_levels import params

MODES, PADS = ("linear", "nearest", "cubic"), ("zeros", "border", "reflection")
EDGES = [-1, 1, 0, -1.05, 1.05, -1.7, 2.9, -3.3]


def grid(rng, shape, nearest_ties=None):
    """Coordinates over and past the input (1.3 sigma), the EDGES on the first points, and for
    a nearest case on size `nearest_ties`, points on half-pixel ties."""
    g = (rng.standard_normal(shape) * 1.3).astype(np.float32)
    g.flat[:len(EDGES)] = EDGES
    if nearest_ties:
        n = nearest_ties
        ties = ((2 * np.arange(n + 1) - 0.0) / n - 1).astype(np.float32)  # pixel edges
        g.flat[len(EDGES):len(EDGES) + ties.size] = ties
    return g


def sample_model(x, grids: dict, cases, opset=20):
    """One GridSample per (grid name, mode, padding, align) case, all reading X."""
    nodes, outs = [], []
    for i, (gname, mode, pad, align) in enumerate(cases):
        outs.append(f"y{i}")
        nodes.append(helper.make_node("GridSample", ["x", gname], [outs[-1]], mode=mode,
                                      padding_mode=pad, align_corners=align))
    return make_graph_model(nodes, dict(x=x, **grids), outs, opset=opset)


def run(model, feeds, tmp_path, **opts):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    info = glowpy.compile(path, str(tmp_path / "b"), **opts)
    got = Bundle(str(tmp_path / "b"), info.name).run(feeds)
    return [got[p["name"]] for p in info.outputs]


def check(model, feeds, tmp_path, ort=True, **opts):
    got = run(model, feeds, tmp_path, **opts)
    refs = reference_of(model, feeds)
    expected = run_onnxruntime(model, feeds) if ort else refs
    for i, (y, r, e) in enumerate(zip(got, refs, expected)):
        assert y.shape == e.shape and y.dtype == e.dtype, i
        np.testing.assert_array_equal(y, r, err_msg=f"output {i} vs the reference")
        np.testing.assert_allclose(y, e, rtol=1e-5, atol=1e-6, err_msg=f"output {i}")
    return got


@pytest.mark.parametrize("level", params())
def test_2d_every_mode_and_padding(level, tmp_path):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 5, 6, 7)).astype(np.float32)
    grids = {"g": grid(rng, (2, 9, 11, 2), nearest_ties=7)}
    cases = [("g",) + c for c in itertools.product(MODES, PADS, (0, 1))]
    got = check(sample_model(x, grids, cases), dict(x=x, **grids), tmp_path, **level.options)
    for y in got:
        assert len(np.unique(y)) > 100  # values sampled, not a fill


def test_3d_linear_and_nearest_against_onnxruntime(tmp_path):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 4, 5, 6)).astype(np.float32)
    grids = {"g": grid(rng, (2, 3, 7, 5, 3), nearest_ties=6)}
    cases = [("g",) + c for c in itertools.product(("linear", "nearest"), PADS, (0, 1))]
    check(sample_model(x, grids, cases), dict(x=x, **grids), tmp_path)


def test_3d_cubic_against_onnx_reference(tmp_path):
    """onnxruntime runs cubic on 4-D inputs only; onnx's reference implementation computes it
    as glowpy does for zeros and reflection padding."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 4, 5, 6)).astype(np.float32)
    grids = {"g": grid(rng, (1, 3, 4, 5, 3))}
    cases = [("g", "cubic", p, a) for p in ("zeros", "reflection") for a in (0, 1)]
    model = sample_model(x, grids, cases)
    feeds = dict(x=x, **grids)
    got = check(model, feeds, tmp_path, ort=False)
    for y, e in zip(got, ReferenceEvaluator(model).run(None, feeds)):
        np.testing.assert_allclose(y, e, rtol=1e-5, atol=1e-6)


def test_opset16_names_and_integer_nearest(tmp_path):
    """GridSample-16's bilinear/bicubic are opset 20's linear/cubic; uint8 X with nearest is a
    gather of bytes (against onnx's reference implementation: onnxruntime takes float X)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 3, 5, 6)).astype(np.float32)
    grids = {"g": grid(rng, (1, 4, 8, 2))}
    cases = [("g", m, p, 0) for m in ("bilinear", "bicubic", "nearest") for p in PADS]
    check(sample_model(x, grids, cases, opset=16), dict(x=x, **grids), tmp_path / "f")
    xb = rng.integers(0, 256, (1, 3, 5, 6)).astype(np.uint8)
    model = sample_model(xb, grids, [("g", "nearest", p, a) for p in PADS for a in (0, 1)])
    feeds = dict(x=xb, **grids)
    got = run(model, feeds, tmp_path / "u")
    for y, e in zip(got, ReferenceEvaluator(model).run(None, feeds)):
        assert y.dtype == np.uint8
        np.testing.assert_array_equal(y, e)


def test_microsoft_grid_sample(tmp_path):
    """com.microsoft GridSample, PyTorch's export below opset 16: against onnxruntime's."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    g = grid(rng, (2, 4, 7, 2), nearest_ties=6)
    cases = [(m, p, a) for m in ("bilinear", "bicubic", "nearest") for p in PADS for a in (0, 1)]
    nodes = [helper.make_node("GridSample", ["x", "g"], [f"y{i}"], domain="com.microsoft",
                              mode=m, padding_mode=p, align_corners=a)
             for i, (m, p, a) in enumerate(cases)]
    model = make_graph_model(nodes, {"x": x, "g": g}, [f"y{i}" for i in range(len(cases))],
                             opset=13)
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    check(model, {"x": x, "g": g}, tmp_path)


def test_hostile_coordinates_stay_inside_x(tmp_path):
    """NaN, infinities, 1e30 and denormals in the grid: every case's bundle, built for
    valgrind's x86-64-v3, reads nothing outside X under memcheck, equals the reference, and a
    NaN point with zeros padding samples 0."""
    need("valgrind")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 2, 5, 7)).astype(np.float32)
    g = grid(rng, (1, 4, 6, 2))
    bad = [np.nan, np.inf, -np.inf, 1e30, -1e30, 1e-45, 4e6, -4e6, 5e6, 3.4e38]
    g[0, 0, :, 0] = bad[:6]
    g[0, 1, :, 1] = bad[4:]
    g[0, 2, :, :] = np.nan
    cases = [("g",) + c for c in itertools.product(MODES, PADS, (0, 1))]
    model = sample_model(x, {"g": g}, cases)
    feeds = {"x": x, "g": g}
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    info = glowpy.compile(path, str(tmp_path / "b"), mcpu=VG_CPU)
    native = Bundle(str(tmp_path / "b"), info.name).run(feeds)
    b = Bundle(str(tmp_path / "b"), info.name, runner=VALGRIND)
    checked = b.run(feeds, timeout=600)
    assert "Invalid" not in b.last_stderr, b.last_stderr
    refs = reference_of(model, feeds)
    for p, r, (_, mode, pad, _) in zip(info.outputs, refs, cases):
        y = native[p["name"]]
        np.testing.assert_array_equal(y, checked[p["name"]])
        np.testing.assert_array_equal(y, r, err_msg=p["name"])
        if pad == "zeros":
            assert np.all(y[:, :, 2] == 0), (mode, pad)  # the NaN row


def affine_model(theta, size, align, sample=None):
    nodes = [helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align)]
    outs = ["grid"]
    inputs = {"theta": theta}
    if sample is not None:
        nodes.append(helper.make_node("GridSample", ["x", "grid"], ["y"], align_corners=align))
        inputs["x"] = sample
        outs.append("y")
    return make_graph_model(nodes, inputs, outs, {"size": np.asarray(size, np.int64)}, opset=20)


@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize("size", [(2, 3, 5, 7), (2, 3, 1, 6), (2, 2, 3, 4, 5)])
def test_affine_grid_and_a_spatial_transformer(size, align, tmp_path):
    """AffineGrid against onnxruntime, and followed by GridSample (a spatial transformer's
    resampler) on 2-D sizes. A dim of size 1 with align_corners=1 has its one point at the
    centre, as PyTorch's affine_grid puts it: checked against theta's translation column
    (onnxruntime puts it at 1, onnx's reference at -1)."""
    rng = np.random.default_rng(6)
    nd = len(size) - 2
    theta = (np.eye(nd, nd + 1) + 0.3 * rng.standard_normal((size[0], nd, nd + 1))) \
        .astype(np.float32)
    x = rng.standard_normal(size).astype(np.float32) if nd == 2 else None
    model = affine_model(theta, size, align, x)
    feeds = {"theta": theta} if x is None else {"theta": theta, "x": x}
    got = run(model, feeds, tmp_path)
    assert got[0].shape == tuple([size[0]] + list(size[2:]) + [nd])
    if align and 1 in size[2:]:
        h = size[2:].index(1)  # the grid's coordinates of dim h's one point: 0
        base = np.zeros(size[2:] + (nd + 1,), np.float32)
        base[..., -1] = 1
        for d in range(nd):
            n = size[2 + d]
            line = np.linspace(-1, 1, n) if d != h else np.zeros(1)
            base[..., nd - 1 - d] = line.reshape([-1 if e == d else 1 for e in range(nd)])
        want = np.einsum("nij,...j->n...i", theta, base)
        np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=2e-6)
        return
    expected = run_onnxruntime(model, feeds)
    for y, e in zip(got, expected):
        np.testing.assert_allclose(y, e, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("attrs, grid_shape, fix", [
    ({"mode": "bilinear"}, (1, 4, 4, 2), "mode 'bilinear' is not one of linear, nearest, cubic"),
    ({"padding_mode": "wrap"}, (1, 4, 4, 2), "padding_mode 'wrap'"),
    ({}, (1, 4, 4, 3), "grid [N, out spatial..., number of spatial dims]"),
])
def test_bad_grid_sample_is_refused(attrs, grid_shape, fix, capsys, tmp_path):
    x = np.zeros((1, 2, 5, 5), np.float32)
    m = make_graph_model([helper.make_node("GridSample", ["x", "g"], ["y"], name="gs", **attrs)],
                         {"x": x, "g": np.zeros(grid_shape, np.float32)}, ["y"], opset=20)
    msg = refused(capsys, tmp_path, m)
    assert "node 'gs' (GridSample)" in msg and fix in msg, msg


def test_aarch64_and_cortex_m7(tmp_path):
    """Every mode and padding on AArch64 (NEON, under qemu-aarch64) equal to the reference
    within 1e-6, and the Cortex-M7 objects (hard and soft float) self-contained: no libm, the
    soft-float helpers only."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 3, 5, 6)).astype(np.float32)
    grids = {"g": grid(rng, (1, 4, 7, 2), nearest_ties=6)}
    cases = [("g",) + c for c in itertools.product(MODES, PADS, (0, 1))]
    model = sample_model(x, grids, cases)
    feeds = dict(x=x, **grids)
    _, outs = run_on_aarch64(model, feeds, str(tmp_path / "a64"))
    for y, r in zip(outs, reference_of(model, feeds)):
        np.testing.assert_allclose(np.asarray(y).reshape(r.shape), r, rtol=1e-6, atol=1e-6)
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    for abi in ("hard", "soft"):
        info = glowpy.compile(path, str(tmp_path / abi), target="arm", mcpu="cortex-m7",
                              float_abi=abi)
        check_bare_metal_object(str(tmp_path / abi / f"{info.name}.o"), soft_float=abi == "soft")


def test_huge_affine_grid_is_refused(capsys, tmp_path):
    """A size of 10^10 points: one error line, before any of it is built."""
    m = make_graph_model([helper.make_node("AffineGrid", ["t", "s"], ["g"], name="ag")],
                         {"t": np.zeros((1, 2, 3), np.float32)}, ["g"],
                         {"s": np.array([1, 1, 100000, 100000], np.int64)}, opset=20)
    msg = refused(capsys, tmp_path, m)
    assert "node 'ag' (AffineGrid)" in msg and "constant" in msg, msg
