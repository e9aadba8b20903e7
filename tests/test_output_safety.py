"""Output safety: a bundle appears only when complete, a failed compile leaves nothing behind,
files glowpy did not write are never touched, and an output path that is a file is an error."""
import json
import os

import pytest

import glowpy
from hostile import MNIST, cli, one_error, relu_model, save, snapshot

BUNDLE = {"mnist8.o", "mnist8.h", "mnist8.weights.bin", "mnist8.weights.txt", "mnist8.json"}


def bad_model(tmp_path):
    m = relu_model()
    m.graph.node[0].op_type = "NoSuchOp"
    return save(m, tmp_path / "bad.onnx")


def test_failed_compile_creates_nothing(capsys, tmp_path):
    out = tmp_path / "a" / "b" / "out"
    one_error(capsys, f"-model={bad_model(tmp_path)}", f"-emit-bundle={out}", status=1)
    assert not (tmp_path / "a").exists()


def test_failed_compile_leaves_existing_directory_untouched(capsys, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "main.c").write_text("/* the user's application */\n")
    (out / "other.h").write_text("/* another header */\n")
    before = snapshot(out)
    one_error(capsys, f"-model={bad_model(tmp_path)}", f"-emit-bundle={out}", status=1)
    assert snapshot(out) == before


def test_late_failure_leaves_nothing(capsys, tmp_path, monkeypatch):
    """A failure after code generation (while writing the files) still leaves nothing."""
    import glowpy.codegen.bundle as bw

    def fail(directory, name, files):
        with open(os.path.join(directory, name + ".o"), "wb") as f:
            f.write(b"partial")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(bw, "write_bundle", fail)
    out = tmp_path / "new" / "out"
    msg = one_error(capsys, f"-model={MNIST}", f"-emit-bundle={out}", status=2)
    assert msg == f"cannot write the bundle into '{out}': No space left on device"
    assert not (tmp_path / "new").exists()


def test_success_adds_only_the_bundle_and_keeps_other_files(capsys, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "main.c").write_text("int main(void) { return 0; }\n")
    (out / "Makefile").write_text("all:\n")
    (out / "sub").mkdir()
    (out / "sub" / "x.txt").write_text("keep\n")
    before = snapshot(out)
    rc, lines, _ = cli(capsys, f"-model={MNIST}", f"-emit-bundle={out}")
    assert rc == 0 and lines == []
    after = snapshot(out)
    assert {k: v for k, v in after.items() if k in before} == before
    assert set(after) - set(before) == BUNDLE  # and no temporary directory left


def test_output_path_that_is_a_file(capsys, tmp_path):
    f = tmp_path / "out"
    f.write_text("precious\n")
    before = snapshot(tmp_path)
    msg = one_error(capsys, f"-model={MNIST}", f"-emit-bundle={f}", status=2)
    assert msg == f"-emit-bundle={f}: exists and is not a directory; give a directory (it is created if missing)"
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("kind", ["foreign file", "directory", "symlink"])
def test_foreign_file_with_a_bundle_name_is_not_replaced(capsys, tmp_path, kind):
    out = tmp_path / "out"
    out.mkdir()
    target = tmp_path / "elsewhere.h"
    target.write_text("/* not glowpy's */\n")
    if kind == "foreign file":
        (out / "mnist8.h").write_text("/* the user's own mnist8.h */\n")
    elif kind == "directory":
        (out / "mnist8.o").mkdir()
    else:
        os.symlink(target, out / "mnist8.h")
    before = snapshot(tmp_path)
    msg = one_error(capsys, f"-model={MNIST}", f"-emit-bundle={out}", status=2)
    what = {"foreign file": "'mnist8.h' exists and is not part of a bundle glowpy wrote (no "
                            "matching mnist8.json)",
            "directory": "'mnist8.o' exists and is a directory",
            "symlink": "'mnist8.h' exists and is a symbolic link"}[kind]
    assert msg == (f"-emit-bundle={out}: {what}; glowpy will not replace it: move it away, or "
                   "choose another -emit-bundle or -network-name")
    assert snapshot(tmp_path) == before


def test_recompiling_replaces_glowpys_own_bundle(capsys, tmp_path):
    out = tmp_path / "out"
    rc, _, _ = cli(capsys, f"-model={MNIST}", f"-emit-bundle={out}")
    first = snapshot(out)
    rc, lines, _ = cli(capsys, f"-model={MNIST}", f"-emit-bundle={out}", "-bundle-api=dynamic")
    assert rc == 0 and lines == []
    second = snapshot(out)
    assert set(second) == BUNDLE
    assert second["mnist8.h"][1] != first["mnist8.h"][1]  # replaced by the dynamic header
    assert json.loads((out / "mnist8.json").read_text())["bundle_api"] == "dynamic"


def test_failed_move_restores_the_previous_bundle(tmp_path, monkeypatch):
    """If moving the new files into place fails half way, the previous bundle comes back
    intact and nothing of the new one (or the temporary directory) remains."""
    from glowpy.errors import UsageError
    out = tmp_path / "out"
    glowpy.compile(MNIST, str(out))
    (out / "main.c").write_text("int main(void) { return 0; }\n")
    before = snapshot(out)
    real = os.replace
    calls = []

    def flaky(src, dst):
        calls.append(dst)
        if len(calls) == 5:  # old .o and .h moved aside, new .o and .h in place: then fail
            raise OSError(5, "Input/output error")
        return real(src, dst)
    monkeypatch.setattr(os, "replace", flaky)
    with pytest.raises(UsageError, match="Input/output error"):
        glowpy.compile(MNIST, str(out), bundle_api="dynamic")
    monkeypatch.setattr(os, "replace", real)
    assert snapshot(out) == before
