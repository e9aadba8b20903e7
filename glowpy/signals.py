"""SIGINT and SIGTERM as an exception, so that an interrupted compile unwinds through the same
`finally` blocks as a failed one (the temporary directory and created directories removed, the
previous bundle restored) and ends with one line and status 130 / 143.

Python runs a signal handler in the main thread between bytecodes: a signal that arrives while
LLVM (or numpy) runs native code takes effect when that call returns. `deferred()` holds a
signal back over a step that must not be cut in half (moving the bundle's files into place, and
putting the previous ones back); the signal is raised when the step is over.

The raise itself can be lost: the interpreter runs the handler between any two bytecodes, and
inside a `__del__` or a weakref callback (llvmlite frees its LLVM objects from `__del__`) an
exception only reaches `sys.unraisablehook` and the code around goes on. A fresh-clone CI run
saw a SIGINT end a compile with status 0 that way. So the handler also records the signal, and
`checkpoint()` raises a recorded one that was swallowed: at each compile stage, before any file
is written (output.write_dump, output.publish) and when a command's work returns (cli._run).
The unraisable hook stays quiet about it. A signal that arrives during an import is only
recorded, for the same checkpoints to raise: a module's native init may be running Python code
(onnx's extension builds its enum classes), and an exception thrown through it ends the
process with abort()."""
from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager

NAMES = {signal.SIGINT: ("interrupted", "SIGINT"), signal.SIGTERM: ("terminated", "SIGTERM")}


class Interrupted(BaseException):
    """A BaseException, like KeyboardInterrupt: `except Exception` in the compiler must not
    swallow it, and typer (which turns KeyboardInterrupt into a silent Exit(130)) lets it by."""

    def __init__(self, signum: int):
        verb, name = NAMES[signum]
        super().__init__(f"{verb} ({name})")
        self.signum = signum
        self.exit_code = 128 + signum


_state = threading.local()
_received: list[int] = []  # signals the handler ran for; emptied when one is dropped on purpose


def _depth() -> int:
    return getattr(_state, "depth", 0)


def _importing(frame) -> bool:
    """Is an import under way in this frame's stack (Python frames link across native calls)?"""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _handler(signum, frame):
    _received.append(signum)
    if _depth():
        _state.pending = getattr(_state, "pending", None) or signum
        return
    if _importing(frame):
        # an extension's module init may be calling back into Python (onnx's nanobind types
        # build enum classes): an exception thrown there aborts the process (a fresh-clone CI
        # run: status -6 for a SIGINT 0.8 s into a compile). The next checkpoint() raises it.
        return
    raise Interrupted(signum)


@contextmanager
def handled(final: bool = False):
    """Installs the handlers for the duration (main thread only; elsewhere a no-op). A signal
    ignored when the process started (nohup, `cmd &` in a script) stays ignored. `final`: the
    process exits after the block, and the signals are ignored from then on instead of the
    old handlers restored (see cli.exit_main)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.getsignal(s) for s in NAMES}
    old_hook = sys.unraisablehook
    del _received[:]

    def unraisable(info):
        if not isinstance(info.exc_value, Interrupted):  # a swallowed one: checkpoint() raises it
            old_hook(info)
    try:
        sys.unraisablehook = unraisable
        for s, h in old.items():
            if h is not signal.SIG_IGN:
                signal.signal(s, _handler)
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, signal.SIG_IGN if final else h)
        sys.unraisablehook = old_hook
        del _received[:]  # nothing recorded here may stop work done outside the block


def checkpoint():
    """Raises Interrupted for a signal whose exception was swallowed (see the module's text).
    A signal whose exception did propagate has ended the work before any checkpoint runs."""
    if _received and not _depth():
        raise Interrupted(_received[0])


def held() -> int | None:
    """The signal deferred() holds back at the moment, if any (a wait inside the block may end
    on it: output._Lock)."""
    return getattr(_state, "pending", None) if _depth() else None


@contextmanager
def deferred(raise_pending: bool = True):
    """Holds SIGINT/SIGTERM back inside the block; on leaving it, a held signal is raised as
    Interrupted (or, with raise_pending=False, dropped: the work it would stop is done)."""
    _state.depth = _depth() + 1
    try:
        yield
    finally:
        _state.depth -= 1
        if not _state.depth:
            signum, _state.pending = getattr(_state, "pending", None), None
            if not raise_pending:
                del _received[:]  # dropped, and one swallowed earlier with it
            elif signum is not None:
                raise Interrupted(signum)
