"""The topics the sidecar never touches: those the cluster tiers itself, and those whose
metadata holds segments rlmm did not write.

Invariant: a topic once skipped stays skipped for the run (another writer tiers it),
is said once, with why, and the ``rlmm_offload_topics_skipped`` gauge counts the
skipped topics by reason.
"""

from __future__ import annotations

import logging

from rlmm.offload.metrics import OffloadMetrics

# The sidecar's lines keep the logger name operators filter on, whichever module says them.
log = logging.getLogger("rlmm.offload.sidecar")
REASONS = ("kafka-tiered", "foreign-segments")


class SkippedTopics:
    """Topic -> why it is never touched (a reason of ``REASONS``)."""

    def __init__(self, metrics: OffloadMetrics) -> None:
        self.metrics = metrics
        self.reasons: dict[str, str] = {}

    def __contains__(self, topic: object) -> bool:
        return topic in self.reasons

    def skip(self, topic: str, reason: str, why: str) -> None:
        """Never touch ``topic`` again (said once, the first time)."""
        if topic not in self.reasons:
            log.warning("never touching topic %s: %s", topic, why)
            self.reasons[topic] = reason
            for r in REASONS:
                self.metrics.topics_skipped.labels(r).set(
                    sum(1 for v in self.reasons.values() if v == r)
                )


__all__ = ["REASONS", "SkippedTopics"]
