"""Topic names that are never user data: Kafka's internal topics and rlmm's own.

Job: one home for the names, so the offloader (which never copies these) and
``rlmm restore`` (which writes its progress to ``RESTORE_PROGRESS_TOPIC`` and its offset
map to ``RESTORE_OFFSETS_TOPIC`` of the target cluster) agree. Invariant: imports
nothing; a name here is a topic the offloader skips, whatever the configuration says.
"""

from __future__ import annotations

# Kafka's own: consumer offsets, transactions, KIP-405's metadata, KRaft's log.
KAFKA_INTERNAL_TOPICS = frozenset(
    {"__consumer_offsets", "__transaction_state", "__remote_log_metadata", "__cluster_metadata"}
)
# `rlmm restore`'s progress in the target cluster (its --progress-topic default): a
# broker of a cluster restored into holds it beside the user's topics.
RESTORE_PROGRESS_TOPIC = "__rlmm_restore"
# `rlmm restore`'s offset map in the target cluster (its --offsets-topic default): where
# each source offset went, for moving consumer groups (rlmm.restore.offset_map).
RESTORE_OFFSETS_TOPIC = "__rlmm_restore_offsets"
INTERNAL_TOPICS = KAFKA_INTERNAL_TOPICS | {RESTORE_PROGRESS_TOPIC, RESTORE_OFFSETS_TOPIC}

__all__ = [
    "INTERNAL_TOPICS",
    "KAFKA_INTERNAL_TOPICS",
    "RESTORE_OFFSETS_TOPIC",
    "RESTORE_PROGRESS_TOPIC",
]
