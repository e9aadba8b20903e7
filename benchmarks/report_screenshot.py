#!/usr/bin/env python3
"""The README's screenshot of the HTML report: keyword spotting (DS-CNN) on the Cortex-M7
with its per-layer profile measured under QEMU.

    python benchmarks/report_screenshot.py               # writes docs/img/report_kws_m7.png
    python benchmarks/report_screenshot.py --html kws.html --png /tmp/kws.png

The profile is benchmarks/cortex_m7.py --per-layer's (an -instrument-profile build whose clock
is the runner's SysTick under QEMU -icount: instructions, not cycles); the report is the
deployment bundle's (model-compiler -dump-report -report-profile), opened in headless
Chromium (the system's /usr/bin/chromium through playwright) and photographed from the top:
regions, the activation placement, constants, code per kernel and the profile."""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cortex_m7 import SHARED_MODELS, profile_layers, reference_data  # noqa: E402

import glowpy  # noqa: E402

MODEL = "mlperf_tiny_kws_dscnn"
M7 = {"target": "arm", "mcpu": "cortex-m7", "float_abi": "hard"}
HEIGHT = 3400  # pixels of the page photographed: from the regions to the profile's charts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--png", default=os.path.join(ROOT, "docs", "img", "report_kws_m7.png"))
    ap.add_argument("--html", help="keep the report here (default: a temporary file)")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    a = ap.parse_args(argv)
    model = os.path.join(SHARED_MODELS, MODEL + ".onnx")
    with tempfile.TemporaryDirectory(prefix="glowpy-report-") as work:
        prof = profile_layers(model, {}, os.path.join(work, "profiled"),
                              reference_data(MODEL)[0], "hard", 600)
        if "error" in prof:
            sys.exit(f"report_screenshot.py: the Cortex-M7 run failed: {prof['error']}")
        prof_path = os.path.join(work, "profile.json")
        with open(prof_path, "w") as f:
            json.dump(prof, f)
        html = a.html or os.path.join(work, "report.html")
        glowpy.compile(model, os.path.join(work, "bundle"), dump_report=html,
                       report_profile=prof_path, progress=False, **M7)
        from playwright.sync_api import sync_playwright
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=a.chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto("file://" + os.path.abspath(html))
            # the tables folded (the photo shows the charts; the page opens with them)
            page.evaluate("document.querySelectorAll('details').forEach(d => d.open = false)")
            height = page.evaluate("document.body.scrollHeight")
            os.makedirs(os.path.dirname(os.path.abspath(a.png)), exist_ok=True)
            page.screenshot(path=a.png, full_page=True,
                            clip={"x": 0, "y": 0, "width": 1200, "height": min(height, HEIGHT)})
            browser.close()
    print(f"wrote {a.png} ({os.path.getsize(a.png):,} bytes): {MODEL} on the Cortex-M7, "
          f"{prof['total']['per_instruction_sum']:,} instructions per inference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
