"""Each topic's switches, resolved each round: rlmm's config and the cluster's topic
configs (``OffloadSettings.effective``), and KIP-950's turning a topic's tiering off.

Invariants: every source of a topic the sidecar may touch carries its topic's settings
of this round; a change of a topic's setting is said once, with where it came from and
what it means (a topic not offloaded only at its first sight), and a copy delay that
copies nothing is warned of once per cause; a topic with remote.storage.enable=false
is no longer offloaded, and its remote data is deleted only with
remote.log.delete.on.disable=true, only for the partitions this broker leads, and once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from rlmm.errors import ConfigError
from rlmm.model import TopicIdPartition
from rlmm.offload.cluster import ClusterView
from rlmm.offload.copy_delay import never_copied_problem
from rlmm.offload.errors import ForeignSegmentError
from rlmm.offload.leadership import assign, lead_all
from rlmm.offload.log_source import RetentionSettings
from rlmm.offload.logdir import LogDirSource
from rlmm.offload.remote_log_manager import RemoteLogManager
from rlmm.offload.settings import OffloadSettings
from rlmm.offload.skipped_topics import SkippedTopics

# The sidecar's lines keep the logger name operators filter on, whichever module says them.
log = logging.getLogger("rlmm.offload.sidecar")
# What a KIP-950 change means, said with it.
CONSEQUENCE = {
    ("remote.log.copy.disable", "true"): ": copying stops; the remote data stays readable"
    " and keeps expiring",
    ("remote.log.copy.disable", "false"): ": copying resumes",
    ("remote.storage.enable", "false"): ": no longer offloaded (remote data deleted only with"
    " remote.log.delete.on.disable=true)",
}


def kafka_value(settings: RetentionSettings, name: str) -> str:
    """``settings``' value of the Kafka setting ``name``, as Kafka writes it."""
    value = getattr(settings, name.replace(".", "_"))
    return str(value).lower() if isinstance(value, bool) else str(value)


class TopicSwitches:
    """The topics' settings as last resolved and said, and the partitions whose remote
    data KIP-950 deleted."""

    def __init__(self, settings: OffloadSettings, broker_id: int, skipped: SkippedTopics) -> None:
        self.settings = settings
        self.broker_id = broker_id
        self.skipped = skipped
        # topic -> its settings and where each came from (as last resolved and logged)
        self.effective: dict[str, tuple[RetentionSettings, dict[str, str]]] = {}
        self._deleted_on_disable: set[TopicIdPartition] = set()
        self._said_delay: dict[str, str] = {}  # topic -> why its copy delay copies nothing

    def settle(
        self,
        sources: Sequence[LogDirSource],
        disabled: list[LogDirSource],
        view: ClusterView | None,
    ) -> list[LogDirSource]:
        """Give each source its topic's settings this round (rlmm's config and the
        cluster's topic configs, ``OffloadSettings.effective``), saying each change;
        the sources of topics the cluster turned off (``remote.storage.enable=false``
        set on the topic) move to ``disabled``. The sources still offloaded."""
        settled: dict[str, RetentionSettings] = {}
        quiet = {s.topic_id_partition.topic for s in disabled}
        for source in [*sources, *disabled]:
            topic = source.topic_id_partition.topic
            if view is not None and topic in view.kafka_tiered:
                continue  # never touched: assign() says so
            if topic not in settled:
                configs = view.topic_configs.get(topic) if view is not None else None
                settled[topic] = self._resolve(topic, configs, quiet=topic in quiet)
            source.set_retention(settled[topic])
        kept = [s for s in sources if s.retention().remote_storage_enable]
        disabled += [s for s in sources if not s.retention().remote_storage_enable]
        return kept

    def _resolve(
        self, topic: str, configs: Mapping[str, str] | None, *, quiet: bool = False
    ) -> RetentionSettings:
        """``topic``'s effective settings; a change from the last round is logged
        (``quiet``: a topic rlmm does not offload, only its first sight is not)."""
        try:
            effective, origins = self.settings.effective(topic, configs)
        except ConfigError as e:
            log.error("topic %s: %s; following rlmm's config alone", topic, e)
            effective, origins = self.settings.effective(topic, None)
        before = self.effective.get(topic)
        self.effective[topic] = (effective, origins)
        self._say_delay(topic, effective)
        if before is None and quiet:
            return effective
        if before is None:
            from_cluster = [n for n, o in origins.items() if o == "cluster"]
            if from_cluster:
                log.info("topic %s follows the cluster's %s", topic, ", ".join(
                    f"{n}={kafka_value(effective, n)}" for n in from_cluster))  # fmt: skip
            return effective
        changed = [n for n in origins if kafka_value(effective, n) != kafka_value(before[0], n)]
        for name in changed:
            log.info(
                "topic %s: %s = %s (was %s), from %s%s", topic, name,
                kafka_value(effective, name), kafka_value(before[0], name),
                "the cluster's topic config" if origins[name] == "cluster" else origins[name],
                CONSEQUENCE.get((name, kafka_value(effective, name)), ""),
            )  # fmt: skip
        return effective

    def _say_delay(self, topic: str, effective: RetentionSettings) -> None:
        """Warn once per cause of a topic whose copy delay copies nothing."""
        problem = never_copied_problem(effective) if effective.remote_storage_enable else None
        if problem is not None and self._said_delay.get(topic) != problem:
            log.warning("topic %s: %s", topic, problem)
        if problem is None:
            self._said_delay.pop(topic, None)
        else:
            self._said_delay[topic] = problem

    async def delete_disabled(
        self, rlm: RemoteLogManager, disabled: Sequence[LogDirSource], view: ClusterView | None
    ) -> None:
        """KIP-950: a topic with remote.storage.enable=false and
        remote.log.delete.on.disable=true loses its remote data: the partitions this
        broker leads are deleted (segments, then the partition's metadata), once."""
        wanted = [s for s in disabled if s.retention().remote_log_delete_on_disable]
        if not wanted:
            return
        led = lead_all(wanted) if view is None else assign(wanted, view, self.broker_id)
        for source in led.lead:
            tp = source.topic_id_partition
            if tp in self._deleted_on_disable or tp.topic in self.skipped:
                continue
            try:
                deleted = await rlm.delete_partition(tp, only_if_tiered=True)
            except ForeignSegmentError as e:
                self.skipped.skip(tp.topic, "foreign-segments", str(e))
                continue
            except Exception as e:  # tried again next round
                log.error("%s: deleting its remote data failed: %s", tp, e)
                continue
            self._deleted_on_disable.add(tp)
            if deleted:
                log.info(
                    "%s: deleted its %d remote segments and their metadata"
                    " (remote.storage.enable=false, remote.log.delete.on.disable=true)",
                    tp, deleted,
                )  # fmt: skip


__all__ = ["CONSEQUENCE", "TopicSwitches", "kafka_value"]
