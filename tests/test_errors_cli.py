"""Usage errors: every malformed command line is one line `model-compiler: error: ...` naming
the option, exit status 2, no traceback, and nothing written."""
import os
import subprocess
import sys

import pytest

from hostile import MNIST, PREFIX, cli, one_error, snapshot


@pytest.mark.parametrize("args, expect", [
    (["-bogus=1"], r"No such option: -bogus"),
    (["-O=x"], r"'-O'"),
    (["-O=7"], r"^-O=7: expected an optimization level from 0 to 3$"),
    (["-bundle-api=fancy"], r"^-bundle-api=fancy: expected static or dynamic$"),
    (["-backend=GPU"], r"^-backend=GPU is not available"),
    (["-max-region-size=12Q"], r"^-max-region-size=12Q: expected a positive byte count"),
    (["-max-region-size=0"], r"^-max-region-size=0: expected a positive byte count"),
    (["-target=nonsense-cpu"], r"-target"),
    (["-mcpu=no-such-cpu"], r"-mcpu=no-such-cpu"),
    (["-model-input=x,float,[2,0]"], r"^-model-input=x,float,\[2,0\]: dimensions must be positive$"),
    (["-model-input=x,complex,[2]"], r"^-model-input=x,complex,\[2\]: expected name,type"),
    (["-model-input=nosuch,float,[1,1,28,28]"], r"^-model-input names 'nosuch', which the model "
                                                r"does not have as inputs \(inputs: Input3\)$"),
    (["-onnx-define-symbol=N"], r"^-onnx-define-symbol=N: expected name,value"),
    (["-reuse-activation-memory-allocations=maybe"], r"^-reuse-activation-memory-allocations=maybe"),
    (["-network-name=../../etc/evil"], r"^-network-name=../../etc/evil: the bundle's file name "
                                       r"must be a plain file name, not a path$"),
    (["-network-name=a\nb"], r"^-network-name=a\\nb: the bundle's file name must be printable"),
    (["-network-name=static"], r"^-network-name=static: the entry function 'static' is a C/C\+\+ "
                               r"keyword"),
    (["-main-entry-name=memcpy"], r"^-main-entry-name=memcpy: the entry function 'memcpy'"),
    (["-main-entry-name=k0_Conv"], r"internal kernel functions"),
    (["-main-entry-name=mnist8_config", "-bundle-api=dynamic"], r"would clash with the bundle's "
                                                                r"own symbol"),
    (["-network-name=glow"], r"GLOW_MEM_ALIGN would redefine"),
    (["-verbose=3"], r"'-verbose' does not take a value"),
    (["-main-entry-name="], r"^-main-entry-name is empty; give the entry function's name, or "
                            r"leave the option out to use the network name$"),
    (["-model-input=Input3,float,[1,1,28,28]", "-model-input=Input3,float,[2,1,28,28]"],
     r"^-model-input: input 'Input3' is given more than once; give each input's type and "
     r"shape once$"),
    (["-onnx-define-symbol=N,2", "-onnx-define-symbol=N,3"],
     r"^-onnx-define-symbol: symbol 'N' is given more than once \(2 and 3\); give each "
     r"symbol once$"),
    (["unexpected_positional"], r"unexpected extra argument"),
])
def test_usage_error(capsys, tmp_path, args, expect):
    import re
    out = tmp_path / "out"
    msg = one_error(capsys, f"-model={MNIST}", f"-emit-bundle={out}", *args, status=2)
    assert re.search(expect, msg), msg
    assert not out.exists()


@pytest.mark.parametrize("args, expect", [
    ([], "-model is required"),
    ([f"-model={MNIST}"], "-emit-bundle is required"),
    (["-model"], "Option '-model' requires an argument"),
])
def test_missing_option(capsys, args, expect):
    assert expect in one_error(capsys, *args, status=2)


def test_internal_error_is_one_line_and_traceback_only_with_verbose(capsys, tmp_path, monkeypatch):
    import glowpy.compiler

    def boom(*a, **k):
        raise RuntimeError("simulated bug\nsecond line")
    monkeypatch.setattr(glowpy.compiler, "compile_model", boom)
    msg = one_error(capsys, f"-model={MNIST}", f"-emit-bundle={tmp_path}/o", status=1)
    assert msg == ("internal error: RuntimeError: simulated bug\\nsecond line (rerun with -verbose "
                   "and report it)")
    rc, lines, _ = cli(capsys, f"-model={MNIST}", f"-emit-bundle={tmp_path}/o", "-verbose")
    assert rc == 1 and "Traceback (most recent call last):" in lines
    assert lines[-1].startswith(PREFIX + "internal error: RuntimeError")


@pytest.mark.parametrize("arg", ["-verbose-not", "-verbosely", "--verbose_x=1"])
def test_only_the_verbose_option_turns_tracebacks_on(capsys, tmp_path, monkeypatch, arg):
    """An unknown option that merely starts with "verbose" is a usage error without traceback."""
    rc, lines, _ = cli(capsys, f"-model={MNIST}", f"-emit-bundle={tmp_path}/o", arg)
    assert rc == 2 and len(lines) == 1 and lines[0].startswith(PREFIX + "No such option")
    import glowpy.compiler

    def boom(*a, **k):
        raise RuntimeError("simulated bug")
    monkeypatch.setattr(glowpy.compiler, "compile_model", boom)
    for name in (["-network-name", "verbose"], [arg.lstrip("-")]):  # a value "verbose..."
        rc, lines, _ = cli(capsys, f"-model={MNIST}", f"-emit-bundle={tmp_path}/o", *name)
        assert rc in (1, 2) and len(lines) == 1 and "Traceback" not in lines[0]


def test_out_of_memory_is_a_model_error_line(capsys, tmp_path, monkeypatch):
    import glowpy.compiler

    def oom(*a, **k):
        raise MemoryError()
    monkeypatch.setattr(glowpy.compiler, "compile_model", oom)
    msg = one_error(capsys, f"-model={MNIST}", f"-emit-bundle={tmp_path}/o", status=1)
    assert msg.startswith("out of memory while compiling; lower -max-region-size")


def test_real_process_exit_status_and_single_line(tmp_path):
    """The installed entry point itself: exit status 2 and 1, one stderr line, no traceback."""
    exe = [sys.executable, "-c", "from glowpy.cli import main; main()"]
    r = subprocess.run(exe + ["-model=x.onnx", f"-emit-bundle={tmp_path}/o", "-no-such-option"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["model-compiler: error: No such option: -no-such-option"]
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage\xff\xff\xff")
    r = subprocess.run(exe + [f"-model={bad}", f"-emit-bundle={tmp_path}/o"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"model-compiler: error: '{bad}' is not a valid ONNX model "
                               "(protobuf parse error:")
    assert not os.path.exists(tmp_path / "o")


def test_usage_error_leaves_existing_output_untouched(capsys, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.c").write_text("int main(void) { return 0; }\n")
    before = snapshot(out)
    one_error(capsys, f"-model={MNIST}", f"-emit-bundle={out}", "-bundle-api=x", status=2)
    assert snapshot(out) == before


def test_library_warnings_are_one_line_and_fp_noise_is_dropped(capsys, tmp_path, monkeypatch):
    import warnings

    import numpy as np

    import glowpy.compiler
    real = glowpy.compiler.compile_model

    def noisy(*a, **k):
        np.exp(np.float32(1000))  # "overflow encountered in exp": folding a model's arithmetic
        warnings.warn("a library\nwarning", UserWarning)
        return real(*a, **k)
    monkeypatch.setattr(glowpy.compiler, "compile_model", noisy)
    rc, lines, _ = cli(capsys, f"-model={MNIST}", f"-emit-bundle={tmp_path}/o")
    assert rc == 0 and lines == ["model-compiler: warning: a library\\nwarning"]
