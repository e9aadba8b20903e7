"""Helpers for the robustness tests: run model-compiler in-process and capture its one error
line, build small (hostile) ONNX models, and snapshot directories."""
from __future__ import annotations

import hashlib
import os
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MNIST = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                     "shared", "models", "mnist8.onnx")
PREFIX = "model-compiler: error: "


def cli(capsys, *args) -> tuple[int, list[str], str]:
    """Runs model-compiler in this process; returns (exit status, stderr lines, stdout)."""
    import typer

    from glowpy.cli import app, run
    capsys.readouterr()
    rc = run([str(a) for a in args], "model-compiler", typer.main.get_command(app))
    out = capsys.readouterr()
    return rc, out.err.splitlines(), out.out


def one_error(capsys, *args, status: int) -> str:
    """Runs model-compiler, asserts it failed with `status` and printed exactly one line
    `model-compiler: error: ...` (warnings aside) and no traceback; returns the message."""
    rc, lines, _ = cli(capsys, *args)
    errors = [x for x in lines if not x.startswith("model-compiler: warning: ")]
    assert rc == status, f"exit {rc}, expected {status}: {lines}"
    assert len(errors) == 1, f"expected one error line, got {errors}"
    assert errors[0].startswith(PREFIX), errors[0]
    assert "Traceback" not in "\n".join(lines)
    return errors[0][len(PREFIX):]


HANG_GUARD = 30  # seconds: only a hang guard, the refusals take milliseconds


def refused(capsys, tmp_path, m, *args, status=1) -> str:
    """Compiles model `m` with the CLI; asserts one error line with `status`, within the hang
    guard, and no output directory; returns the message."""
    out = tmp_path / "out"
    t0 = time.monotonic()
    msg = one_error(capsys, f"-model={save(m, tmp_path / 'm.onnx')}", f"-emit-bundle={out}", *args,
                    status=status)
    assert time.monotonic() - t0 < HANG_GUARD
    assert not out.exists()
    return msg


def vi(name, shape, et=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, et, shape)


def model(nodes, inputs, outputs, inits=(), opset=17, name="g", **kw) -> onnx.ModelProto:
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits), **kw)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="glowpy-tests")
    m.ir_version = 8
    return m


def relu_model(name="x", out="y", shape=(2, 3)) -> onnx.ModelProto:
    return model([helper.make_node("Relu", [name], [out], name="relu")],
                 [vi(name, list(shape))], [vi(out, list(shape))])


def save(m: onnx.ModelProto, path) -> str:
    path = str(path)
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    return path


def const(name, array) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def snapshot(d) -> dict:
    """{relative path: (kind, sha256 or link target, mtime_ns)} of everything under d."""
    out = {}
    d = str(d)
    if not os.path.lexists(d):
        return out
    for root, dirs, files in os.walk(d):
        for n in dirs + files:
            p = os.path.join(root, n)
            rel = os.path.relpath(p, d)
            st = os.lstat(p)
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p), st.st_mtime_ns)
            elif os.path.isdir(p):
                out[rel] = ("dir", None, None)
            elif not os.path.isfile(p):  # FIFO, socket, device: never opened
                out[rel] = ("special", None, st.st_mtime_ns)
            else:
                with open(p, "rb") as f:
                    out[rel] = ("file", hashlib.sha256(f.read()).hexdigest(), st.st_mtime_ns)
    return out


def cli_limited(*args, memory=2 << 30, seconds=120) -> tuple[int, list[str]]:
    """model-compiler in a child process with an address-space limit and a time limit, for
    inputs that would exhaust the machine if a check regressed; returns (status, stderr lines)."""
    import resource
    import subprocess
    import sys

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    r = subprocess.run([sys.executable, "-c", "from glowpy.cli import main; main()",
                        *[str(a) for a in args]], capture_output=True, text=True,
                       timeout=seconds, preexec_fn=limit)
    return r.returncode, r.stderr.splitlines()
