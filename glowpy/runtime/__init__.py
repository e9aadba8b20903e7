"""Runs bundles on numpy arrays.

    b = Bundle("out")                       # loads out/NAME.o into this process (no C compiler)
    b.run({"Input3": x})["Plus214_Output_0"]  # -> a copy of the output
    b.profile({"Input3": x}, repeat=100)    # -instrument-profile bundles: per-op cycles
    b.trace({"Input3": x})                  # -instrument-debug bundles: every layer's output
    s = b.session()                         # own mutable + activation regions: one per thread
    s.inputs["Input3"][...] = x; s.invoke(); s.outputs["Plus214_Output_0"]   # zero copy

Host bundles run in process (inprocess.py): the constant region is loaded once per Bundle and
shared read-only by all its sessions. A bundle for another target is refused with one line.
cflags (ASan, guard pages) or a runner (valgrind, an emulator such as qemu-aarch64, with CC a
cross compiler) select the subprocess harness (harness.py), where a C build is the point."""
from __future__ import annotations

import json
import os
import threading

from glowpy.runtime.harness import Harness, RuntimeError_, find_cc, placeholder_views, write_inputs
from glowpy.runtime.inprocess import Loaded, Session, host_refusal

__all__ = ["Bundle", "Session", "RuntimeError_", "find_cc", "host_refusal"]


class Bundle:
    """A compiled bundle in `directory` named `name` (default: the only NAME.json beside a NAME.o).
    harness=True (implied by cflags or a runner) links and runs the C harness instead."""

    def __init__(self, directory: str, name: str | None = None, cflags=(), runner=(),
                 harness: bool = False):
        self.directory = directory
        if name is None:
            files = set(os.listdir(directory))
            names = sorted(f[:-5] for f in files if f.endswith(".json") and f[:-5] + ".o" in files)
            if len(names) != 1:
                raise RuntimeError_(f"{directory}: expected exactly one bundle, found {names}")
            name = names[0]
        self.name = name
        try:
            with open(os.path.join(directory, name + ".json")) as f:
                self.manifest = json.load(f)
        except (OSError, ValueError) as e:
            raise RuntimeError_(f"bundle '{name}': cannot read {name}.json: {e}") from None
        self.best_ns = None
        self.last_stderr = ""
        self._local = threading.local()
        if cflags or runner or harness:
            self.mode = "harness"
            self._harness = Harness(directory, name, self.manifest, cflags, runner)
            self.exe, self.runner = self._harness.exe, self._harness.runner
            return
        reason = host_refusal(self.manifest["target"])
        if reason:
            raise RuntimeError_(f"bundle '{name}' {reason}; glowpy.runtime runs host bundles "
                                "in process (run it under an emulator with runner=[...] and CC "
                                "set to a cross compiler)")
        self.mode = "inprocess"
        self._loaded = Loaded(directory, name, self.manifest)

    def session(self) -> Session:
        """A new session: its own mutable and activation regions, this bundle's constants."""
        if self.mode != "inprocess":
            raise RuntimeError_(f"bundle '{self.name}': sessions are in-process only (this "
                                "Bundle runs a subprocess harness)")
        return Session(self._loaded, self.name, self.manifest)

    def mutable_image(self, inputs: dict) -> bytearray:
        """The mutable region holding `inputs` (zeros elsewhere)."""
        img = bytearray(self.manifest["memory"]["mutable"])
        write_inputs(self.manifest, placeholder_views(self.manifest, img, ("inputs",)), inputs)
        return img

    def profile(self, inputs: dict, repeat: int = 1) -> dict:
        """Runs an -instrument-profile bundle `repeat` times in process; returns its profile
        (perf_profile.build: per-instruction and per-op cycles, MACs, bytes, code size, and
        the whole calls measured around the entry with the same counter)."""
        from glowpy.perf_profile import build
        counts, total = self.session().profile_counts(inputs, repeat)
        return build(self.manifest, counts, total)

    def trace(self, inputs: dict) -> list[dict]:
        """Runs an -instrument-debug bundle once in process; returns each instruction's
        outputs as it finished (Session.trace)."""
        return self.session().trace(inputs)

    def run(self, inputs: dict, repeat: int = 1, timeout: float = 600) -> dict:
        """Runs the bundle; returns {output name: array} (copies). After it, `self.best_ns` holds
        the fastest of `repeat` calls. In process, each calling thread gets its own session, so
        run() may be called from several threads; `timeout` applies to the harness only."""
        if self.mode == "harness":
            out, self.best_ns = self._harness.run(inputs, repeat, timeout)
            self.last_stderr = self._harness.last_stderr
            return out
        s = getattr(self._local, "session", None)
        if s is None:
            s = self._local.session = self.session()
        out = s.run(inputs, repeat=repeat)
        self.best_ns = s.best_ns
        return out
