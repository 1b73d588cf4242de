"""The sidecar's long-lived state frozen out of the collector's walks
(rlmm.offload.long_lived): after the first round that led, each later round's young
objects collected at its end, the heap refrozen once survivors pile up, on /metrics,
and given back when the sidecar stops."""

from __future__ import annotations

import asyncio
import gc
import weakref
from pathlib import Path

from rlmm.offload.display import Display
from rlmm.offload.long_lived import REFREEZE_FLOOR, REFREEZE_SHARE, LongLivedHeap
from rlmm.offload.sidecar import Sidecar
from tests.rlmm.offload.conftest import one_partition_sidecar


class Cycle:
    def __init__(self) -> None:
        self.me = self


def _tracked(obj: object, generation: int | None = None) -> bool:
    """Whether ``obj`` is in one of the collector's generations (not the frozen one), or
    in ``generation``."""
    return any(o is obj for o in gc.get_objects(generation))


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
        frozen = sidecar.long_lived.frozen_count
        assert registry.get_sample_value("rlmm_python_gc_frozen_objects") == frozen
        assert frozen > 1000  # the imports and the partition's state
        assert registry.get_sample_value("rlmm_python_gc_refreezes_total") == 0
    finally:
        sidecar.stop()
        report = await asyncio.wait_for(run, 60)
    assert report.rounds >= 1 and report.tally.copied > 0
    assert not sidecar.long_lived.frozen and gc.get_freeze_count() == 0


def test_after_round_freezes_first_then_collects_each_rounds_young_objects() -> None:
    heap = LongLivedHeap()
    heap.after_round()  # the first: collect and freeze
    try:
        assert heap.frozen and heap.frozen_count > 0
        kept = [Cycle() for _ in range(1000)]  # made by the round, kept after it
        dropped = weakref.ref(Cycle())  # the round's cyclic garbage
        assert _tracked(kept[0], 0) or _tracked(kept[0], 1)
        heap.after_round()
        assert dropped() is None  # collected at the round's end, not in the next interval
        assert _tracked(kept[0], 2) and not _tracked(kept[-1], 0) and not _tracked(kept[-1], 1)
        assert heap.refreezes == 0 and heap.frozen
    finally:
        heap.thaw()
    assert not heap.frozen and gc.get_freeze_count() == 0


def test_survivors_past_a_quarter_of_the_frozen_heap_are_frozen_with_it() -> None:
    heap = LongLivedHeap()
    held = Cycle()
    frozen_then_dropped = weakref.ref(held)
    heap.freeze()
    try:
        del held  # unreachable, but frozen: the collector cannot free it yet
        gc.collect()
        assert frozen_then_dropped() is not None
        piled = int(max(REFREEZE_FLOOR, REFREEZE_SHARE * heap.frozen_count)) + 1000
        kept = [Cycle() for _ in range(piled)]
        heap.after_round()
        assert heap.refreezes == 1 and heap.frozen
        assert not _tracked(kept[0]) and not _tracked(kept[-1])  # frozen now
        assert frozen_then_dropped() is None  # the refreeze thawed and collected first
        assert heap.frozen_count >= piled
        heap.after_round()  # nothing new piled up: no second refreeze
        assert heap.refreezes == 1
    finally:
        heap.thaw()
    assert gc.get_freeze_count() == 0 and _tracked(kept[0])
