"""Fuzz smoke run: a few hundred hypothesis-driven mutants of small valid models (bytes, names,
opsets, domains, op types, element types, shapes, attributes, graph wiring, external data),
fixed seed (derandomized), each compiled in a worker process with a per-case time limit.
No case may end in an internal error, a crash, a hang, leftover files, or a header that does
not compile. The long run is tools/fuzz.py (docs/robustness.md)."""
import collections
import os
import sys

import pytest
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
import fuzz  # noqa: E402

CASES = 400


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    w = fuzz.Worker(str(tmp_path_factory.mktemp("fuzz")), timeout=30.0)
    yield w
    w.close()


def test_fuzz_smoke(worker):
    seeds = fuzz.builtin_seeds() + fuzz.shared_seeds()
    stats = collections.Counter()
    kinds = collections.Counter()

    @settings(max_examples=CASES, derandomize=True, database=None, deadline=None,
              phases=[Phase.generate, Phase.shrink],
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def one_case(data):
        data_bytes, applied, options = fuzz.make_case(fuzz.HypothesisChooser(data), seeds)
        res = worker.run(data_bytes, options=options)
        stats[res["status"]] += 1
        kinds.update(applied)
        assert res["status"] in fuzz.OK_STATUSES, (
            f"{res['status']}: {res['message']}\nmutations: {applied}\n{res.get('trace', '')}"
            f"\ncase kept in {res.get('case_dir')}")
        if res["status"] == "error":
            assert res["message"] and "\n" not in res["message"]

    one_case()
    # the run reached both outcomes and every kind of mutation
    assert stats["ok"] >= 20 and stats["error"] >= CASES // 2, stats
    assert set(kinds) >= {m.__name__ for m in fuzz.STRUCTURAL} | {"mutate_bytes"}, kinds
