"""What a round would do, and with which settings: ``rlmm offload --dry-run``.

Invariant: a plan only describes; building it reads the log dirs and asks the
cluster, and never reads or writes metadata, copies or deletes. Every topic found in
the log dirs has one ``TopicPlan``, offloaded or not, with each Kafka setting's
effective value and where it came from.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from rlmm.config import OFFLOAD_TOPIC_SETTINGS
from rlmm.model import TopicIdPartition
from rlmm.offload.logdir import LogDirSource
from rlmm.offload.skipped_topics import SkippedTopics
from rlmm.offload.topic_switches import TopicSwitches, kafka_value


@dataclass
class TopicPlan:
    """One topic of a dry run: its partitions here, how many this broker leads, and
    each setting's effective value with where it came from."""

    topic: str
    partitions: int
    led: int
    offloaded: bool
    settings: dict[str, tuple[str, str]]  # Kafka name -> (value, origin)
    skipped: str | None = None  # why the sidecar never touches it


@dataclass
class SidecarPlan:
    """What a round would do with which settings (``rlmm offload --dry-run``)."""

    node_id: int
    leadership: str
    topics: list[TopicPlan] = field(default_factory=list)
    leadership_unknown: str | None = None


def topic_plans(
    kept: Sequence[LogDirSource],
    disabled: Sequence[LogDirSource],
    led: Collection[TopicIdPartition],
    switches: TopicSwitches,
    skipped: SkippedTopics,
) -> list[TopicPlan]:
    """A plan of each topic of ``kept`` (offloaded) and ``disabled`` (not), by name."""
    by_topic: dict[str, list[LogDirSource]] = {}
    for source in [*kept, *disabled]:
        by_topic.setdefault(source.topic_id_partition.topic, []).append(source)
    plans: list[TopicPlan] = []
    for topic, group in sorted(by_topic.items()):
        effective, origins = switches.effective.get(topic, (group[0].retention(), {}))
        plans.append(TopicPlan(
            topic, len(group), sum(1 for s in group if s.topic_id_partition in led),
            offloaded=any(s in kept for s in group),
            settings={n: (kafka_value(effective, n), origins.get(n, "offload"))
                      for n in OFFLOAD_TOPIC_SETTINGS},
            skipped=skipped.reasons.get(topic),
        ))  # fmt: skip
    return plans


__all__ = ["SidecarPlan", "TopicPlan", "topic_plans"]
