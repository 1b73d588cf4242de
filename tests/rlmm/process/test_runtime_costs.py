"""The housekeeping costs (rlmm.process.runtime_costs): Python's collections timed by
generation and malloc_trim's time, on a registry as /metrics serves it (the sidecar's
own are checked in tests/rlmm/offload/test_sidecar_housekeeping.py)."""

from __future__ import annotations

import gc
import itertools

from prometheus_client import CollectorRegistry, generate_latest

from rlmm.process.long_lived import LongLivedHeap
from rlmm.process.native_memory import NativeMemory
from rlmm.process.runtime_costs import RuntimeCosts


def test_a_full_collection_is_timed_under_its_generation() -> None:
    costs = RuntimeCosts(NativeMemory(), LongLivedHeap())
    registry = CollectorRegistry()
    registry.register(costs)
    gc.collect(2)  # not timed: not installed yet
    assert costs.gc_seconds() == [0.0, 0.0, 0.0]
    costs.install()
    costs.install()  # once only
    try:
        garbage = [[] for _ in range(10_000)]
        for a, b in itertools.pairwise(garbage):
            a.append(b)
            b.append(a)  # cycles: only the collector frees them
        del garbage, a, b
        gc.collect(2)
    finally:
        costs.close()
        costs.close()
    assert costs._on_gc not in gc.callbacks
    assert costs.gc_seconds()[2] > 0
    assert registry.get_sample_value("rlmm_python_gc_seconds_total", {"generation": "2"}) > 0
    assert (
        registry.get_sample_value("rlmm_python_gc_timed_collections_total", {"generation": "2"})
        == 1
    )
    # /metrics?name[]=... (a restricted registry) finds them too
    filtered = generate_latest(registry.restricted_registry(["rlmm_python_gc_seconds_total"]))
    assert b'rlmm_python_gc_seconds_total{generation="2"}' in filtered
    gc.collect(2)
    assert (
        registry.get_sample_value("rlmm_python_gc_timed_collections_total", {"generation": "2"})
        == 1
    ), "timed after close"
