"""The sidecar's long-lived state frozen out of the collector's walks
(rlmm.offload.long_lived): after the first round that led, on /metrics, and given back
when the sidecar stops."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

from rlmm.offload.display import Display
from rlmm.offload.long_lived import LongLivedHeap
from rlmm.offload.sidecar import Sidecar
from tests.rlmm.offload.conftest import one_partition_sidecar


class Cycle:
    def __init__(self) -> None:
        self.me = self


def _tracked(obj: object) -> bool:
    """Whether ``obj`` is in one of the collector's generations (not the frozen one)."""
    return any(o is obj for o in gc.get_objects())


def test_freeze_once_then_thaw() -> None:
    heap = LongLivedHeap()
    kept = Cycle()
    heap.freeze()
    try:
        assert heap.frozen and gc.get_freeze_count() > 0
        assert not _tracked(kept)  # frozen: out of the collector's generations
        later = Cycle()
        heap.freeze()  # only the first call freezes
        # Not the freeze count's equality: another thread of the test process may free
        # frozen objects meanwhile (reference counting), which lowers it.
        assert _tracked(later)
        # what is made after the freeze is collected as usual
        Cycle()
        assert gc.collect() > 0
        assert kept.me is kept
    finally:
        heap.thaw()
    assert not heap.frozen and gc.get_freeze_count() == 0 and _tracked(kept)
    heap.thaw()  # idempotent


async def test_the_sidecar_freezes_after_its_first_round_and_thaws_at_stop(
    tmp_path: Path,
) -> None:
    config, logs = one_partition_sidecar(tmp_path, '"remote.log.manager.task.interval.ms" = 100\n')
    sidecar = Sidecar(config, [logs], display=Display(rich=False))
    run = asyncio.create_task(sidecar.run())
    try:
        async with asyncio.timeout(60):
            while not sidecar.long_lived.frozen:
                assert not run.done(), run.result()
                await asyncio.sleep(0.02)
        registry = sidecar.metrics.registry
        assert registry.get_sample_value("rlmm_python_gc_frozen_objects") == gc.get_freeze_count()
        assert gc.get_freeze_count() > 1000  # the imports and the partition's state
    finally:
        sidecar.stop()
        report = await asyncio.wait_for(run, 60)
    assert report.rounds >= 1 and report.tally.copied > 0
    assert not sidecar.long_lived.frozen and gc.get_freeze_count() == 0
