"""The partitions this sidecar leads, as its cluster says: learned each round, led and
followed through the RemoteLogManager, and said when they change.

Invariants: with a cluster only the partitions it names this broker the leader of are
led, at its leader epoch, and leadership that cannot be learned leads nothing (never
"lead everything"); without one every partition found is led (one broker); a topic
the cluster tiers itself, or whose metadata holds segments rlmm did not write, is never
led (``SkippedTopics``); a replicated partition over a metadata log other brokers
cannot share is a LeadershipError (the sidecar stops); only what changed is led or
followed again, and every change is counted in ``rlmm_offload_leadership_changes``;
before a round of partitions led, each one's source is given the last stable offset
this broker answers for it (``stable_offsets``), or None when it does not answer (the
round goes on, bounded by the log dir's checkpoint).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence

from eventlog.registry import types_where
from rlmm.config import RlmmConfig
from rlmm.model import TopicIdPartition
from rlmm.offload.cluster import ClusterClient, ClusterView
from rlmm.offload.errors import LeadershipError, OffloadError
from rlmm.offload.leadership import Assignment, assign, lead_all
from rlmm.offload.logdir import LogDirSource
from rlmm.offload.metrics import OffloadMetrics
from rlmm.offload.remote_log_manager import RemoteLogManager
from rlmm.offload.run_report import SidecarReport
from rlmm.offload.skipped_topics import SkippedTopics

# The sidecar's lines keep the logger name operators filter on, whichever module says them.
log = logging.getLogger("rlmm.offload.sidecar")


class Unknown:
    """Leadership could not be learned this round."""


UNKNOWN = Unknown()


class ClusterLeadership:
    """Led partition -> the cluster's leader epoch (-1: no cluster), and how it is learned."""

    def __init__(self, config: RlmmConfig, metrics: OffloadMetrics, skipped: SkippedTopics) -> None:
        self.config = config
        self.metrics = metrics
        self.skipped = skipped
        # Who says who leads: set once the event log is open; None without a cluster.
        self.cluster: ClusterClient | None = None
        self.led: dict[TopicIdPartition, int] = {}
        self._said_waiting: set[tuple[TopicIdPartition, str]] = set()
        self._configs_warned = False

    async def view(
        self, sources: Sequence[LogDirSource], report: SidecarReport
    ) -> ClusterView | Unknown | None:
        """The cluster's view of ``sources``' topics; None without a cluster; UNKNOWN
        (nothing is led this round) when leadership cannot be learned."""
        if self.cluster is None:
            report.leadership_unknown = None
            self.metrics.leadership_known.set(1)
            return None
        try:
            view = await self.cluster.view({s.topic_id_partition.topic for s in sources})
        except LeadershipError as e:
            if report.leadership_unknown != str(e):
                log.error("leadership unknown, nothing is copied or expired: %s", e)
            report.leadership_unknown = str(e)
            self.metrics.leadership_known.set(0)
            return UNKNOWN
        if report.leadership_unknown is not None:
            log.info("leadership learned again from the cluster at %s", self.cluster.bootstrap)
        report.leadership_unknown = None
        self.metrics.leadership_known.set(1)
        if not view.configs_seen and not self._configs_warned:
            self._configs_warned = True
            log.warning(
                "the cluster at %s denies DescribeConfigs to this sidecar: topics the cluster"
                " tiers itself are known only by segments rlmm did not write in their"
                " metadata, and the topics' configs are rlmm's alone (grant"
                " DESCRIBE_CONFIGS on the topics and the cluster)",
                self.cluster.bootstrap,
            )
        return view

    def assignment(self, sources: Sequence[LogDirSource], view: ClusterView | None) -> Assignment:
        """This round's split of ``sources`` by ``view`` (None: no cluster, lead all). A
        replicated partition over a metadata log other brokers cannot share raises
        LeadershipError (the sidecar stops)."""
        if view is None:
            return lead_all(sources)
        assignment = assign(sources, view, self.config.broker_id)
        kind = self.config.event_log_type
        if assignment.replicated and not self.config.event_log_backend().shared:
            tp = assignment.replicated[0]
            state = view.partitions[(tp.topic, tp.partition)]
            shared = " or ".join(f'"{k}"' for k in types_where(lambda c: c.shared))
            raise LeadershipError(
                f"{tp} has {len(state.replicas)} replicas (brokers"
                f" {', '.join(map(str, state.replicas))}), but the metadata log is"
                f" eventlog.type = {kind!r}, on this host only: the other brokers' sidecars"
                " cannot see it, and a new leader would copy everything again. Set"
                f" [eventlog] type = {shared} (a log the cluster's brokers share: Kafka's"
                " is the cluster's __remote_log_metadata) for a replicated cluster"
            )
        for topic in assignment.kafka_tiered:
            self.skipped.skip(
                topic,
                "kafka-tiered",
                "the cluster tiers it itself"
                " (remote.storage.enable=true, remote.log.storage.system.enable=true)",
            )
        return assignment

    async def stable_offsets(
        self, tps: Iterable[TopicIdPartition], sources: Mapping[TopicIdPartition, LogDirSource]
    ) -> None:
        """Give each of ``tps``' sources the last stable offset this broker holds in memory
        for it, for the round about to run: Kafka rewrites the high watermark checkpoint
        only every ``replica.high.watermark.checkpoint.interval.ms``, and a segment rolled
        meanwhile would wait for it. A partition the broker does not answer for, or all
        when it cannot be asked, gets None (the checkpoint bounds it again): said at
        DEBUG, since leadership, asked of the same cluster, says what is wrong."""
        led = [sources[tp] for tp in tps if tp in sources]
        if self.cluster is None or not led:
            return  # one broker without a cluster: its checkpoint alone, as before
        found: dict[tuple[str, int], int] = {}
        try:
            found = await self.cluster.stable_offsets(
                {(s.pdir.topic, s.pdir.partition) for s in led}
            )
        except OffloadError as e:
            log.debug("last stable offsets unknown this round (the log dirs' checkpoints"
                      " bound the copies): %s", e)  # fmt: skip
        for s in led:
            s.set_stable_offset(found.get((s.pdir.topic, s.pdir.partition)))

    async def lead(
        self, rlm: RemoteLogManager, assignment: Assignment, report: SidecarReport
    ) -> None:
        """Lead what ``assignment`` says (minus topics with segments rlmm did not write),
        follow the rest; count the changes."""
        lead = [s for s in assignment.lead if s.topic_id_partition.topic not in self.skipped]
        wanted = {s.topic_id_partition for s in lead}
        stale = [
            tp
            for tp, epoch in self.led.items()
            if tp not in wanted or assignment.epochs.get(tp, -1) != epoch
        ]
        if stale:
            await rlm.abandon(stale)
        follow = [*assignment.follow, *assignment.waiting]
        follow += [tp for tp in self.led if tp not in wanted]
        # Only what changed is led or followed again: a broker's thousands of partitions
        # led at the same epoch, through the same source, cost nothing round after round.
        fresh = [s for s in lead if not rlm.leads(s)]
        newly_followed = [tp for tp in follow if tp not in rlm.followed]
        if fresh or newly_followed:
            await rlm.on_leadership_changes(fresh, newly_followed, start_tasks=False)
        wanted = await self.drop_foreign(rlm, wanted)
        led = {tp: assignment.epochs.get(tp, -1) for tp in wanted}
        self.changed(led, self.led, with_released=True)
        self.say_waiting(assignment.waiting)
        self.led = led
        report.led = len(led)
        self.metrics.partitions_led.set(len(led))
        self.metrics.partitions_waiting.set(len(assignment.waiting))

    async def abandon(self, rlm: RemoteLogManager, tps: Iterable[TopicIdPartition]) -> None:
        """Leadership of ``tps`` was lost (or cannot be learned): their copies in flight
        are abandoned at once and they are no longer led; counted as changes."""
        gone = list(tps)
        await rlm.abandon(gone)
        self.metrics.leadership_changes.inc(len(gone))
        for tp in gone:
            self.led.pop(tp, None)
        self.metrics.partitions_led.set(len(self.led))

    async def drop_foreign(
        self, rlm: RemoteLogManager, wanted: set[TopicIdPartition]
    ) -> set[TopicIdPartition]:
        """``wanted`` minus the topics whose metadata holds segments rlmm did not write
        (those are skipped for good, and abandoned)."""
        for tp in wanted:
            foreign = await rlm.foreign_segments(tp)
            if foreign:
                m = foreign[0]
                self.skipped.skip(
                    tp.topic,
                    "foreign-segments",
                    f"its metadata holds {len(foreign)} segments in {tp} that rlmm did not"
                    f" write (e.g. {m.remote_log_segment_id}, broker {m.broker_id}): another"
                    " writer tiers it (Kafka's own RemoteLogManager?)",
                )
        dropped = [tp for tp in wanted if tp.topic in self.skipped]
        if dropped:
            await rlm.abandon(dropped)
        return {tp for tp in wanted if tp.topic not in self.skipped}

    def changed(
        self,
        led: Mapping[TopicIdPartition, int],
        before: Mapping[TopicIdPartition, int],
        *,
        with_released: bool = False,
    ) -> None:
        """Count and say the leadership changes from ``before`` to ``led`` (partitions
        gained, or led at a new epoch; released too, when ``led`` is the whole set)."""
        gained = sorted(str(tp) for tp in set(led) - set(before))
        released = sorted(str(tp) for tp in set(before) - set(led)) if with_released else []
        changes = len(gained) + len(released)
        changes += sum(1 for tp in led if tp in before and led[tp] != before[tp])
        if changes:
            self.metrics.leadership_changes.inc(changes)
        if self.cluster is not None and (gained or released):
            total = len(led) if with_released else len(set(led) | set(before))
            log.info(
                "leading %d partitions%s%s", total,
                f"; now leading {', '.join(gained)}" if gained else "",
                f"; no longer leading {', '.join(released)}" if released else "",
            )  # fmt: skip

    def say_waiting(self, waiting: Mapping[TopicIdPartition, str], *, keep: bool = False) -> None:
        """Say once per partition and epoch why a partition led is not led yet."""
        for tp, why in waiting.items():
            if (tp, why) not in self._said_waiting:
                log.info("%s: waiting to lead: %s", tp, why)
        said = set(waiting.items())
        self._said_waiting = self._said_waiting | said if keep else said


__all__ = ["UNKNOWN", "ClusterLeadership", "Unknown"]
