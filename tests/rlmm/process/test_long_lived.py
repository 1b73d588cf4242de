"""Long-lived state frozen out of the collector's walks (rlmm.process.long_lived): after
the first round, each later round's young objects collected at its end, the heap
refrozen once survivors pile up, and everything given back at ``thaw`` (the sidecar's
own freeze, /metrics and stop are checked in
tests/rlmm/offload/test_sidecar_housekeeping.py)."""

from __future__ import annotations

import gc
import weakref

from rlmm.process.long_lived import REFREEZE_FLOOR, REFREEZE_SHARE, LongLivedHeap


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
