"""Shared test helpers: build single-node ONNX models, run them through the real
compile -> link -> run path, and compare with onnxruntime and the op's numpy reference."""
from __future__ import annotations

import glob
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import glowpy
from glowpy.runtime import Bundle

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(REPO), "shared")
MODELS = os.path.join(SHARED, "models")

FLOAT_MODELS = ["mnist8", "mnist_onnx2c_atmega14x14", "super_resolution_10", "mlperf_tiny_resnet8",
                "mlperf_tiny_kws_dscnn", "mlperf_tiny_vww_mobilenetv1_025",
                "mlperf_tiny_ad_autoencoder", "yunet_s_320", "ulfd_slim320"]


def model_path(name: str) -> str:
    return os.path.join(MODELS, name + ".onnx")


def reference_data(name: str, index: int = 0):
    """(inputs, outputs) of test_data_set_<index>, lists in file order."""
    d = os.path.join(MODELS, f"{name}_data", f"test_data_set_{index}")
    load = lambda f: numpy_helper.to_array(onnx.load_tensor(f))  # noqa: E731
    # numeric order: output_10.pb comes after output_9.pb, not after output_1.pb
    files = lambda kind: sorted(glob.glob(os.path.join(d, f"{kind}_*.pb")),  # noqa: E731
                                key=lambda f: int(os.path.basename(f)[len(kind) + 1:-3]))
    return [load(f) for f in files("input")], [load(f) for f in files("output")]


def is_tflite_reference(name: str) -> bool:
    with open(os.path.join(MODELS, f"{name}_data", "REFERENCE.txt")) as f:
        return "TFLite" in f.read()


def assert_close_to_reference(got, ref, tflite: bool, what=""):
    """The project's model tolerance: |got-ref| <= a*max|ref| + 1e-3*|ref| + 2**-22, a = 1e-3
    for TFLite references, 1e-4 otherwise. The 2**-22 (2 ulp of 1.0) floor: onnxruntime's own
    Sigmoid/Tanh (MLAS) are only accurate to ~1.2e-7 absolute, so an output of near-zero
    activations (yunet's obj_* scores, max 7e-6) cannot be held to a*max|ref| alone."""
    ref = np.asarray(ref).reshape(np.shape(got))
    a = 1e-3 if tflite else 1e-4
    tol = a * np.abs(ref).max() + 1e-3 * np.abs(ref) + 2.0 ** -22
    err = np.abs(got.astype(np.float64) - ref)
    bad = err > tol
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {ref.size} values out of tolerance; "
                           f"max error {err.max():.3g} (tolerance there {tol.flat[int(err.argmax())]:.3g})")
    return float(err.max())


def make_model(op: str, inputs: dict, outputs: list[str] | int = 1, attrs: dict | None = None,
               initializers: dict | None = None, opset: int = 17, input_names=None,
               domain: str = "") -> onnx.ModelProto:
    """A one-node model. `inputs` maps name -> array (its dtype and shape become the graph
    input's); `initializers` maps name -> array (constant operands). `input_names` gives the
    node's input order (default: inputs then initializers); '' marks an omitted input."""
    initializers = initializers or {}
    order = input_names if input_names is not None else list(inputs) + list(initializers)
    outs = [f"y{i}" for i in range(outputs)] if isinstance(outputs, int) else list(outputs)
    node = helper.make_node(op, order, outs, domain=domain, **(attrs or {}))
    g_inputs = [helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype),
                                              np.shape(a)) for n, a in inputs.items()]
    # outputs without a type: onnxruntime infers them (an UNDEFINED elem_type fails to load)
    g_outputs = [helper.make_empty_tensor_value_info(o) for o in outs]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in initializers.items()]
    graph = helper.make_graph([node], f"test_{op}", g_inputs, g_outputs, inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, opset)],
                          producer_name="glowpy-tests")
    m.ir_version = min(m.ir_version, 10)
    return m


def make_graph_model(nodes: list, inputs: dict, outputs: list[str],
                     initializers: dict | None = None, opset: int = 17) -> onnx.ModelProto:
    """A model of several nodes (`helper.make_node` protos, in order) so one bundle tests many
    attribute combinations. `inputs` maps name -> array (dtype and shape of the graph input),
    `initializers` name -> array, `outputs` names the graph outputs."""
    g_inputs = [helper.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype),
                                              np.shape(a)) for n, a in inputs.items()]
    g_outputs = [helper.make_empty_tensor_value_info(o) for o in outputs]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in (initializers or {}).items()]
    graph = helper.make_graph(list(nodes), "test_graph", g_inputs, g_outputs, inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="glowpy-tests")
    m.ir_version = min(m.ir_version, 10)
    return m


class GraphBuilder:
    """Builds a multi-node test graph: `node` takes input names, arrays (which become
    initializers) or None (an omitted input), and by default makes its outputs graph outputs.

        g = GraphBuilder(x=x)
        g.node("Resize", ["x", None, np.array([1, 1, 2, 2], np.float32)], mode="linear")
        check_op(g.model(opset=19), g.feeds, tmp_path)"""

    def __init__(self, **inputs):
        self.feeds = inputs
        self.nodes, self.inits, self.outputs = [], {}, []

    def const(self, array) -> str:
        name = f"c{len(self.inits)}"
        self.inits[name] = np.asarray(array)
        return name

    def node(self, op: str, inputs, outputs: int = 1, output: bool = True, **attrs):
        names = ["" if v is None else v if isinstance(v, str) else self.const(v) for v in inputs]
        outs = [f"{op.lower()}{len(self.nodes)}_{j}" for j in range(outputs)]
        self.nodes.append(helper.make_node(op, names, outs, **attrs))
        if output:
            self.outputs += outs
        return outs[0] if outputs == 1 else outs

    def model(self, opset: int = 17) -> onnx.ModelProto:
        return make_graph_model(self.nodes, self.feeds, self.outputs, self.inits, opset)


def run_onnxruntime(model, feeds: dict) -> list[np.ndarray]:
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString() if isinstance(model, onnx.ModelProto)
                                else model, so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def compile_and_run(model, feeds: dict, out_dir, api: str = "static", **options) -> list[np.ndarray]:
    """Saves `model` (or uses the path), compiles it into out_dir, links and runs the bundle;
    returns the outputs in graph order."""
    out_dir = str(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    if isinstance(model, onnx.ModelProto):
        path = os.path.join(out_dir, "model.onnx")
        onnx.save(model, path)
    else:
        path = model
    info = glowpy.compile(path, os.path.join(out_dir, "bundle"), bundle_api=api, **options)
    res = Bundle(os.path.join(out_dir, "bundle"), info.name).run(feeds)
    return [res[p["name"]] for p in info.outputs]


def memory_report(model, out_dir, **options) -> dict:
    """Compiles `model` into out_dir (made here) and returns its -dump-memory-report: the
    instructions with their kernels, variants and executed multiply-adds, the buffers."""
    import json
    out_dir = str(out_dir)
    os.makedirs(out_dir)
    path = os.path.join(out_dir, "m.onnx")
    onnx.save(model, path)
    report = os.path.join(out_dir, "r.json")
    glowpy.compile(path, os.path.join(out_dir, "b"), dump_memory_report=report, **options)
    with open(report) as f:
        return json.load(f)


def check_against_onnxruntime(model, feeds: dict, out_dir, rtol=1e-4, atol=1e-5, **options):
    """Compiles and runs `model`; asserts every output matches onnxruntime's (same dtype and
    shape, values within atol + rtol*|expected|). Returns (got, expected)."""
    expected = run_onnxruntime(model, feeds)
    got = compile_and_run(model, feeds, out_dir, **options)
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape, f"output {i}: shape {g.shape} != onnxruntime's {e.shape}"
        assert g.dtype == e.dtype, f"output {i}: dtype {g.dtype} != onnxruntime's {e.dtype}"
        if e.dtype.kind == "f":
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=f"output {i}")
        else:
            np.testing.assert_array_equal(g, e, err_msg=f"output {i}")
    return got, expected


def reference_of(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    """The outputs computed by glowpy's own op references (graph folded with the feeds)."""
    from glowpy.frontend.onnx import load_onnx
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "m.onnx")
        onnx.save(model, p)
        g = load_onnx(p)
    env = {v: feeds[v.name] for v in g.inputs}
    for n in g.nodes:
        ins = [None if v is None else (v.const if v.is_const else env[v]) for v in n.inputs]
        for o, a in zip(n.outputs, n.opdef.reference(n, *ins)):
            env[o] = a
    return [v.const if v.is_const else env[v] for v in g.outputs]


def check_op(model, feeds: dict, out_dir, rtol=1e-4, atol=1e-5, reference=True, **options):
    """check_against_onnxruntime, and (reference=True) glowpy's numpy op references against
    onnxruntime's outputs with the same tolerances. Returns (got, expected)."""
    got, expected = check_against_onnxruntime(model, feeds, out_dir, rtol=rtol, atol=atol, **options)
    if reference:
        for i, (r, e) in enumerate(zip(reference_of(model, feeds), expected)):
            r = np.asarray(r)
            assert r.shape == e.shape, f"output {i}: reference shape {r.shape} != onnxruntime's {e.shape}"
            if e.dtype.kind == "f":
                np.testing.assert_allclose(r, e, rtol=rtol, atol=atol, err_msg=f"output {i} (reference)")
            else:
                np.testing.assert_array_equal(r, e, err_msg=f"output {i} (reference)")
    return got, expected
