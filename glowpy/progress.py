"""Compile progress on stderr: the stage running (load, optimize, plan, codegen with kernels
emitted n/N, LLVM, write) on one rewritten line, only when stderr is a terminal and only once
the compile has taken a second (short compiles, CI logs and tests stay quiet); with -verbose,
one line per finished stage with its seconds, terminal or not. On a terminal a daemon thread
redraws the line, so it appears and its clock runs during long calls (LLVM's optimization)."""
from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager

from glowpy import signals

DELAY = 1.0  # seconds before the status line appears
REFRESH = 0.1  # seconds between redraws


class Progress:
    def __init__(self, verbose: bool = False, stream=None, prog: str = "model-compiler",
                 live: bool = True):
        self.stream = stream if stream is not None else sys.stderr
        self.verbose, self.prog = verbose, prog
        isatty = getattr(self.stream, "isatty", None)
        self.live = bool(live and isatty and isatty())
        self.start = time.monotonic()
        self.stage_name, self.detail, self.shown, self.last = "", "", False, 0.0
        self.timings: list[tuple[str, float]] = []
        self.lock, self.stopped = threading.Lock(), threading.Event()
        if self.live:
            threading.Thread(target=self._tick, daemon=True).start()

    def _tick(self):
        while not self.stopped.wait(REFRESH):
            self._draw()

    @contextmanager
    def stage(self, name: str):
        signals.checkpoint()  # a signal swallowed during the stage before ends the work here
        self.stage_name, self.detail = name, ""
        t0 = time.monotonic()
        self._draw(new_stage=True)
        try:
            yield self
        finally:
            dt = time.monotonic() - t0
            self.timings.append((name, dt))
            if self.verbose:
                self._clear()
                print(f"{self.prog}: {name}: {dt:.2f} s", file=self.stream, flush=True)

    def kernels(self, n: int, total: int):
        """codegen's callback: kernel n of total emitted."""
        self.detail = f"kernels {n}/{total}"
        self._draw()

    def _draw(self, new_stage: bool = False):
        """Redraws the line; at most every REFRESH seconds within a stage, but a new stage is
        always shown (a stage shorter than REFRESH would otherwise never appear), and nothing
        before the first stage starts (the ticker thread can run first: no blank stage name)."""
        if not self.live or self.stopped.is_set() or not self.stage_name:
            return
        with self.lock:
            now = time.monotonic()
            if now - self.start < DELAY or (self.shown and not new_stage
                                            and now - self.last < REFRESH):
                return
            text = f"{self.prog}: {self.stage_name}" + (f": {self.detail}" if self.detail else "")
            self.stream.write(f"\r\x1b[K{text} ({now - self.start:.1f} s)")
            self.stream.flush()
            self.shown, self.last = True, now

    def _clear(self):
        with self.lock:
            if self.shown:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
                self.shown = False

    def done(self, ok: bool = True):
        """Removes the status line; with -verbose, the total of a compile that finished."""
        self.stopped.set()
        self._clear()
        if self.verbose and ok:
            total = time.monotonic() - self.start
            print(f"{self.prog}: total: {total:.2f} s", file=self.stream, flush=True)
