"""Running the verify bundle: in this process for the host (glowpy.runtime.Bundle), under QEMU
for Arm through the runners of examples/bundles that tests/test_cross.py builds: bare-metal
firmware on an MPS2 board (qemu-system-arm) for Cortex-M, a static Linux executable
(qemu-aarch64) for AArch64. The runner prints every output with %.9g (float32 round-trips
exactly), so the comparison sees the target's bits. Each input set is one firmware build and
one QEMU run; the constants come from NAME.weights.bin (NAME.weights.txt, which the firmware
includes, is rewritten from it), so a bundle edited after compiling runs as edited."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess


from glowpy.errors import ModelError, UsageError, show
from glowpy.ir.dtypes import named

def _examples() -> str:
    """examples/bundles of glowpy's source tree: beside the package when it runs from the
    checkout, else in the working directory (an installed glowpy used from the repository, as
    the README does)."""
    beside = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "examples", "bundles")
    here = os.path.join(os.getcwd(), "examples", "bundles")
    return beside if os.path.isdir(beside) or not os.path.isdir(here) else here


EXAMPLES = _examples()
# Cortex-M cores -> the QEMU MPS2 board the runner supports for them (tests/test_cross.BOARDS)
BOARDS = {"cortex-m7": "mps2-an500", "cortex-m4": "mps2-an386", "cortex-m3": "mps2-an385",
          "cortex-m33": "mps2-an505"}
BUNDLE_SUFFIXES = (".o", ".h", ".weights.bin", ".json")


def runner_for(target: dict) -> tuple[str, dict] | None:
    """(examples runner directory, make variables) for a bundle built for `target` (the
    manifest's), None for the host; a UsageError when model-verify cannot run it here."""
    from glowpy.runtime.inprocess import host_refusal
    if host_refusal(target) is None:
        return None
    from glowpy.codegen.target.triples import parts
    triple, cpu = target.get("triple", ""), target.get("cpu", "")
    arch = parts(triple).Arch  # LLVM's reading of the triple (the target package's)
    if arch in ("arm", "thumb"):
        if cpu not in BOARDS:
            raise UsageError(f"-mcpu={cpu}: model-verify runs Arm bundles on QEMU's MPS2 boards, "
                             f"which have {', '.join(BOARDS)}; choose one of them")
        abi = "hard" if parts(triple).Env.endswith("hf") else "soft"
        _tools("cortex_m7")
        return "cortex_m7", {"BOARD": BOARDS[cpu], "FLOAT_ABI": abi, "STACK_SIZE": 65536}
    if arch == "aarch64":
        _tools("aarch64")
        return "aarch64", {}
    raise UsageError(f"bundle for {show(triple)} (-mcpu={show(cpu)}): model-verify runs host "
                     "bundles in process and Arm (Cortex-M, AArch64) bundles under QEMU only")


def _tools(runner: str) -> None:
    need = (["arm-none-eabi-gcc", "qemu-system-arm"] if runner == "cortex_m7" else
            ["aarch64-linux-gnu-gcc", "qemu-aarch64"]) + ["make"]
    missing = [t for t in need if shutil.which(t) is None]
    if missing:
        raise UsageError(f"running this bundle needs {', '.join(missing)} on PATH (Debian: "
                         f"{'gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm' if runner == 'cortex_m7' else 'gcc-aarch64-linux-gnu qemu-user'} make)")
    if not os.path.isdir(os.path.join(EXAMPLES, runner)):
        raise UsageError(f"running cross bundles needs the runners of glowpy's source tree "
                         f"(examples/bundles/{runner}), not found at {show(EXAMPLES)}")


def _io_header_module():
    spec = importlib.util.spec_from_file_location("gen_io_header",
                                                  os.path.join(EXAMPLES, "gen_io_header.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Runner:
    """Runs the bundle in `directory` (named `name`) on input sets: run(feeds) -> {output name:
    array of the placeholder's dtype and shape}."""

    def __init__(self, directory: str, name: str, manifest: dict, work: str):
        self.directory, self.name, self.manifest, self.work = directory, name, manifest, work
        self.cross = runner_for(manifest["target"])
        self.where = "in process" if self.cross is None else \
            f"under QEMU ({self.cross[1].get('BOARD', 'qemu-aarch64')})"
        self.runs = 0
        if self.cross is None:
            from glowpy.runtime import Bundle
            self._bundle = Bundle(directory, name)
            return
        from glowpy.codegen.bundle import weights_text
        self._bdir = os.path.join(work, "cross")
        os.makedirs(self._bdir, exist_ok=True)
        for suffix in BUNDLE_SUFFIXES:
            shutil.copyfile(os.path.join(directory, name + suffix),
                            os.path.join(self._bdir, name + suffix))
        with open(os.path.join(directory, name + ".weights.bin"), "rb") as f:
            image = f.read()
        with open(os.path.join(self._bdir, name + ".weights.txt"), "wb") as f:
            f.writelines(weights_text(image))
        self._gen = _io_header_module()

    def run(self, feeds: dict) -> dict:
        self.runs += 1
        if self.cross is None:
            return self._bundle.run(feeds)
        runner, make_vars = self.cross
        k = self.runs
        header = os.path.join(self.work, f"io{k}", "model_io.h")
        os.makedirs(os.path.dirname(header), exist_ok=True)
        self._gen.write_io_header_from_manifest(header, self.manifest, feeds)
        cmd = ["make", "-s", "-C", os.path.join(EXAMPLES, runner), f"BUNDLE_DIR={self._bdir}",
               f"NETWORK={self.name}", f"IO_HEADER={header}",
               f"BUILD_DIR={os.path.join(self.work, f'build{k}')}",
               *(f"{key}={v}" for key, v in make_vars.items()), "run"]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        except subprocess.TimeoutExpired:
            raise ModelError(f"the {runner} runner did not finish in 30 minutes") from None
        if res.returncode:
            tail = (res.stdout + res.stderr).strip().splitlines()[-3:]
            raise ModelError(f"the {runner} runner failed ({' '.join(cmd)}): "
                             f"{' | '.join(tail)}")
        printed = self._gen.parse_run_output(res.stdout)["outputs"]
        outs = self.manifest["outputs"]
        if len(printed) != len(outs) or any(a is None for a in printed):
            raise ModelError(f"the {runner} runner printed {len(printed)} outputs, the bundle "
                             f"has {len(outs)}")
        return {p["name"]: a.astype(named(p["dtype"])).reshape(p["shape"])
                for p, a in zip(outs, printed)}
