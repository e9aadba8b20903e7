"""SIGINT and SIGTERM end a compile with one line and status 130 / 143, remove the temporary
directory and the directories the compile created, and leave a previous bundle as it was.

The real CLI runs in a child process. Signals at chosen points (while the files are written,
between two of the moves, during the restore, inside a finalizer, where the interpreter drops
the handler's exception, and at exit) come from a hook in the child that signals itself there:
timing alone cannot hit a window of microseconds. Two more tests signal a larger model after a
delay, from outside, early and late in its code generation."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from hostile import MNIST, snapshot

SHARED = os.path.dirname(MNIST)
YUNET = os.path.join(SHARED, "yunet_s_320.onnx")
STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}
LINE = {signal.SIGINT: "model-compiler: error: interrupted (SIGINT)",
        signal.SIGTERM: "model-compiler: error: terminated (SIGTERM)"}

# hooks run in the child before main(): each signals the process itself at one point
HOOKS = {
    "none": "",
    # the five files are complete in the temporary directory, nothing is moved yet
    "written": """
import glowpy.codegen.bundle as bw
_w = bw.write_bundle
def write_bundle(*a, **k):
    _w(*a, **k)
    os.kill(os.getpid(), SIG)
bw.write_bundle = write_bundle
""",
    # between the moves into place (three of the previous files are already in the backup)
    "moving": """
import glowpy.output as c
_r, _n = os.replace, [0]
def replace(src, dst):
    _r(src, dst)
    _n[0] += 1
    if _n[0] == 5:
        os.kill(os.getpid(), SIG)
c.os = type(os)("os_hooked"); c.os.__dict__.update(os.__dict__); c.os.replace = replace
""",
    # a second signal while the previous bundle is put back
    "restoring": """
import glowpy.output as c
_u = c._undo
def undo(moved, *a):
    if moved:
        os.kill(os.getpid(), SIG)
    _u(moved, *a)
c._undo = undo
""",
    # the handler runs inside a __del__ during codegen, where its exception is only printed and
    # dropped by the interpreter (how a CI run's SIGINT ended a compile with status 0)
    "swallowed": """
import glowpy.codegen.module as m
_b = m.build_module
class Swallowed:
    def __del__(self):
        os.kill(os.getpid(), SIG)
        for _ in range(100):  # bytecodes after the kill: the handler runs here
            pass
def build_module(*a, **k):
    Swallowed()
    return _b(*a, **k)
m.build_module = build_module
""",
    # after main() has returned, while the interpreter shuts down
    "exiting": """
import atexit
def late():
    os.kill(os.getpid(), SIG)
    for _ in range(100):
        pass
atexit.register(late)
""",
}
HOOKS["restoring"] = HOOKS["moving"] + HOOKS["restoring"]
# the signal handled inside onnx's extension init, while its nanobind code builds an enum class
# through Python (an exception there aborted the process: status -6)
HOOKS["native_init"] = """
import enum, sys, importlib.abc
armed = []
class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "onnx.onnx_cpp2py_export":
            armed.append(name)
sys.meta_path.insert(0, Finder())
_setattr = enum.EnumType.__setattr__
def setattr_(cls, name, value):
    if armed and armed.pop():
        os.kill(os.getpid(), SIG)
        for _ in range(100):
            pass
    return _setattr(cls, name, value)
enum.EnumType.__setattr__ = setattr_
"""


def default_sigint():
    """preexec_fn of every child here: it starts with the default SIGINT disposition whatever
    ours is. A suite started in the background of a non-interactive shell (CI) inherits SIGINT
    ignored, and Python then (rightly) installs no KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def child(hook: str, sig: int, *args) -> subprocess.Popen:
    code = (f"import os\nSIG = {int(sig)}\n{HOOKS[hook]}\n"
            "from glowpy.cli import main\nmain()\n")
    return subprocess.Popen([sys.executable, "-c", code, *[str(a) for a in args]],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_sigint)


def finish(p: subprocess.Popen, sig: int, timeout: float = 300):
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == STATUS[sig], (p.returncode, err)
    assert err.splitlines() == [LINE[sig]] and out == ""


def previous_bundle(tmp_path):
    """out/ with a compiled mnist8 bundle and a foreign file; returns (out, its snapshot)."""
    out = tmp_path / "out"
    p = child("none", 0, f"-model={MNIST}", f"-emit-bundle={out}")
    assert p.wait(timeout=300) == 0
    (out / "notes.txt").write_text("mine")
    return out, snapshot(out)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
@pytest.mark.parametrize("hook", ["written", "moving", "restoring"])
def test_signal_at_a_point_restores_the_previous_bundle(tmp_path, hook, sig):
    out, before = previous_bundle(tmp_path)
    # -O=0 changes the manifest, so a bundle that was not restored would show
    finish(child(hook, sig, f"-model={MNIST}", f"-emit-bundle={out}", "-O=0"), sig)
    assert snapshot(out) == before


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_signal_swallowed_in_a_finalizer_still_ends_the_compile(tmp_path, sig):
    out, before = previous_bundle(tmp_path)
    finish(child("swallowed", sig, f"-model={MNIST}", f"-emit-bundle={out}", "-O=0"), sig)
    assert snapshot(out) == before


def test_a_command_ends_with_a_signal_it_swallowed(tmp_path):
    """bundle-info, which writes no file: the signal swallowed while it read the bundle ends it
    with 143 and one line once its work returns (before: status 0)."""
    out, _ = previous_bundle(tmp_path)
    code = ("import os, signal\nimport glowpy.bundle_info as bi\n_d = bi.describe\n"
            "class Swallowed:\n    def __del__(self):\n"
            "        os.kill(os.getpid(), signal.SIGTERM)\n"
            "        for _ in range(100):\n            pass\n"
            "def describe(*a):\n    Swallowed()\n    return _d(*a)\n"
            "bi.describe = describe\nbi.main()\n")
    r = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True,
                       timeout=300, preexec_fn=default_sigint)
    assert r.returncode == 143
    assert r.stderr.splitlines() == ["bundle-info: error: terminated (SIGTERM)"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_signal_after_the_work_is_done_is_ignored(tmp_path, sig):
    """The bundle is in place and the process exits 0 without a word (before: a traceback-less
    death by the signal, or an "Exception ignored" report)."""
    out, before = previous_bundle(tmp_path)
    p = child("exiting", sig, f"-model={MNIST}", f"-emit-bundle={out}", "-O=0")
    o, e = p.communicate(timeout=300)
    assert (p.returncode, e, o) == (0, "", "")
    after = snapshot(out)
    assert after != before and after["notes.txt"] == before["notes.txt"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_signal_while_writing_removes_created_directories(tmp_path, sig):
    finish(child("written", sig, f"-model={MNIST}", f"-emit-bundle={tmp_path}/new/sub"), sig)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_signal_inside_an_extension_init(tmp_path, sig):
    """During onnx's import its native init calls Python (enum classes): the signal is recorded
    there and raised at the next checkpoint, one line, status 130 / 143, nothing written."""
    finish(child("native_init", sig, f"-model={MNIST}", f"-emit-bundle={tmp_path}/out"), sig)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("sig,delay", [(signal.SIGINT, 0.8), (signal.SIGTERM, 3.0)],
                         ids=["INT-early", "TERM-late"])
def test_signal_from_outside_after_a_delay(tmp_path, sig, delay):
    """yunet takes ~9 s to compile here (code generation from ~0.3 s); a signal during a native
    LLVM call takes effect when the call returns, so the child is given time to end."""
    out, before = previous_bundle(tmp_path)
    p = child("none", 0, f"-model={YUNET}", f"-emit-bundle={out}", "-network-name=mnist8")
    time.sleep(delay)
    assert p.poll() is None, "the compile ended before the signal"
    p.send_signal(sig)
    finish(p, sig)
    assert snapshot(out) == before


def holds_open(pid: int, suffix: str) -> bool:
    """Whether process `pid` has a file whose path ends in `suffix` open (Linux /proc)."""
    fds = f"/proc/{pid}/fd"
    for fd in os.listdir(fds):
        try:
            if os.readlink(os.path.join(fds, fd)).endswith(suffix):
                return True
        except OSError:  # closed meanwhile
            pass
    return False


# the signal handled in the main thread just after it took llvmlite's process-wide lock (its
# lock callbacks run inside _LLVMLock.__enter__), while the parallel optimization's workers run
LLVM_LOCK_HOOK = """
import threading
from llvmlite.binding import ffi
import glowpy.codegen.optimize as opt
armed = []
class Pool(opt.ThreadPoolExecutor):
    def submit(self, *a, **k):  # armed once a part is running: at the next part's machine
        f = super().submit(*a, **k)
        armed.append(1)
        return f
opt.ThreadPoolExecutor = Pool
def acquired():
    if armed and threading.current_thread() is threading.main_thread():
        armed.clear()
        os.kill(os.getpid(), SIG)
        for _ in range(100):
            pass
ffi.register_lock_callback(acquired, lambda: None)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_signal_inside_llvm_lock_during_parallel_optimization(tmp_path, sig):
    """A CI run hung here: yunet's parts were being optimized on worker threads, and SIGTERM
    raised in the main thread inside llvmlite's lock acquisition left the lock held; the
    workers waited for it and the main thread for them. The signal now ends the compile once
    the parts are done, with the one line and the previous bundle back."""
    out, before = previous_bundle(tmp_path)
    HOOKS["llvm_lock"] = LLVM_LOCK_HOOK
    p = child("llvm_lock", sig, f"-model={YUNET}", f"-emit-bundle={out}", "-network-name=mnist8")
    finish(p, sig, timeout=120)
    assert snapshot(out) == before


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["INT", "TERM"])
def test_signal_while_waiting_for_the_directory_lock(tmp_path, sig):
    """Another compile holds out/.glowpy.lock: this one waits for it (up to output.LOCK_WAIT,
    300 s) with the signals held back around taking it, and a signal during the wait still
    ends the compile at once, the previous bundle untouched."""
    import fcntl
    out, before = previous_bundle(tmp_path)
    lock = open(out / ".glowpy.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    p = child("none", 0, f"-model={MNIST}", f"-emit-bundle={out}")
    t = time.monotonic()
    while not holds_open(p.pid, ".glowpy.lock"):  # then it is waiting: its flock polls the file
        assert p.poll() is None and time.monotonic() - t < 120
        time.sleep(0.02)
    time.sleep(0.2)
    p.send_signal(sig)
    o, e = p.communicate(timeout=60)
    assert (p.returncode, e.splitlines(), o) == (STATUS[sig], [LINE[sig]], "")
    lock.close()
    assert {k: v for k, v in snapshot(out).items() if k != ".glowpy.lock"} == before


def profiler_child(tmp_path, hook: str, *args) -> subprocess.CompletedProcess:
    """model-profiler over mnist8's reference input, `hook` run first in the child."""
    data = os.path.join(SHARED, "mnist8_data", "test_data_set_0", "input_0.pb")
    import onnx
    from onnx import numpy_helper
    t = onnx.TensorProto()
    with open(data, "rb") as f:
        t.ParseFromString(f.read())
    np.save(tmp_path / "x.npy", numpy_helper.to_array(t))
    code = f"import os, signal\nimport glowpy.profiler as p\n{hook}\np.main()\n"
    return subprocess.run([sys.executable, "-c", code, f"-model={MNIST}",
                           f"-input-dataset={t.name or 'Input3'},npy,{tmp_path / 'x.npy'}",
                           f"-dump-profile={tmp_path / 'p.yaml'}", *args],
                          capture_output=True, text=True, timeout=300, preexec_fn=default_sigint)


def test_profiler_interrupted(tmp_path):
    r = profiler_child(tmp_path, "_r = p.profiling_graph\n"
                       "def g(*a):\n    os.kill(os.getpid(), signal.SIGTERM)\n    return _r(*a)\n"
                       "p.profiling_graph = g")
    assert r.returncode == 143
    assert r.stderr.splitlines() == ["model-profiler: error: terminated (SIGTERM)"]
    assert not os.path.exists(tmp_path / "p.yaml")


def test_profiler_signal_swallowed_in_a_finalizer_writes_no_profile(tmp_path):
    """The run over the samples goes on after the swallowed signal; the profile is not
    written and the status is 130 (before: the profile written and status 0)."""
    r = profiler_child(tmp_path, "_r = p.profiling_graph\n"
                       "class Swallowed:\n    def __del__(self):\n"
                       "        os.kill(os.getpid(), signal.SIGINT)\n"
                       "        for _ in range(100):\n            pass\n"
                       "def g(*a):\n    Swallowed()\n    return _r(*a)\n"
                       "p.profiling_graph = g")
    assert r.returncode == 130
    assert r.stderr.splitlines() == ["model-profiler: error: interrupted (SIGINT)"]
    assert not os.path.exists(tmp_path / "p.yaml")
