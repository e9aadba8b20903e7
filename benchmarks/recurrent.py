#!/usr/bin/env python3
"""LSTM / GRU / RNN bundle speed against onnxruntime (one thread) on this machine.

    python benchmarks/recurrent.py                  # seq 100, input and hidden 128, batch 1 and 8
    python benchmarks/recurrent.py --seq 50 --hidden 256 --batches 1

One-node models (opset 14, forward, weights ~ N(0, 1/hidden) as torch initializes them, so
the recurrence is not chaotic and the outputs are comparable) are compiled for the host and
timed with benchmarks/perf.py's C harness and its onnxruntime timer (CPU time of the calling
thread, best batch of back-to-back calls, alternating rounds); the bundle's outputs are checked
against onnxruntime's (max abs error printed)."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from perf import Harness, OrtTimer  # noqa: E402  (puts the repository and tests/ on the path)
import glowpy  # noqa: E402
from test_recurrent import recurrent_model  # noqa: E402


def measure(op: str, seq: int, batch: int, hidden: int, work: str, rounds: int = 3) -> dict:
    model, feeds = recurrent_model(op, seq=seq, batch=batch, isz=hidden, hid=hidden,
                                   scale=hidden ** -0.5, outs=("Y", "Y_h"))
    d = os.path.join(work, f"{op}_{batch}")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "m.onnx")
    onnx.save(model, path)
    info = glowpy.compile(path, os.path.join(d, "b"))
    h = Harness(os.path.join(d, "b"), info, d)
    ort_t = OrtTimer(path, feeds)
    bt = ot = float("inf")
    for _ in range(rounds):
        t, outs = h.run({info.inputs[0]["name"]: feeds["X"]}, 0.05, 7, "thread")
        bt = min(bt, t)
        ot = min(ot, ort_t.run(0.05, 7, "thread"))
    err = max(float(np.abs(g.reshape(r.shape) - r).max()) for g, r in zip(outs, ort_t.outputs))
    return {"op": op, "batch": batch, "bundle_ms": bt, "ort_ms": ot, "max_err": err}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", default="LSTM,GRU,RNN")
    ap.add_argument("--seq", type=int, default=100)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--batches", default="1,8", help="batch sizes")
    a = ap.parse_args(argv)
    print(f"seq {a.seq}, input = hidden = {a.hidden}; times per inference, one thread")
    print(f"{'op':5} {'batch':>5} {'bundle ms':>10} {'ort ms':>8} {'ratio':>6} {'max err':>9}")
    with tempfile.TemporaryDirectory(prefix="glowpy-rnn-") as work:
        for op in a.ops.split(","):
            for batch in (int(b) for b in a.batches.split(",")):
                r = measure(op, a.seq, batch, a.hidden, work)
                print(f"{op:5} {batch:5d} {r['bundle_ms']:10.3f} {r['ort_ms']:8.3f} "
                      f"{r['bundle_ms'] / r['ort_ms']:6.2f} {r['max_err']:9.2e}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
