"""The sidecar's long-lived state, out of the cyclic garbage collector's walks.

Job: once the first round has ended, everything then alive (the imports, and for each
partition its source, its leader, its metadata cache and its metric children: the bulk
of a broker's worth of partitions) is collected once and moved to the collector's
permanent generation (``gc.freeze()``). A full collection then walks only what was made
since, not the whole heap: at 4,000 partitions one took 0.47 s of CPU
(bench/sidecar_scale.py).

After each later round (``after_round``) the round pays for what it made: its young
objects are collected before the sleep (generations 0 and 1), not by the first
collections of the next, idle interval. Metadata applied after the freeze is owned by
frozen containers, so freeing what it replaces lowers the collector's allocation count
as much as the new objects raise it: at 4,000 partitions the round after the first left
about 140,000 objects in generation 0, and the idle interval after it spent 0.3 s of CPU
walking them. Survivors that pile up in the oldest generation past ``REFREEZE_SHARE`` of
the frozen heap (CPython's own rule for a full collection) are folded in: thaw, one full
collection of the whole heap, freeze again, at the end of the round that made them.

Invariants: nothing is frozen before the first ``after_round`` (or ``freeze``);
``thaw()`` (the sidecar's stop, idempotent) gives every frozen object back to the
collector, so a sidecar run in-process leaves nothing frozen. An object frozen here that
later becomes part of an unreachable cycle is freed at the next refreeze (which thaws
first) or at ``thaw()``, never lost for good; most of the frozen heap is acyclic and is
freed by reference counting anyway, which freezing does not affect.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)

# Survivors in the oldest (unfrozen) generation, as a share of the objects frozen, past
# which the heap is collected whole and frozen again: CPython's long-lived ratio.
REFREEZE_SHARE = 0.25
# ...and never for fewer than this many (a small heap is cheap to walk as it is).
REFREEZE_FLOOR = 10_000


class LongLivedHeap:
    """Freezes the heap after the first round, collects each later round's young
    objects at its end and refreezes when survivors pile up; ``thaw`` at the end."""

    def __init__(self) -> None:
        self.frozen = False
        self.frozen_count = 0  # objects frozen by the last freeze (some freed since)
        self.refreezes = 0
        self._middle_collections = gc.get_stats()[1]["collections"]  # as last seen

    def freeze(self) -> None:
        """Collect, then freeze what is left; does nothing while frozen."""
        if self.frozen:
            return
        gc.collect()
        gc.freeze()
        self.frozen = True
        self.frozen_count = gc.get_freeze_count()
        log.debug("froze %d long-lived objects", self.frozen_count)

    def after_round(self) -> None:
        """The end of a round: the first freezes; later ones collect the round's young
        objects, and refreeze once the oldest generation's survivors pass
        ``REFREEZE_SHARE`` of the frozen heap (and ``REFREEZE_FLOOR``)."""
        if not self.frozen:
            self.freeze()
            return
        young = len(gc.get_objects(0)) + len(gc.get_objects(1))
        automatic = gc.get_stats()[1]["collections"] != self._middle_collections
        gc.collect(1)
        self._middle_collections = gc.get_stats()[1]["collections"]
        # The oldest generation grows only by promotions: this collection's (at most
        # ``young``) and those of the round's own middle-generation collections. An
        # idle round has neither, and is spared a walk of that generation (at 4,000
        # partitions 140,000 objects, 24 ms: a tenth of the idle round's work).
        if young < REFREEZE_FLOOR // 10 and not automatic:
            return
        kept = len(gc.get_objects(2))
        if kept > max(REFREEZE_FLOOR, REFREEZE_SHARE * self.frozen_count):
            gc.unfreeze()
            self.frozen = False
            self.freeze()
            self.refreezes += 1
            log.debug("refroze the heap: %d objects had survived since the last freeze", kept)

    def thaw(self) -> None:
        if self.frozen:
            gc.unfreeze()
            self.frozen = False


__all__ = ["REFREEZE_FLOOR", "REFREEZE_SHARE", "LongLivedHeap"]
