"""ONNX conformance: the official ONNX backend node tests through the real compile-and-run path.

Each case of `onnx.backend.test.case.node.collect_testcases()` (built from the installed onnx:
a one-node model, its inputs and its expected outputs) is compiled into a bundle with
`glowpy.compile`, loaded into this process by `glowpy.runtime.Bundle` and run; its outputs are
compared with the expected ones as onnx's own backend runner does (same shape, same dtype,
`assert_allclose` with the case's rtol/atol, 1e-3/1e-7).

An ahead-of-time compiler fixes every shape at compile time, so operands that determine shapes,
axes or counts must be compile-time constants. The node tests feed some of them as graph inputs
(Reshape's shape, Slice's starts/ends/axes/steps, Pad's pads, Resize's roi/scales/sizes,
Split's split, Squeeze/Unsqueeze/Reduce* axes, Expand's shape, Tile's repeats, TopK's k,
Range's and ConstantOfShape's operands, Loop's trip count and first condition,
BatchNormalization's statistics). The
runner gives exactly the inputs an op declares in `Op.const_inputs` (the op registry's list of
compile-time operands) to the compiler as initializers with the case's values, and feeds the
rest at run time. Nothing else about a case is changed.

Full run (writes docs/conformance.md, exits 1 on an unexpected failure or a stale exclusion):
    python -m glowpy.conformance --report docs/conformance.md
Subsets while developing:
    python -m glowpy.conformance --ops Conv,Gemm -v
    python -m glowpy.conformance --cases 'test_resize_*' -v
"""
from __future__ import annotations

import fnmatch
import os
import runpy
import shutil
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, field

import numpy as np

# The ops the conformance issue names: the core set, then the extended set.
CORE_OPS = (
    "Conv Gemm MatMul Add Sub Mul Div Pow Max Min Sum Mean Relu LeakyRelu PRelu Elu Sigmoid "
    "HardSigmoid HardSwish Tanh Clip Exp Log Sqrt Reciprocal Neg Abs Erf MaxPool AveragePool "
    "GlobalAveragePool GlobalMaxPool BatchNormalization Softmax LogSoftmax Reshape Flatten "
    "Transpose Concat Split Slice Gather Squeeze Unsqueeze Pad Resize Upsample ReduceMean "
    "ReduceSum ReduceMax Identity Dropout Constant Shape Cast").split()
EXTENDED_OPS = (
    "ConvTranspose InstanceNormalization LayerNormalization LRN Selu Softplus Softsign Gelu Mish "
    "Floor Ceil Round Sign Sin Cos ReduceMin ReduceProd ReduceL2 ArgMax ArgMin Tile Expand Where "
    "Equal Less Greater Not And Or ConstantOfShape Range DepthToSpace SpaceToDepth CumSum TopK "
    "Einsum LSTM GRU RNN").split()
# control flow and the integer / index ops of shape arithmetic (issue 18)
CONTROL_OPS = (
    "If Loop Scan Mod BitShift ScatterND ScatterElements GatherElements GatherND Trilu Size "
    "NonZero BitwiseAnd BitwiseOr BitwiseXor BitwiseNot IsNaN IsInf OneHot EyeLike").split()
# ONNX ops that exporters write, expanded into the ops above (glowpy/ir/ops/composite_std.py)
COMPOSITE_OPS = (
    "CastLike Swish Celu ThresholdedRelu Shrink LpNormalization MeanVarianceNormalization "
    "RMSNormalization GroupNormalization Sinh Cosh Tan Hardmax GlobalLpPool").split()
SCOPE_OPS = tuple(CORE_OPS + EXTENDED_OPS + CONTROL_OPS + COMPOSITE_OPS)

# Exclusion categories: the only reasons a case of an in-scope op may be left failing.
CATEGORIES = {
    "dtype": "an element type bundles do not hold (they hold float32, int8, uint8, int32, "
             "int64 and bool)",
    "training": "training-only behaviour (glowpy compiles inference graphs)",
    "random": "output depends on a random generator",
    "types": "sequence or optional values (bundles hold tensors only)",
    "zero-size": "a tensor with a zero dimension (bundles refuse empty tensors)",
    "semantics": "glowpy computes what onnxruntime computes where onnx's reference differs",
    "unsupported": "an op form glowpy does not implement",
}
# categories that put a case outside "the types in scope": not counted in the pass rate
TYPE_CATEGORIES = ("dtype", "types")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_EXCLUSIONS = os.path.join(REPO, "tests", "conformance_exclusions.py")


@dataclass
class Case:
    name: str
    op: str
    model_bytes: bytes
    inputs: list
    outputs: list
    rtol: float = 1e-3
    atol: float = 1e-7


@dataclass
class Result:
    name: str
    op: str
    status: str  # "pass", "fail" (wrong numbers/shape/dtype), "error" (did not compile or run)
    message: str = ""
    seconds: float = 0.0
    frozen: list = field(default_factory=list)  # inputs given to the compiler as initializers


# -- collecting cases --------------------------------------------------------------------------

_CASES: list | None = None


def load_cases() -> list[Case]:
    """Every single-op node test of the installed onnx (the `_expanded` function-body variants
    are left out), in onnx's order. Collection runs onnx's reference code: ~10 s, once."""
    global _CASES
    if _CASES is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with np.errstate(all="ignore"):
                from onnx.backend.test.case.node import collect_testcases
                raw = collect_testcases(None)
        cases = []
        for tc in raw:
            if "_expanded" in tc.name or tc.model is None or len(tc.model.graph.node) != 1:
                continue
            (ins, outs), = tc.data_sets[:1]
            cases.append(Case(tc.name, tc.model.graph.node[0].op_type, tc.model.SerializeToString(),
                              [_array(x) for x in ins], [_array(x) for x in outs], tc.rtol, tc.atol))
        _CASES = cases
    return _CASES


def _array(x):
    """numpy scalars and TensorProtos as arrays; sequences and optionals stay as they are."""
    from onnx import TensorProto, numpy_helper
    if isinstance(x, np.generic):
        return np.asarray(x)
    if isinstance(x, TensorProto):
        try:
            return numpy_helper.to_array(x)
        except Exception:  # noqa: BLE001 - element types numpy cannot hold
            return x
    return x


def select(cases, ops=None, patterns=None, scope=True) -> list[Case]:
    ops = set(ops) if ops else (set(SCOPE_OPS) if scope else None)
    out = [c for c in cases if ops is None or c.op in ops]
    if patterns:
        out = [c for c in out if any(fnmatch.fnmatchcase(c.name, p) for p in patterns)]
    return out


def load_exclusions(path: str = DEFAULT_EXCLUSIONS) -> dict[str, tuple[str, str]]:
    """{case name: (category, reason)} from the exclusion file (a Python module defining
    EXCLUSIONS)."""
    if not os.path.isfile(path):
        return {}
    return dict(runpy.run_path(path)["EXCLUSIONS"])


# -- one case ----------------------------------------------------------------------------------

def freeze_shape_inputs(model, inputs: list):
    """Moves the inputs the op declares compile-time (`Op.const_inputs`) from graph inputs to
    initializers holding the case's values. Returns (model, feeds {name: array}, frozen names)."""
    from onnx import numpy_helper

    from glowpy.ir.ops import get_op, has_op
    node = model.graph.node[0]
    const_idx = get_op(node.op_type).const_inputs if has_op(node.op_type) else ()
    const_names = {node.input[i] for i in const_idx if i < len(node.input) and node.input[i]}
    graph_inputs = [vi for vi in model.graph.input
                    if vi.name not in {t.name for t in model.graph.initializer}]
    feeds, frozen, keep = {}, [], []
    for vi, value in zip(graph_inputs, inputs):
        if vi.name in const_names and isinstance(value, np.ndarray):
            model.graph.initializer.append(numpy_helper.from_array(value, vi.name))
            frozen.append(vi.name)
        else:
            feeds[vi.name] = value
            keep.append(vi)
    del model.graph.input[:]
    model.graph.input.extend(keep)
    return model, feeds, frozen


def compare(got: list, expected: list, rtol: float, atol: float):
    """onnx's backend-runner comparison; raises AssertionError."""
    if len(got) != len(expected):
        raise AssertionError(f"{len(got)} outputs, expected {len(expected)}")
    for i, (g, e) in enumerate(zip(got, expected)):
        e = np.asarray(e)
        if g.shape != e.shape:
            raise AssertionError(f"output {i}: shape {list(g.shape)}, expected {list(e.shape)}")
        if g.dtype != e.dtype:
            raise AssertionError(f"output {i}: dtype {g.dtype}, expected {e.dtype}")
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=f"output {i}")


def run_case(case: Case, workdir: str | None = None, keep: bool = False) -> Result:
    """Compiles, links and runs one case; never raises (the outcome is in the Result)."""
    import onnx

    import glowpy
    from glowpy.runtime import Bundle
    t0 = time.perf_counter()
    d = tempfile.mkdtemp(prefix=f"{case.name}-", dir=workdir)
    frozen = []
    try:
        if any(not isinstance(x, np.ndarray) for x in case.inputs + case.outputs):
            return Result(case.name, case.op, "error", "inputs or outputs are not tensors "
                          "(sequence/optional values)", time.perf_counter() - t0)
        model = onnx.ModelProto.FromString(case.model_bytes)
        model, feeds, frozen = freeze_shape_inputs(model, case.inputs)
        path = os.path.join(d, "model.onnx")
        onnx.save(model, path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            info = glowpy.compile(path, os.path.join(d, "bundle"), network_name="net")
        res = Bundle(os.path.join(d, "bundle"), info.name).run(feeds, timeout=120)
        got = [res[p["name"]] for p in info.outputs]
        compare(got, case.outputs, case.rtol, case.atol)
        return Result(case.name, case.op, "pass", "", time.perf_counter() - t0, frozen)
    except AssertionError as e:
        msg = " ".join(str(e).split())
        return Result(case.name, case.op, "fail", msg[:300], time.perf_counter() - t0, frozen)
    except Exception as e:  # noqa: BLE001 - every failure is a result, not a crash of the run
        from glowpy.errors import GlowpyError
        msg = f"{type(e).__name__}: {e}" if not isinstance(e, GlowpyError) else str(e)
        if not isinstance(e, GlowpyError) and os.environ.get("GLOWPY_CONFORMANCE_TRACE"):
            msg += "\n" + traceback.format_exc()
        return Result(case.name, case.op, "error", " ".join(msg.split())[:300],
                      time.perf_counter() - t0, frozen)
    finally:
        if not keep:
            shutil.rmtree(d, ignore_errors=True)


def _run_payload(args):
    return run_case(*args)


def run_cases(cases: list[Case], jobs: int = 1, progress=None) -> list[Result]:
    """Runs cases in order (jobs > 1: in that many spawned worker processes)."""
    results = []
    if jobs <= 1:
        for c in cases:
            r = run_case(c)
            results.append(r)
            if progress:
                progress(r)
        return results
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as ex:
        for r in ex.map(_run_payload, [(c,) for c in cases]):
            results.append(r)
            if progress:
                progress(r)
    return results
