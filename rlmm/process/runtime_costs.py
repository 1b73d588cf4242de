"""The sidecar process's housekeeping costs, as Prometheus counters.

Job: what an idle round costs beside its own work, for an operator and for
bench/sidecar_scale.py: CPU seconds in Python's cyclic garbage collector by generation
(the collecting thread's, timed by a ``gc.callbacks`` hook), and seconds and calls of
``malloc_trim`` (``NativeMemory``), and the objects frozen out of the collector's
walks and the refreezes (``LongLivedHeap``). A broker's worth of partitions keeps a large heap
alive, so a collection or a trim is where an idle round's CPU can hide.

Invariants: the hook is installed by ``install()`` and removed by ``close()``, both
idempotent; it allocates nothing per collection (the totals live in a preallocated
list) and never raises into the collector; figures are read at scrape time, so a
scrape never waits on a round, and a scrape walks no heap: the frozen count is the one
kept at the last freeze (``gc.get_freeze_count()`` walks the whole frozen generation,
about 12 ms per million objects, at every scrape).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rlmm.process.long_lived import LongLivedHeap
from rlmm.process.native_memory import NativeMemory

GENERATIONS = 3  # CPython's collector generations 0, 1 and 2


class RuntimeCosts(Collector):
    """Times Python's collections (once installed) and reports them with NativeMemory's
    trims; register it on the sidecar's registry."""

    def __init__(self, native_memory: NativeMemory, long_lived: LongLivedHeap) -> None:
        self._native = native_memory
        self._long_lived = long_lived
        self._seconds = [0.0] * GENERATIONS
        self._collections = [0] * GENERATIONS
        self._started = 0.0
        self._installed = False

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        # Collections run with the GIL held, one at a time: no lock is needed. The
        # collecting thread's CPU time, not wall time: on a busy host a collection
        # descheduled midway would count the other processes' time.
        if phase == "start":
            self._started = time.thread_time()
            return
        generation = info.get("generation", 0)
        if 0 <= generation < GENERATIONS and self._started:
            self._seconds[generation] += time.thread_time() - self._started
            self._collections[generation] += 1
        self._started = 0.0

    def install(self) -> None:
        if not self._installed:
            gc.callbacks.append(self._on_gc)
            self._installed = True

    def close(self) -> None:
        if self._installed:
            gc.callbacks.remove(self._on_gc)
            self._installed = False

    def gc_seconds(self) -> list[float]:
        """Seconds spent collecting so far, by generation."""
        return list(self._seconds)

    def describe(self) -> Iterator[Metric]:
        # The families, so the registry knows their names: /metrics' name[] filter
        # (a restricted registry) finds a collector only by what it describes.
        return self.collect()

    def collect(self) -> Iterator[Metric]:
        seconds = CounterMetricFamily(
            "rlmm_python_gc_seconds",
            "CPU time the sidecar spent in Python's cyclic garbage collector, by generation",
            labels=["generation"],
        )
        runs = CounterMetricFamily(
            "rlmm_python_gc_timed_collections",
            "Collections timed by rlmm_python_gc_seconds, by generation",
            labels=["generation"],
        )
        for generation in range(GENERATIONS):
            seconds.add_metric([str(generation)], self._seconds[generation])
            runs.add_metric([str(generation)], self._collections[generation])
        yield seconds
        yield runs
        heap = self._long_lived
        yield GaugeMetricFamily(
            "rlmm_python_gc_frozen_objects",
            "Objects moved to the collector's permanent generation by the last freeze"
            " (after the first round, and at each refreeze)",
            value=heap.frozen_count if heap.frozen else 0,
        )
        yield CounterMetricFamily(
            "rlmm_python_gc_refreezes",
            "Whole-heap collections at a round's end that froze the heap again, once the"
            " survivors since the last freeze passed a quarter of it",
            value=heap.refreezes,
        )
        yield CounterMetricFamily(
            "rlmm_offload_malloc_trim_seconds",
            "Time spent in glibc's malloc_trim after rounds (0 where glibc is not the allocator)",
            value=self._native.trim_seconds,
        )
        yield CounterMetricFamily(
            "rlmm_offload_malloc_trims",
            "malloc_trim calls made after rounds",
            value=self._native.trims,
        )


__all__ = ["RuntimeCosts"]
