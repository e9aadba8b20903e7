"""The process-wide LLVM state the target modules share: target registration, and the capture of
file descriptor 2, where LLVM writes its warnings (an unknown CPU or feature is only a warning
to LLVM, which then ignores it)."""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading

import llvmlite.binding as llvm

_init_lock = threading.Lock()
_initialized = False


def initialize_llvm() -> None:
    """Register all targets, their MC layers and asm printers (idempotent).

    llvmlite 0.50 initializes the LLVM core by itself (``llvm.initialize()``
    now raises), but targets and asm printers must still be registered before
    ``Target.from_triple`` and object emission work for non-native targets.
    """
    global _initialized
    if _initialized:
        return
    with _init_lock:
        if not _initialized:
            llvm.initialize_all_targets()
            llvm.initialize_all_asmprinters()
            _initialized = True


_capture_lock = threading.RLock()


@contextlib.contextmanager
def capture_fd2(sink: list):
    """Redirect file descriptor 2 into a temporary file; append its text to sink."""
    with _capture_lock:
        try:
            sys.stderr.flush()
        except Exception:  # pragma: no cover - exotic stderr replacements
            pass
        with tempfile.TemporaryFile() as tmp:
            saved = os.dup(2)
            try:
                os.dup2(tmp.fileno(), 2)
                try:
                    yield
                finally:
                    os.dup2(saved, 2)
            finally:
                os.close(saved)
            tmp.seek(0)
            sink.append(tmp.read().decode("utf-8", errors="replace"))
