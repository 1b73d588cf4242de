"""The leadership poll: between a round's start and the next, the cluster is asked who
leads every ``leadership.poll.ms``, and each partition this broker gains gets a round
of its own at once (as Kafka's RLM schedules a new leader's copy task at once).

Invariants: a partition another broker leads now is abandoned at once (its copy in
flight deleted); leadership that cannot be learned abandons every partition led; a
partition gained is led and copied in a task of its own (``side``), never the poll's
(cancelling the poll at a round's end must not cut a gain in half), and never while
its own round still runs (``gaining``); only partitions found in this round's log dir
scan and still offloaded (``sources``) are gained; nothing is gained once stopping.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from rlmm.model import TopicIdPartition
from rlmm.offload.cluster import ClusterView, raise_if_cancelling
from rlmm.offload.cluster_leadership import ClusterLeadership
from rlmm.offload.errors import LeadershipError
from rlmm.offload.leadership import assign, lost
from rlmm.offload.logdir import LogDirSource
from rlmm.offload.metrics import OffloadMetrics
from rlmm.offload.remote_log_manager import RemoteLogManager
from rlmm.offload.run_report import RoundResults, SidecarReport
from rlmm.offload.tasks import cancel_task

# The sidecar's lines keep the logger name operators filter on, whichever module says them.
log = logging.getLogger("rlmm.offload.sidecar")


class LeadershipPoll:
    """The poll of one sidecar, and the rounds of its partitions gained."""

    def __init__(
        self,
        leading: ClusterLeadership,
        metrics: OffloadMetrics,
        *,
        broker_id: int,
        interval_s: float,
        stop: asyncio.Event,
    ) -> None:
        self.leading = leading
        self.metrics = metrics
        self.broker_id = broker_id
        self.interval_s = interval_s
        self._stop = stop
        # A round takes the results of the gains' rounds that ended; one still running
        # goes on beside the next round, which leaves its partitions out (``gaining``).
        self.side: list[asyncio.Task[RoundResults]] = []
        self.gaining: set[TopicIdPartition] = set()
        # what the poll may lead before the next round: the topics still offloaded
        self.sources: dict[TopicIdPartition, LogDirSource] = {}

    async def run(self, rlm: RemoteLogManager, report: SidecarReport) -> None:
        """Ask the cluster for leadership every leadership.poll.ms until cancelled: a
        partition led by another broker now is abandoned at once (its copy in flight
        deleted); one this broker now leads is led at once and gets a round of its own,
        in a task of its own (``side``); unknown leadership stops all."""
        cluster = self.leading.cluster
        if cluster is None:
            return
        while True:
            await asyncio.sleep(self.interval_s)
            raise_if_cancelling()  # a cancellation a library swallowed ends the poll
            topics = {tp.topic for tp in self.leading.led} | {tp.topic for tp in rlm.followers}
            try:
                view = await cluster.view(topics)
            except LeadershipError as e:
                raise_if_cancelling()
                if self.leading.led:
                    log.error("leadership unknown: abandoning every partition: %s", e)
                    self.metrics.leadership_known.set(0)
                    self.metrics.readiness.not_ready(f"leadership unknown: {e}")
                    await self.leading.abandon(rlm, list(self.leading.led))
                continue
            gone = lost(self.leading.led, view, self.broker_id)
            if gone:
                await self.leading.abandon(rlm, gone)
            gained = self._gained(rlm, view)
            if gained and not self._stop.is_set():
                # Its own task, never the poll's: cancelling the poll at a round's end
                # must not cut a gain in half; a round takes its results once it ended.
                self.gaining |= set(gained)
                self.side.append(
                    asyncio.create_task(self._gain(rlm, report, view, gained), name="rlmm-gain")
                )

    def _gained(self, rlm: RemoteLogManager, view: ClusterView) -> list[TopicIdPartition]:
        """The partitions followed that ``view`` names this broker the leader of, and
        that may be led now."""
        return [
            tp
            for tp in rlm.followers
            if (state := view.partitions.get((tp.topic, tp.partition))) is not None
            and state.leader == self.broker_id
            and tp.topic not in view.kafka_tiered
            and tp.topic not in self.leading.skipped
            and tp not in self.gaining
            and tp in self.sources
        ]

    async def _gain(
        self,
        rlm: RemoteLogManager,
        report: SidecarReport,
        view: ClusterView,
        gained: Sequence[TopicIdPartition],
    ) -> RoundResults:
        """Lead ``gained`` (found by the poll) and run their round now."""
        leading = self.leading
        try:
            sources = [self.sources[tp] for tp in gained if tp in self.sources]
            assignment = assign(sources, view, self.broker_id)
            lead = [s for s in assignment.lead if s.topic_id_partition.topic not in leading.skipped]
            leading.say_waiting(assignment.waiting, keep=True)
            if not lead:
                return {}
            try:
                await rlm.on_leadership_changes(lead, [], start_tasks=False)
                wanted = await leading.drop_foreign(rlm, {s.topic_id_partition for s in lead})
            except Exception as e:  # the next round's assignment leads them again
                log.error("leading %s failed (tried again next round): %s",
                          ", ".join(map(str, gained)), e)  # fmt: skip
                return {}
            led = {tp: assignment.epochs.get(tp, -1) for tp in wanted}
            leading.changed(led, dict(leading.led))
            leading.led.update(led)
            report.led = len(leading.led)
            self.metrics.partitions_led.set(len(leading.led))
            # a new leader's first copy goes by the broker's LSO, not the checkpoint's
            await leading.stable_offsets(led, self.sources)
            return await rlm.run_round(list(led))
        finally:
            self.gaining -= set(gained)

    async def harvest(self, *, wait: bool) -> RoundResults:
        """The results of the gains' own rounds that have ended, taken off ``side``
        (``wait``: of every one, once all have ended; the poll may add more meanwhile)."""
        while wait and (running := [t for t in self.side if not t.done()]):
            await asyncio.wait(running)
        results: RoundResults = {}
        for task in [t for t in self.side if t.done()]:
            self.side.remove(task)
            if not task.cancelled():
                results.update(task.result())
        return results

    def cancel(self) -> None:
        """Cancel the gains' rounds (a second signal abandons their copies in flight)."""
        for task in self.side:
            task.cancel()

    async def close(self) -> None:
        """Cancel the gains' rounds and wait (bounded) until each ended."""
        for task in self.side:
            await cancel_task(task)
        self.side = []


__all__ = ["LeadershipPoll"]
