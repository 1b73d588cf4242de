"""The round loop of the `rlmm offload` sidecar: scan the log dirs, learn leadership,
settle each topic's switches, lead, run a copy and an expiration round, then sleep
``remote.log.manager.task.interval.ms`` while the leadership poll runs.

Invariants: a round runs the partitions led but those a gain's own round still runs
(``LeadershipPoll.gaining``), bounded by the last stable offsets the broker answered
just before it (``ClusterLeadership.stable_offsets``), never two rounds of a partition
at once, and takes the results of the gains' rounds that ended; leadership that
cannot be learned leads nothing and is asked again within ``leadership.poll.ms``; a
partition no longer found is stopped; after each round ``/readyz`` says what it found
(unless stopping), the metadata lag is published (also beside the round: a first
round over a backlog can take minutes), and the round's housekeeping runs before its
line; the leadership poll runs from a round's start to the next one's scan (the
round's end and its lag gauges included), never while a round's scan, view and lead
change what is led; the loop ends after one round (``once``) or at a stop, once the
gains' rounds still running ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from pathlib import Path

from eventlog import EventLog
from eventlog.errors import EventLogAuthError
from rlmm.model import TopicIdPartition
from rlmm.offload.cluster import ClusterView
from rlmm.offload.cluster_leadership import ClusterLeadership, Unknown
from rlmm.offload.display import Display
from rlmm.offload.health import round_problem
from rlmm.offload.leadership import Assignment
from rlmm.offload.leadership_poll import LeadershipPoll
from rlmm.offload.logdir import LogDirCache, LogDirSource, log_dir_problem, scan_log_dirs
from rlmm.offload.metrics import OffloadMetrics
from rlmm.offload.remote_log_manager import RemoteLogManager
from rlmm.offload.run_report import RoundResults, SidecarReport
from rlmm.offload.settings import OffloadSettings
from rlmm.offload.tasks import cancel_task
from rlmm.offload.topic_configs import TopicConfigKeeper
from rlmm.offload.topic_switches import TopicSwitches
from rlmm.process.long_lived import LongLivedHeap
from rlmm.process.native_memory import NativeMemory

# The sidecar's lines keep the logger name operators filter on, whichever module says them.
log = logging.getLogger("rlmm.offload.sidecar")
# How long the metadata lag gauges may hold up a round. The event log retries a
# request to a hung broker (one that keeps its sockets open and answers nothing)
# until its delivery timeout, 120 s by default: a metric must not stop the offloading.
EVENT_LOG_LAG_TIMEOUT_S = 5.0


class RoundLoop:
    """The rounds of one run over ``log_dirs`` (see the module docstring)."""

    def __init__(
        self,
        log_dirs: Sequence[Path],
        settings: OffloadSettings,
        *,
        once: bool,
        stop: asyncio.Event,
        metrics: OffloadMetrics,
        display: Display,
        native_memory: NativeMemory,
        long_lived: LongLivedHeap,
        leading: ClusterLeadership,
        poll: LeadershipPoll,
        switches: TopicSwitches,
        event_log: EventLog,
        keeper: TopicConfigKeeper,
    ) -> None:
        self.log_dirs = log_dirs
        self.settings = settings
        self.once = once
        self._stop = stop
        self.metrics = metrics
        self.display = display
        self.native_memory = native_memory
        self.long_lived = long_lived
        self.leading = leading
        self.poll = poll
        self.switches = switches
        self.event_log = event_log
        self.keeper = keeper
        self.abandoned = False  # a second signal cancelled the round
        self._round: asyncio.Task[RoundResults] | None = None
        self._warned: set[str] = set()
        self._scanned = LogDirCache()  # unchanged dirs are not listed again each round
        self._found: set[TopicIdPartition] = set()

    def abandon(self) -> None:
        """A second signal: cancel the round in progress and the gains' rounds (their
        copies in flight are abandoned, their objects deleted)."""
        self.abandoned = True
        if self._round is not None:
            self._round.cancel()
        self.poll.cancel()  # gains' rounds between two rounds

    async def run(self, rlm: RemoteLogManager, report: SidecarReport) -> None:
        """Run rounds until done (``once``) or stopped."""
        for log_dir in self.log_dirs:
            problem = await asyncio.to_thread(log_dir_problem, log_dir)
            if problem is not None:
                log.warning("%s", problem)
                report.warnings.append(problem)
        while not self._stop.is_set():
            results = await self._one_round(rlm, report)
            if self.once:
                await self._after_round(rlm, report, results)
                break
            await self._between_rounds(rlm, report, results)
        # Gains' rounds still running: a first signal lets their copies in flight
        # finish (no new segment starts), a second one cancelled them.
        await self.poll.harvest(wait=True)

    async def _scan(
        self, rlm: RemoteLogManager, report: SidecarReport
    ) -> tuple[list[LogDirSource], list[LogDirSource]]:
        """This round's partitions found, and those of topics not offloaded; the
        partitions no longer found are stopped."""
        disabled: list[LogDirSource] = []
        sources = await asyncio.to_thread(
            scan_log_dirs, self.log_dirs, self.settings, self._warned, disabled, self._scanned
        )
        now_found = {s.topic_id_partition for s in sources}
        gone = self._found - now_found
        if gone:
            await rlm.stop_partitions(gone)
            for tp in gone:
                self.leading.led.pop(tp, None)
        self._found = now_found
        report.partitions = len(now_found)
        return sources, disabled

    async def _one_round(self, rlm: RemoteLogManager, report: SidecarReport) -> RoundResults:
        """Scan, learn leadership, settle the topics' switches, lead, and run a round."""
        sources, disabled = await self._scan(rlm, report)
        view = await self.leading.view([*sources, *disabled], report)
        assignment = None
        if not isinstance(view, Unknown):
            sources = self.switches.settle(sources, disabled, view)
            assignment = self.leading.assignment(sources, view)
            await self.switches.delete_disabled(rlm, disabled, view)
        # what the poll may lead before the next round: the topics still offloaded
        self.poll.sources = {s.topic_id_partition: s for s in sources}
        # (a view is known whenever there is an assignment: the second test tells mypy)
        if assignment is None or isinstance(view, Unknown):
            if self.leading.led:
                await self.leading.abandon(rlm, list(self.leading.led))
                report.led = 0
            return {}
        return await self._lead_and_run(rlm, report, assignment, view)

    async def _lead_and_run(
        self,
        rlm: RemoteLogManager,
        report: SidecarReport,
        assignment: Assignment,
        view: ClusterView | None,
    ) -> RoundResults:
        """Lead what ``assignment`` says and run the round, the poll beside it."""
        results: RoundResults = {}
        await self.leading.lead(rlm, assignment, report)
        self._round = asyncio.create_task(self._run_round(rlm))
        poll = asyncio.create_task(self.poll.run(rlm, report), name="rlmm-leadership-poll")
        # The lag beside the round, not before it: a first round over a backlog can
        # take minutes (a restarted sidecar must not publish its lag only after it),
        # and an event log that takes the lag's whole bound to answer (a broker that
        # leads a metadata partition died or hangs) must not hold up the round's
        # copies nor, with it, the poll.
        lag = asyncio.create_task(self._record_event_log_lag(rlm), name="rlmm-metadata-lag")
        try:
            results = await self._round
            # what follows the round runs with the poll still on
            await lag
            await self.keeper.after_round(list(self.leading.led), view)
        except asyncio.CancelledError:
            if not self.abandoned:
                raise  # not ours: propagate
        finally:
            self._round = None
            await cancel_task(lag)
            await cancel_task(poll)
        return results

    async def _run_round(self, rlm: RemoteLogManager) -> RoundResults:
        """A round of the partitions led but those a gain's own round runs now, with the
        results of the gains' rounds that ended by its end (``--once``, or stopping: of
        all of them, once they end). Cancelled (a second signal), it abandons them all."""
        chosen = [tp for tp in self.leading.led if tp not in self.poll.gaining]
        main = asyncio.create_task(self._stable_then_round(rlm, chosen), name="rlmm-round")
        try:
            results = await main
            results.update(await self.poll.harvest(wait=self.once or self._stop.is_set()))
        except BaseException:
            await cancel_task(main)
            await self.poll.close()
            raise
        return results

    async def _stable_then_round(
        self, rlm: RemoteLogManager, chosen: list[TopicIdPartition]
    ) -> RoundResults:
        """The round of ``chosen``, bounded by the broker's last stable offsets as asked
        just before it (in the round's task: a second signal cancels the asking too)."""
        await self.leading.stable_offsets(chosen, self.poll.sources)
        return await rlm.run_round(chosen)

    async def _after_round(
        self, rlm: RemoteLogManager, report: SidecarReport, results: RoundResults
    ) -> None:
        """Count the round, publish what it found, and do its housekeeping."""
        report.rounds += 1
        report.denied = self._count_failures(results)
        behind = await self._record_event_log_lag(rlm)
        if not self._stop.is_set():
            problem = report.leadership_unknown or round_problem(results) or behind
            self.metrics.readiness.round_completed(problem)
        # The round's housekeeping is the round's (before its line): the first round
        # that led built what later ones keep (long_lived); the others' young objects
        # are collected now, not in the idle interval after; then the freed buffers
        # go back to the OS.
        if self.leading.led and not self.once:
            self.long_lived.after_round()
        self.native_memory.trim()
        self.display.round_done(len(self._found), len(self.leading.led))

    async def _between_rounds(
        self, rlm: RemoteLogManager, report: SidecarReport, results: RoundResults
    ) -> None:
        """The round's end (``_after_round``), then sleep until the next round (or a
        stop), the poll running all the while."""
        # Unknown leadership is asked again sooner than a round's interval.
        interval = self.settings.task_interval_ms / 1000
        if report.leadership_unknown is not None:
            interval = min(interval, self.settings.leadership_poll_ms / 1000)
        # Meanwhile the poll leads what this broker gains, each with a round of its
        # own at once: the other partitions keep their interval. It runs through the
        # round's end too, whose lag gauges may wait out their bound on a dead broker.
        poll = asyncio.create_task(self.poll.run(rlm, report), name="rlmm-leadership-poll")
        try:
            await self._after_round(rlm, report, results)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), interval)
        finally:
            await cancel_task(poll)

    def _count_failures(self, results: RoundResults) -> str | None:
        """Count partition rounds that failed whole as errors of the run; the refusal
        Kafka gave, if one of them was refused (then nothing was uploaded for it)."""
        denied: str | None = None
        for copied, _expired in results.values():
            failure = copied.round_failure
            if failure is None:
                continue
            refusal = _refusal(failure)
            denied = denied or refusal
            self.metrics.round_failures.labels("denied" if refusal else "error").inc()
            self.display.tally.add_error(str(copied.error))
        self.metrics.metadata_denied.set(1 if denied else 0)
        return denied

    async def _record_event_log_lag(self, rlm: RemoteLogManager) -> str | None:
        """Set the lag gauges; return why the metadata is not caught up (None: it is)."""
        applied = rlm.manager.applied_offsets
        if not applied:
            return None
        try:
            ends = await asyncio.wait_for(
                self.event_log.end_offsets(sorted(applied)), EVENT_LOG_LAG_TIMEOUT_S
            )
        except TimeoutError:
            log.warning(
                "metadata lag unknown: the event log's end offsets took over %g s (a broker"
                " that leads a metadata partition may be hung); offloading goes on",
                EVENT_LOG_LAG_TIMEOUT_S,
            )
            return None
        except Exception as e:  # a metric is never worth failing a round
            log.debug("event log end offsets: %r", e)
            return None
        for p, end in ends.items():
            self.metrics.event_log_lag.labels(str(p)).set(max(0, end - 1 - applied[p]))
        return self.metrics.readiness.metadata_problem(applied, ends)


def _refusal(error: BaseException) -> str | None:
    """Kafka's refusal of the metadata topic among ``error``'s causes, if any."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, EventLogAuthError):
            return str(seen)
        seen = seen.__cause__ or seen.__context__
    return None


__all__ = ["EVENT_LOG_LAG_TIMEOUT_S", "RoundLoop"]
