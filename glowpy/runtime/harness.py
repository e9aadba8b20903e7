"""The subprocess path: the bundle's object is linked with a C compiler into a small harness
(built with -Wall -Werror against the bundle's own header) that moves the mutable region in and
out through files. It is the point where the program must run somewhere else or under a tool:
an emulator for a cross target (runner=["qemu-aarch64", ...] with CC a cross compiler),
valgrind (runner), ASan or guard pages (cflags). About 10 ms a call; host bundles run in
process (glowpy/runtime/inprocess.py)."""
from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile

import jinja2
import numpy as np

from glowpy.codegen.names import legalize
from glowpy.errors import GlowpyError
from glowpy.ir.dtypes import named

_ENV = jinja2.Environment(loader=jinja2.PackageLoader("glowpy", "templates"), trim_blocks=True,
                          lstrip_blocks=True, undefined=jinja2.StrictUndefined)


class RuntimeError_(GlowpyError):
    pass


def find_cc() -> str:
    for cc in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cc and shutil.which(cc):
            return cc
    raise RuntimeError_("no C compiler found (set CC or install gcc); the subprocess harness "
                        "(cflags, runner) links the bundle's object with it")


def write_inputs(manifest: dict, views: dict, inputs: dict) -> None:
    """Writes each input (by model name or symbol) into its view of the mutable region, cast to
    the placeholder's dtype and reshaped to its shape (a copy; the one copy of an input)."""
    for p in manifest["inputs"]:
        x = inputs.get(p["name"])
        if x is None:
            x = inputs.get(p["symbol"])
            if x is None:
                raise RuntimeError_(f"missing input '{p['name']}'")
        v = views[p["name"]]
        x = np.asarray(x)
        if x.shape != v.shape:
            x = x.reshape(v.shape)
        np.copyto(v, x, casting="unsafe")


def placeholder_views(manifest: dict, mutable, kinds=("inputs", "outputs")) -> dict:
    """{placeholder name: numpy view of its bytes in the mutable region}."""
    return {p["name"]: np.frombuffer(mutable, named(p["dtype"]), int(np.prod(p["shape"])),
                                     p["offset"]).reshape(p["shape"])
            for k in kinds for p in manifest[k]}


class Harness:
    """The bundle linked into harness.c.j2 and run as a subprocess per call."""

    def __init__(self, directory: str, name: str, manifest: dict, cflags=(), runner=()):
        self.directory, self.name, self.manifest = directory, name, manifest
        self.runner = list(runner)  # e.g. ["valgrind", "--error-exitcode=9"]
        self._work = tempfile.mkdtemp(prefix="glowpy-run-")
        atexit.register(shutil.rmtree, self._work, True)
        self.exe = self._build(list(cflags))
        self.last_stderr = ""

    def _build(self, cflags) -> str:
        m = self.manifest
        src = _ENV.get_template("harness.c.j2").render(
            name=self.name, api=m["bundle_api"],
            header=os.path.abspath(os.path.join(self.directory, self.name + ".h")),
            upper=legalize(self.name).upper(), config=f"{legalize(self.name)}_config",
            entry=m["entry"])
        c = os.path.join(self._work, "harness.c")
        with open(c, "w") as f:
            f.write(src)
        exe = os.path.join(self._work, "harness")
        cmd = [find_cc(), "-O1", "-std=c11", "-Wall", "-Werror", *cflags, c,
               os.path.join(self.directory, self.name + ".o"), "-o", exe, "-lm"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError_(f"linking bundle '{self.name}' failed:\n{' '.join(cmd)}\n{r.stderr}")
        return exe

    def mutable_image(self, inputs: dict) -> bytearray:
        img = bytearray(self.manifest["memory"]["mutable"])
        write_inputs(self.manifest, placeholder_views(self.manifest, img, ("inputs",)), inputs)
        return img

    def run(self, inputs: dict, repeat: int = 1, timeout: float = 600):
        """(outputs {name: array}, fastest of `repeat` calls in ns)."""
        i, o = os.path.join(self._work, "in.bin"), os.path.join(self._work, "out.bin")
        with open(i, "wb") as f:
            f.write(self.mutable_image(inputs))
        w = os.path.join(self.directory, self.name + ".weights.bin")
        r = subprocess.run(self.runner + [self.exe, w, i, o, str(repeat)], capture_output=True,
                           text=True, timeout=timeout)
        if r.returncode:
            raise RuntimeError_(f"bundle '{self.name}' failed (exit {r.returncode}): {r.stderr[-4000:]}")
        self.last_stderr = r.stderr
        with open(o, "rb") as f:
            img = f.read()
        views = placeholder_views(self.manifest, img, ("outputs",))
        return {k: v.copy() for k, v in views.items()}, float(r.stdout.split()[-1])
