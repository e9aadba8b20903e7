"""Outputs shared with others: -dump-* files written through symbolic links and into FIFOs
(never replaced by a regular file), and compiles into one directory taking turns on its
`.glowpy.lock`."""
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

import glowpy.output
from hostile import MNIST, cli, one_error, snapshot

BUNDLE = {"mnist8.o", "mnist8.h", "mnist8.weights.bin", "mnist8.weights.txt", "mnist8.json"}
DUMPS = ["dump-llvm-ir", "dump-memory-report", "dump-graph-DAG", "dump-graph-DAG-before-compile",
         "dump-report"]
USAGE = "give a file, a link to a file, a FIFO or a new path"


@pytest.mark.parametrize("option", DUMPS)
def test_dump_through_a_symbolic_link_keeps_the_link(capsys, tmp_path, option):
    target = tmp_path / "real.txt"
    target.write_text("old")
    (tmp_path / "link").symlink_to(target)
    rc, lines, _ = cli(capsys, f"-model={MNIST}", f"-emit-bundle={tmp_path}/out",
                       f"-{option}={tmp_path}/link")
    assert rc == 0, lines
    assert os.readlink(tmp_path / "link") == str(target)
    assert len(target.read_text()) > 100
    assert set(os.listdir(tmp_path)) == {"real.txt", "link", "out"}


@pytest.mark.parametrize("option", DUMPS)
def test_dump_into_a_fifo_is_read_by_its_reader(capsys, tmp_path, option):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo).read()), daemon=True)
    reader.start()
    rc, lines, _ = cli(capsys, f"-model={MNIST}", f"-emit-bundle={tmp_path}/out",
                       f"-{option}={fifo}")
    reader.join(60)
    assert rc == 0, lines
    assert os.path.exists(fifo) and not os.path.isfile(fifo)  # still the FIFO
    assert len(got) == 1 and len(got[0]) > 100


def test_dump_to_dev_null(capsys, tmp_path):
    """A character device is written through: -dump-llvm-ir=/dev/null stays a device."""
    rc, lines, _ = cli(capsys, f"-model={MNIST}", f"-emit-bundle={tmp_path}/out",
                       "-dump-llvm-ir=/dev/null")
    assert rc == 0, lines
    assert not os.path.isfile("/dev/null") and os.path.exists("/dev/null")


def test_dump_to_a_new_path_and_over_a_regular_file(capsys, tmp_path):
    (tmp_path / "old.ll").write_text("old")
    rc, lines, _ = cli(capsys, f"-model={MNIST}", f"-emit-bundle={tmp_path}/out",
                       f"-dump-llvm-ir={tmp_path}/old.ll", f"-dump-graph-DAG={tmp_path}/new.dot")
    assert rc == 0, lines
    assert (tmp_path / "old.ll").read_text().startswith("; ModuleID")
    assert (tmp_path / "new.dot").read_text().startswith("digraph")
    assert set(os.listdir(tmp_path)) == {"old.ll", "new.dot", "out"}


@pytest.mark.parametrize("kind", ["directory", "dangling link", "socket"])
def test_dump_to_something_else_is_refused(capsys, tmp_path, kind):
    p = tmp_path / "x"
    if kind == "directory":
        p.mkdir()
    elif kind == "dangling link":
        p.symlink_to(tmp_path / "nowhere")
    else:
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(p))
    before = snapshot(tmp_path)
    msg = one_error(capsys, f"-model={MNIST}", f"-emit-bundle={tmp_path}/out",
                    f"-dump-llvm-ir={p}", status=2)
    what = {"directory": "is a directory", "dangling link": "is a symbolic link to nothing",
            "socket": "is neither a regular file, a FIFO nor a character device"}[kind]
    assert msg == f"-dump-llvm-ir={p}: {what}; {USAGE}"
    assert snapshot(tmp_path) == before


HOOK = """
import os, sys, time
import glowpy.output as o
_r, READY = os.replace, sys.argv.pop()
def replace(src, dst):  # slow moves: the other compile must not get between them
    open(READY, "a").close()
    time.sleep(0.3)
    _r(src, dst)
o.os = type(os)("os_hooked"); o.os.__dict__.update(os.__dict__); o.os.replace = replace
from glowpy.cli import main
main()
"""


def test_concurrent_compiles_into_one_directory_take_turns(tmp_path):
    """A's moves are slow; B starts during them, waits for the lock and publishes after A, so
    the directory ends with B's bundle, whole, and no lock file."""
    alone = tmp_path / "alone"
    subprocess.run([sys.executable, "-c", "from glowpy.cli import main; main()",
                    f"-model={MNIST}", f"-emit-bundle={alone}", "-O=0"], check=True)
    out, ready = tmp_path / "out", tmp_path / "ready"
    a = subprocess.Popen([sys.executable, "-c", HOOK, f"-model={MNIST}", f"-emit-bundle={out}",
                          str(ready)], stderr=subprocess.PIPE, text=True)
    t = time.monotonic()
    while not ready.exists():
        assert a.poll() is None and time.monotonic() - t < 120
        time.sleep(0.02)
    assert os.path.exists(out / ".glowpy.lock")
    b = subprocess.run([sys.executable, "-c", "from glowpy.cli import main; main()",
                        f"-model={MNIST}", f"-emit-bundle={out}", "-O=0"],
                       capture_output=True, text=True, timeout=300)
    assert a.wait(300) == 0 and a.stderr.read() == ""
    assert b.returncode == 0 and b.stderr == ""
    assert set(os.listdir(out)) == BUNDLE
    assert {k: v[1] for k, v in snapshot(out).items()} == \
        {k: v[1] for k, v in snapshot(alone).items()}


def test_a_lock_held_too_long_is_one_line(capsys, tmp_path, monkeypatch):
    import fcntl
    out = tmp_path / "out"
    out.mkdir()
    lock = open(out / ".glowpy.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    monkeypatch.setattr(glowpy.output, "LOCK_WAIT", 0.5)
    before = snapshot(out)
    msg = one_error(capsys, f"-model={MNIST}", f"-emit-bundle={out}", status=2)
    assert msg == (f"-emit-bundle={out}: another compile into this directory has held "
                   ".glowpy.lock for more than 0.5 s; try again when it has finished")
    assert snapshot(out) == before
    lock.close()
    rc, _, _ = cli(capsys, f"-model={MNIST}", f"-emit-bundle={out}")
    assert rc == 0 and set(os.listdir(out)) == BUNDLE | {".glowpy.lock"}  # not its file
