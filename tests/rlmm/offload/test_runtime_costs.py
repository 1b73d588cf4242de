"""The sidecar's housekeeping costs (rlmm.offload.runtime_costs): Python's collections
timed by generation and malloc_trim's time, on /metrics's registry, and the gc hook
gone once the sidecar has stopped."""

from __future__ import annotations

import gc
import itertools
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from rlmm.config import load_config
from rlmm.offload.display import Display
from rlmm.offload.native_memory import NativeMemory
from rlmm.offload.runtime_costs import RuntimeCosts
from rlmm.offload.sidecar import Sidecar
from tests.rlmm.offload.conftest import write_partition


def test_a_full_collection_is_timed_under_its_generation() -> None:
    costs = RuntimeCosts(NativeMemory())
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


async def test_the_sidecar_reports_its_trims_and_removes_its_hook(tmp_path: Path) -> None:
    logs = tmp_path / "kafka-logs"
    write_partition(logs, "orders", 0)
    config_path = tmp_path / "offload.toml"
    config_path.write_text(
        f'data_dir = "{tmp_path / "data"}"\n[eventlog]\npartitions = 4\n'
        '[offload]\n"retention.ms" = -1\n'
    )
    sidecar = Sidecar(
        load_config(config_path, env={}), [logs], once=True, display=Display(rich=False)
    )
    hooks = len(gc.callbacks)
    report = await sidecar.run()
    assert report.rounds == 1 and report.tally.copied > 0
    registry = sidecar.metrics.registry
    trims = registry.get_sample_value("rlmm_offload_malloc_trims_total")
    assert trims == sidecar.native_memory.trims
    assert registry.get_sample_value("rlmm_offload_malloc_trim_seconds_total") >= 0
    for generation in "012":
        assert (
            registry.get_sample_value("rlmm_python_gc_seconds_total", {"generation": generation})
            is not None
        )
    assert len(gc.callbacks) == hooks
