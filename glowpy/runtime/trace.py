"""In-process tracing of -instrument-debug bundles: the bundle's weak `NAME_instrument`
callback is resolved, before its object is loaded, to one ctypes trampoline that hands each call
to the calling thread's handler (none: the call returns at once). Session.trace uses it to copy
every instruction's outputs as it finishes, i.e. every intermediate tensor of one inference.

A trampoline call costs a few microseconds (ctypes takes the GIL back), so an instrumented
bundle run in process is slower than its plain build even when nothing is traced."""
from __future__ import annotations

import ctypes
import threading
from contextlib import contextmanager

import llvmlite.binding as llvm

_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                             ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_uint64))
_local = threading.local()


def _dispatch(kind, idx, n, addrs, sizes):
    handler = getattr(_local, "handler", None)
    if handler is None:
        return
    try:
        handler(kind, idx, [addrs[i] for i in range(n)], [int(sizes[i]) for i in range(n)])
    except BaseException as e:  # noqa: BLE001 - ctypes would only print it: keep it for later
        _local.error = e


_TRAMPOLINE = _CALLBACK(_dispatch)  # kept alive for the process's lifetime


def register(symbol: str) -> None:
    """Resolves a bundle's callback symbol to the trampoline (call before loading it)."""
    if llvm.address_of_symbol(symbol) is None:
        llvm.add_symbol(symbol, ctypes.cast(_TRAMPOLINE, ctypes.c_void_p).value)


@contextmanager
def handling(handler):
    """handler(kind, instr_id, addresses, sizes) receives this thread's callbacks."""
    _local.handler, _local.error = handler, None
    try:
        yield
    finally:
        _local.handler = None
    if _local.error is not None:
        raise _local.error
