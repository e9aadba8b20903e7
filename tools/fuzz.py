#!/usr/bin/env python3
"""Model fuzzer for glowpy: mutates valid ONNX models (bytes, fields, names, shapes, attributes,
graph wiring, external data) and compiles each mutant, checking that the compiler

  * either succeeds, or fails with a GlowpyError (a ModelError/UsageError: one line, exit 1/2);
    an "internal error" (any other exception) is a failure;
  * never crashes (the worker process dies) and never hangs (per-case time limit);
  * leaves nothing behind on failure, and exactly the five bundle files on success;
  * writes a header that a program including the C standard headers compiles as C and as
    GNU C++17 (`-Wall -Werror`, where `linux` and `unix` are predefined), whatever names and
    options the mutant carries.

Compiles run in a separate worker process, so a crash or a hang is caught and reported with
the model that caused it. The mutations (fuzz_mutators.py, fuzz_bombs.py, fuzz_hostile.py) are
driven by a `Chooser` (fuzz_seeds.py): `RandomChooser` for long runs (this script), or
hypothesis' `data` object in tests/test_fuzz.py (fixed seed, shrinking).

    python tools/fuzz.py --cases 5000 --seed 1 [--seeds-from-onnx] [--save DIR]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

# (beside this file: tools/ is sys.path[0] or the tests add it)
import fuzz_bombs  # noqa: E402
from fuzz_mutators import STRUCTURAL, make_case  # noqa: E402,F401  (the tests use them)
from fuzz_seeds import (HypothesisChooser, RandomChooser, builtin_seeds,  # noqa: E402,F401
                        onnx_node_seeds, shared_seeds)

FUZZ_LIMIT = 64 << 20  # -max-region-size for fuzz cases: keeps every case small and fast
BUNDLE_SUFFIXES = (".o", ".h", ".weights.bin", ".weights.txt", ".json")
# options a mutant may set (fuzz_hostile); the network name defaults to "fuzz"
OPTION_KEYS = ("network_name", "main_entry_name", "target", "mcpu", "march", "mattr", "float_abi")
HEADER_PROGRAM = "".join(f"#include <{h}.h>\n" for h in (
    "stdint stdio stdlib string math errno limits stddef stdbool unistd".split()))


# -- the worker (compiles cases in its own process) -------------------------------------------

def worker_main():
    """Reads one JSON request per line: {"model": path, "out": dir}; answers one JSON line."""
    import resource
    try:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    except (ValueError, OSError):
        pass
    import traceback
    from glowpy.compiler import Options, compile_model
    from glowpy.errors import GlowpyError, one_line
    for line in sys.stdin:
        req = json.loads(line)
        res = {"status": "ok", "message": ""}
        try:
            compile_model(req["model"], req["out"],
                          Options(**dict({"network_name": "fuzz"}, **req.get("options", {})),
                                  llvm_opt=req.get("llvm_opt", 0), max_region_size=FUZZ_LIMIT))
        except GlowpyError as e:
            res = {"status": "error", "message": one_line(e), "exit": e.exit_code}
        except Exception as e:  # noqa: BLE001 - that is what the fuzzer looks for
            res = {"status": "internal", "message": f"{type(e).__name__}: {one_line(e, 500)}",
                   "trace": traceback.format_exc()}
        sys.stdout.write(json.dumps(res) + "\n")
        sys.stdout.flush()


class Worker:
    """A compile worker process; restarted after a crash or a hang."""

    def __init__(self, workdir: str, timeout: float = 20.0, llvm_opt: int = 0):
        self.workdir, self.timeout, self.llvm_opt = workdir, timeout, llvm_opt
        self.proc = None
        self.n = 0
        self.cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
        self.cxx = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")

    def _start(self):
        self.log = open(os.path.join(self.workdir, "worker.log"), "ab")
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, env=env, cwd=self.workdir)

    def close(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            self.log.close()

    def run(self, data: bytes, extra_files: dict | None = None,
            options: dict | None = None) -> dict:
        """Compiles one model (bytes); returns {"status": ok|error|internal|crash|hang|leak|
        header, "message": ...}."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.n += 1
        case = os.path.join(self.workdir, f"case{self.n}")
        os.makedirs(case)
        model = os.path.join(case, "m.onnx")
        with open(model, "wb") as f:
            f.write(data)
        with open(os.path.join(case, "data.bin"), "wb") as f:  # for external-data mutants
            f.write(b"\0" * 64)
        with open(os.path.join(case, fuzz_bombs.HUGE_FILE[0]), "wb") as f:
            f.truncate(fuzz_bombs.HUGE_FILE[1])  # sparse: costs nothing unless read
        try:
            os.symlink("/etc/hostname", os.path.join(case, "link.bin"))
        except OSError:
            pass
        out = os.path.join(case, "out")
        options = {k: v for k, v in (options or {}).items() if k in OPTION_KEYS}
        with open(os.path.join(case, "options.json"), "w") as f:  # (--replay reads it)
            json.dump(options, f)
        t0 = time.monotonic()
        self.proc.stdin.write((json.dumps({"model": model, "out": out, "options": options,
                                           "llvm_opt": self.llvm_opt}) + "\n").encode())
        self.proc.stdin.flush()
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        ready = sel.select(self.timeout)
        sel.close()
        if not ready:
            self.close()
            res = {"status": "hang", "message": f"no answer within {self.timeout} s"}
        else:
            line = self.proc.stdout.readline()
            if not line:
                rc = self.proc.wait()
                self.close()
                res = {"status": "crash", "message": f"worker died (exit {rc})"}
            else:
                res = json.loads(line)
        res["seconds"] = time.monotonic() - t0
        if res["status"] == "error" and os.path.lexists(out):
            res = {"status": "leak", "message": f"failed compile left {sorted(os.listdir(out))}"}
        elif res["status"] == "ok":
            name = options.get("network_name", "fuzz")
            files = set(os.listdir(out))
            if files != {name + s for s in BUNDLE_SUFFIXES}:
                res = {"status": "leak", "message": f"bundle directory holds {sorted(files)}"}
            else:
                res = self._check_header(case, os.path.join(out, name + ".h"), res)
        if res["status"] in ("ok", "error"):
            shutil.rmtree(case, ignore_errors=True)
        else:
            res["case_dir"] = case
        return res

    LANGS = (("c", ["-x", "c"]), ("cxx", ["-x", "c++", "-std=gnu++17"]))

    def _check_header(self, case, header, res) -> dict:
        """The header in a program with the standard headers, as C and as GNU C++17 (the
        standard headers precompiled once per language: a third of the time per case)."""
        src = os.path.join(case, "use.c")
        with open(src, "w") as f:
            f.write(f'#include "std.h"\n#include "{header}"\n')
        for (lang, flags), cc in zip(self.LANGS, (self.cc, self.cxx)):
            if not cc:
                continue
            pch = os.path.join(self.workdir, lang)
            if not os.path.exists(os.path.join(pch, "std.h")):
                os.makedirs(pch, exist_ok=True)
                with open(os.path.join(pch, "std.h"), "w") as f:
                    f.write(HEADER_PROGRAM)
                subprocess.run([cc, "-Wall", "-Werror", *flags[:1], flags[1] + "-header",
                                *flags[2:], os.path.join(pch, "std.h")], check=True)
            r = subprocess.run([cc, "-fsyntax-only", "-Wall", "-Werror", *flags, f"-I{pch}", src],
                               capture_output=True, text=True)
            if r.returncode:
                return {"status": "header", "message": f"{' '.join(flags)}: {r.stderr[-2000:]}"}
        return res


OK_STATUSES = ("ok", "error")


def replay(paths, timeout, llvm_opt) -> int:
    bad = 0
    with tempfile.TemporaryDirectory(prefix="glowpy-fuzz-") as work:
        w = Worker(work, timeout, llvm_opt)
        try:
            for p in paths:
                src = os.path.join(p, "m.onnx") if os.path.isdir(p) else p
                d = os.path.dirname(os.path.abspath(src))
                opts = os.path.join(d, "options.json")
                options = json.load(open(opts)) if os.path.exists(opts) else {}
                with open(src, "rb") as f:
                    res = w.run(f.read(), options=options)
                bad += res["status"] not in OK_STATUSES
                print(f"{d}: {res['status']}: {res['message'][:300]}")
        finally:
            w.close()
    return 1 if bad else 0


# -- the long run -----------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=30.0, help="per-case time limit (s)")
    ap.add_argument("--llvm-opt", type=int, default=0)
    ap.add_argument("--seeds-from-onnx", action="store_true",
                    help="also mutate onnx's backend node-test models (slower start)")
    ap.add_argument("--save", default="fuzz-findings", help="where failing cases are kept")
    ap.add_argument("--replay", nargs="+", metavar="MODEL",
                    help="compile saved cases (m.onnx files or case directories) and report")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker_main()
        return 0
    if a.replay:
        return replay(a.replay, a.timeout, a.llvm_opt)
    seeds = builtin_seeds() + shared_seeds()
    if a.seeds_from_onnx:
        seeds += onnx_node_seeds()
    print(f"fuzz: {len(seeds)} seed models, {a.cases} cases, seed {a.seed}", flush=True)
    c = RandomChooser(a.seed)
    stats = collections.Counter()
    muts = collections.Counter()
    findings = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="glowpy-fuzz-") as work:
        w = Worker(work, a.timeout, a.llvm_opt)
        try:
            for i in range(a.cases):
                data, applied, options = make_case(c, seeds)
                res = w.run(data, options=options)
                stats[res["status"]] += 1
                muts.update(applied)
                if res["status"] not in OK_STATUSES:
                    os.makedirs(a.save, exist_ok=True)
                    dst = os.path.join(a.save, f"case{i}")
                    shutil.copytree(res["case_dir"], dst, symlinks=True, dirs_exist_ok=True,
                                    ignore=shutil.ignore_patterns(fuzz_bombs.HUGE_FILE[0]))
                    with open(os.path.join(dst, "result.json"), "w") as f:
                        json.dump(dict(res, mutations=applied), f, indent=1)
                    findings.append((i, res["status"], res["message"][:200]))
                    print(f"  case {i}: {res['status']}: {res['message'][:200]} -> {dst}",
                          flush=True)
                if (i + 1) % 500 == 0:
                    print(f"  {i + 1} cases, {time.monotonic() - t0:.0f} s: {dict(stats)}",
                          flush=True)
        finally:
            w.close()
    dt = time.monotonic() - t0
    print(f"fuzz: {a.cases} cases in {dt:.0f} s ({a.cases / dt:.1f}/s): {dict(stats)}")
    print(f"fuzz: mutations applied: {dict(muts.most_common())}")
    print(f"fuzz: {len(findings)} finding(s)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
