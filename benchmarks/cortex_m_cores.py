"""The int8 QDQ models on the other emulated Cortex-M cores: instructions, .text and stack per
core, written into docs/cortex_m7.md ("int8 on other Cortex-M cores").

Each model is compiled with `-target=arm -mcpu=<core>` (the M3 has no FPU: `-float-abi=soft`;
an M33 with `-mattr=-dsp` stands for one made without the optional DSP extension), run by the
runner of examples/bundles/cortex_m7 on the matching QEMU board (`BOARD=...`) with the model's
first reference input, and its outputs are checked against the TFLite reference (at most 1
LSB; ResNet-8, whose TFLite reference differs from onnxruntime's by 19 LSB, against the M7's
outputs). Instructions are SysTick ticks x 10 (x 12.5 on the AN505, whose SysTick counts a 20
MHz clock).

    python benchmarks/cortex_m_cores.py [--no-docs] [--models a,b]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

import cortex_m7 as m7  # noqa: E402  (sets sys.path for glowpy and the test helpers)
import glowpy  # noqa: E402
from gen_io_header import parse_run_output, write_io_header_from_manifest  # noqa: E402
from shared_models import shared_models  # noqa: E402
from util import reference_data  # noqa: E402

BEGIN, END = "<!-- cortex_m int8 cores: begin -->", "<!-- cortex_m int8 cores: end -->"
# (label, board, -mcpu, -float-abi, -mattr, kernels, instructions per SysTick tick)
CORES = [("Cortex-M7 (`mps2-an500`)", "mps2-an500", "cortex-m7", "hard", None, "DSP", 10),
         ("Cortex-M4 (`mps2-an386`)", "mps2-an386", "cortex-m4", "hard", None, "DSP", 10),
         ("Cortex-M33 (`mps2-an505`)", "mps2-an505", "cortex-m33", "hard", None, "DSP", 12.5),
         ("Cortex-M33 `-mattr=-dsp` (`mps2-an505`)", "mps2-an505", "cortex-m33", "hard", "-dsp",
          "portable", 12.5),
         ("Cortex-M3 `-float-abi=soft` (`mps2-an385`)", "mps2-an385", "cortex-m3", "soft", None,
          "portable", 10)]


def run_core(name: str, d: str, core) -> dict:
    label, board, mcpu, abi, mattr, _, scale = core
    opts = {"mattr": mattr} if mattr else {}
    info = glowpy.compile(os.path.join(m7.SHARED_MODELS, name + ".onnx"), d, target="arm",
                          mcpu=mcpu, float_abi=abi, **opts)
    man = info.manifest
    inputs, outputs = reference_data(name, 0)
    write_io_header_from_manifest(os.path.join(d, "model_io.h"), man,
                                  {p["name"]: x for p, x in zip(man["inputs"], inputs)})
    res = subprocess.run(["make", "-s", "-C", m7.RUNNER, f"BUNDLE_DIR={d}",
                          f"NETWORK={info.name}", f"BOARD={board}", f"FLOAT_ABI={abi}",
                          f"BUILD_DIR={os.path.join(d, 'build')}",
                          f"STACK_SIZE={m7.STACK_SIZE}", "run"],
                         capture_output=True, text=True, timeout=1800)
    if res.returncode != 0:
        sys.exit(f"{name} on {label}: " + (res.stdout + res.stderr)[-1000:])
    run = parse_run_output(res.stdout)
    text = sum(n for s, n in m7.object_sections(info.files[".o"]).items()
               if s.startswith(".text"))
    got = run["outputs"][0].reshape(outputs[0].shape).astype(np.int64)
    return {"instructions": round(run["cycles"] * scale), "text": text, "stack": run["stack"],
            "output": got, "lsb": int(np.abs(got - outputs[0].astype(np.int64)).max())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", help="comma-separated int8 models (default: every QDQ model)")
    ap.add_argument("--no-docs", action="store_true", help="do not rewrite docs/cortex_m7.md")
    a = ap.parse_args(argv)
    names = a.models.split(",") if a.models else shared_models(quantized=True)
    rows, bad = {}, []
    with tempfile.TemporaryDirectory(prefix="glowpy-cores-") as work:
        for name in names:
            for i, core in enumerate(CORES):
                r = run_core(name, os.path.join(work, f"{name}-{i}"), core)
                rows[name, i] = r
                same = np.array_equal(r["output"], rows[name, 0]["output"])
                if not same or (r["lsb"] > 1 and "resnet8" not in name):
                    bad.append(f"{name} on {core[0]}: {r['lsb']} LSB, same as M7: {same}")
                print(f"{name} {core[0]}: {r['instructions']:,} instructions, .text "
                      f"{r['text']:,}, stack {r['stack']:,}, {r['lsb']} LSB", file=sys.stderr,
                      flush=True)
    head = "| core (board) | kernels | " + " | ".join(
        f"{n}: instructions, `.text`, stack" for n in names) + " |\n"
    text = head + "|---|---|" + "--:|" * len(names) + "\n"
    for i, core in enumerate(CORES):
        text += f"| {core[0]} | {core[5]} | " + " | ".join(
            f"{rows[n, i]['instructions']:,}, {rows[n, i]['text']:,}, {rows[n, i]['stack']:,}"
            for n in names) + " |\n"
    text = (f"Measured with `python benchmarks/cortex_m_cores.py` (glowpy {glowpy.__version__}; "
            "first reference input of each model):\n\n" + text)
    print(text)
    if not a.no_docs and not a.models:
        m7.write_doc(text, BEGIN, END)
    for b in bad:
        print("mismatch: " + b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
