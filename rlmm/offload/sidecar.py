"""The `rlmm offload` sidecar: offload the segments of Kafka log dirs on an interval.

Job: build the configured parts (event log, RLMM with snapshots, RSM, metrics
endpoint, cluster client), scan the log dirs each round, lead the partitions the
cluster says this broker leads (``rlmm.offload.leadership``), run a copy and an
expiration round, keep the led topics' configs in the store for ``rlmm restore``
(``rlmm.offload.topic_configs``, not every round), and sleep
``remote.log.manager.task.interval.ms``, asking the cluster for leadership every
``leadership.poll.ms`` meanwhile. A partition the poll finds this broker now leads is
led at once and gets a round of its own (as Kafka schedules a new leader's copy task
at once), beside the round in progress or between rounds.

Invariants: the broker id is the log dirs' node id (meta.properties); with a cluster
(the Kafka event log's, or ``[offload] bootstrap.servers``) only led partitions are
copied and expired, a leadership lost mid-round abandons that partition's copy at
once, and leadership that cannot be learned stops all copying and expiring (never
"lead everything"); a partition gained is copied as soon as the poll learns of it,
never runs two rounds at once (a round leaves out the partitions whose own round is
still running) and never makes the others run a round out of turn; without a cluster
every partition found is led (one broker);
topics the cluster tiers itself, or whose metadata holds segments rlmm did not
write, are never touched; a replicated partition over a metadata log other brokers
cannot share stops the sidecar. The offloader reaches the metadata only through the
fail-closed facade (``rlmm.facade``): NotReadyRlmm until the manager has started, and
again from before it closes. The sidecar never writes into a log dir; the first
SIGTERM/SIGINT lets the segments being copied finish and starts no new one, a second
abandons them (their objects are deleted before exit); either way the manager writes
a snapshot, everything started here is stopped, and the run ends normally (exit 0).
``/readyz`` says not ready from the start, while stopping and while leadership is
unknown, and after each round says what that round found (``health.Readiness``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from prometheus_client import ProcessCollector

from eventlog import EventLog
from eventlog.errors import EventLogAuthError, EventLogConfigError
from rlmm.archive.view import READ_ONLY_WAIT_MS
from rlmm.config import OFFLOAD_TOPIC_SETTINGS, RlmmConfig
from rlmm.errors import ConfigError
from rlmm.facade import NotReadyRlmm, SwappableRlmm
from rlmm.factory import (
    create_manager,
    open_event_log,
    open_remote_storage,
    open_topic_config_store,
)
from rlmm.model import TopicIdPartition
from rlmm.offload.cluster import (
    ClusterClient,
    ClusterView,
    quiet_abandoned_connections,
    raise_if_cancelling,
)
from rlmm.offload.copy_delay import never_copied_problem
from rlmm.offload.display import Display, Tally
from rlmm.offload.errors import ForeignSegmentError, LeadershipError, OffloadError
from rlmm.offload.health import NOT_STARTED, round_problem
from rlmm.offload.leadership import (
    Assignment,
    assign,
    check_node_id,
    lead_all,
    lost,
    read_node_id,
)
from rlmm.offload.log_source import RetentionSettings
from rlmm.offload.logdir import LogDirCache, LogDirSource, log_dir_problem, scan_log_dirs
from rlmm.offload.long_lived import LongLivedHeap
from rlmm.offload.metrics import MetricsServer, OffloadMetrics
from rlmm.offload.native_memory import NativeMemory
from rlmm.offload.remote_log_manager import CopyResult, ExpireResult, RemoteLogManager
from rlmm.offload.runtime_costs import RuntimeCosts
from rlmm.offload.settings import OffloadSettings
from rlmm.offload.topic_configs import TopicConfigKeeper
from rlmm.offload_metadata import AUTH_RETRY_S, OffloadMetadataManager

log = logging.getLogger(__name__)
# Loopback unless told otherwise: a scrape from another host needs --metrics-host.
DEFAULT_METRICS_HOST = "127.0.0.1"
# How long the metadata lag gauges may hold up a round. The event log retries a
# request to a hung broker (one that keeps its sockets open and answers nothing)
# until its delivery timeout, 120 s by default: a metric must not stop the offloading.
EVENT_LOG_LAG_TIMEOUT_S = 5.0


@dataclass
class SidecarReport:
    """What a run did (the CLI prints it)."""

    rounds: int = 0
    partitions: int = 0
    tally: Tally = field(default_factory=Tally)
    stopped_by_signal: bool = False
    warnings: list[str] = field(default_factory=list)  # log dirs that look wrong
    denied: str | None = None  # the last round's refusal by Kafka (an ACL, a credential)
    led: int = 0  # partitions led in the last round
    leadership_unknown: str | None = None  # why the last round could not learn leadership
    skipped_topics: dict[str, str] = field(default_factory=dict)  # topic -> why never touched


class Sidecar:
    """One run of the offloader over ``log_dirs`` (see the module docstring)."""

    def __init__(
        self,
        config: RlmmConfig,
        log_dirs: Sequence[Path],
        *,
        once: bool = False,
        metrics_port: int | None = None,
        metrics_host: str = DEFAULT_METRICS_HOST,
        display: Display | None = None,
    ) -> None:
        self.log_dirs = [Path(d) for d in log_dirs]
        node_id = read_node_id(self.log_dirs)
        configured = config.broker_id if config.broker_id_configured else None
        broker_id = check_node_id(node_id, configured)
        # The broker's id is the sidecar's: its segments' broker id, its snapshot owner.
        config = dataclasses.replace(config, broker_id=broker_id)
        if config.eventlog.get("type") == "kafka":
            # Nothing listening is not a broker starting slowly: say so as soon as the
            # reading commands do, unless configured (a broker in the same pod).
            eventlog = {"refused_timeout_ms": READ_ONLY_WAIT_MS, **config.eventlog}
            config = dataclasses.replace(config, eventlog=MappingProxyType(eventlog))
        self.config = config
        self.node_from_log_dirs = node_id is not None
        self.metrics_host = metrics_host
        self.settings = OffloadSettings.from_config(config)
        self.once = once
        self.metrics_port = metrics_port
        self.display = display if display is not None else Display()
        self.metrics = OffloadMetrics()
        self.native_memory = NativeMemory()  # glibc's arenas capped, trimmed each round
        self.long_lived = LongLivedHeap()
        self.runtime_costs = RuntimeCosts(self.native_memory, self.long_lived)
        self.metrics.registry.register(self.runtime_costs)
        # process_resident_memory_bytes, process_open_fds, process_cpu_seconds_total:
        # what a memory limit and a leak alert are set against (Linux only, else none).
        ProcessCollector(registry=self.metrics.registry)
        self.metrics.task_interval.set(self.settings.task_interval_ms / 1000)
        self.metrics_server: MetricsServer | None = None
        self._stop = asyncio.Event()
        self._round: asyncio.Task[object] | None = None
        self._signals = 0
        self._event_log: EventLog | None = None
        self._cluster: ClusterClient | None = None
        self._keeper: TopicConfigKeeper | None = None  # the led topics' configs, for restore
        # led partition -> the cluster's leader epoch (-1: no cluster)
        self._led: dict[TopicIdPartition, int] = {}
        # Partitions gained do not wait for a round: the poll leads them and starts a
        # round of their own at once, during a round or between two (Kafka's RLM
        # schedules a new leader's task at once). A round takes the results of those
        # that ended; one still running goes on beside the next round, which leaves its
        # partitions out (``_gaining``).
        self._side: list[asyncio.Task[dict[TopicIdPartition, tuple[CopyResult, ExpireResult]]]] = []
        self._gaining: set[TopicIdPartition] = set()
        self._sources: dict[TopicIdPartition, LogDirSource] = {}
        # topic -> its settings and where each came from (as last resolved and logged)
        self._effective: dict[str, tuple[RetentionSettings, dict[str, str]]] = {}
        self._deleted_on_disable: set[TopicIdPartition] = set()
        self._skipped: dict[str, str] = {}
        self._configs_warned = False
        self._said_waiting: set[tuple[TopicIdPartition, str]] = set()
        self._said_delay: dict[str, str] = {}  # topic -> why its copy delay copies nothing

    def startup_summary(self) -> str:
        """One line: config, store, event log, log dirs, metrics address, and what the
        defaults are when no config file is in effect."""
        from rlmm.secrets import redact

        remote = redact(self.config.remote_options())
        store = ", ".join(f"{k}={v}" for k, v in remote.items())
        eventlog = self.config.event_log_options()
        where = eventlog.get("dir") or eventlog.get("bootstrap_servers", "")
        metrics = (
            f"http://{self.metrics_host}:{self.metrics_port}/metrics"
            if self.metrics_port is not None
            else "off"
        )
        node = "meta.properties" if self.node_from_log_dirs else "broker_id (no meta.properties)"
        line = (
            f"rlmm offload: node {self.config.broker_id} (from {node}); leadership"
            f" {self.leadership_source()}; config {self.config.source}; remote storage {store};"
            f" event log {eventlog.get('type', 'file')} {where}"
            f" ({eventlog.get('partitions')} partitions);"
            f" log dirs {', '.join(str(d) for d in self.log_dirs)}; metrics {metrics};"
            f" retention.ms {self.config.offload['retention.ms']}"
        )
        if self.config.source == "defaults":
            line += (
                "; no config file: embedded defaults under data_dir"
                f" {self.config.data_dir} (pass --config or set RLMM_CONFIG)"
            )
        return line

    def leadership_source(self) -> str:
        """Where leadership comes from, for the startup line."""
        eventlog = self.config.event_log_options()
        if eventlog.get("type") == "kafka":
            return f"from the cluster at {eventlog.get('bootstrap_servers')} (the event log's)"
        client = self.settings.cluster_client
        if client.get("bootstrap.servers"):
            return f"from the cluster at {client['bootstrap.servers']} (offload bootstrap.servers)"
        return "every partition found (no cluster configured: one broker)"

    def _cluster_client(self, event_log: EventLog) -> ClusterClient | None:
        """The client that asks the cluster for leadership, or None without a cluster."""
        poll_s = self.settings.leadership_poll_ms / 1000
        # a loaded cluster may take seconds to answer; a poll waits at most this long
        timeout_s = max(5.0, min(10.0, poll_s * 2))
        settings = getattr(event_log, "client_settings", None)
        if settings is not None:
            return ClusterClient(
                settings(), self.config.broker_id, timeout_s=timeout_s,
                brokers=getattr(event_log, "brokers", None),
            )  # fmt: skip
        client = self.settings.cluster_client
        if not client:
            return None
        if "bootstrap.servers" not in client:
            raise ConfigError(f'offload settings {sorted(client)} need offload."bootstrap.servers"')
        from eventlog.kafka import client_settings_from_properties

        try:
            kwargs = client_settings_from_properties(client)
        except EventLogConfigError as e:
            raise ConfigError(f"bad offload cluster settings: {e}") from e
        return ClusterClient(kwargs, self.config.broker_id, timeout_s=timeout_s)

    def _on_signal(self, rlm: RemoteLogManager) -> None:
        self._signals += 1
        rlm.request_stop()
        self._stop.set()
        self.metrics.readiness.not_ready("stopping (signal received)")
        if self._signals == 1:
            # A normal stop (SIGTERM from systemd or Kubernetes): not a warning.
            log.info("stopping: finishing the segments being copied (signal again to abandon)")
        else:
            log.warning("stopping now: abandoning the segments being copied")
            if self._round is not None:
                self._round.cancel()
            for task in self._side:  # gains' rounds between two rounds
                task.cancel()

    async def run(self) -> SidecarReport:
        report = SidecarReport(tally=self.display.tally)
        self.native_memory.bound()  # before any thread of ours exists
        quiet_abandoned_connections(asyncio.get_running_loop())
        self.metrics.readiness.not_ready(NOT_STARTED)
        if self.metrics_port is not None:
            try:
                self.metrics_server = self.metrics.serve(self.metrics_port, self.metrics_host)
            except OSError as e:
                raise OffloadError(
                    f"--metrics-port: cannot serve metrics on {self.metrics_host}:"
                    f"{self.metrics_port}: {e.strerror or e} (another process listens there?"
                    " pick another port)"
                ) from e
        log.info("%s", self.startup_summary())
        self.runtime_costs.install()
        try:
            event_log = self._event_log = open_event_log(self.config)
            self._cluster = self._cluster_client(event_log)
            self._keeper = TopicConfigKeeper(
                open_topic_config_store(self.config) if self._cluster is not None else None,
                self._cluster,
                self.settings.topic_configs_refresh_ms / 1000,
            )
        except BaseException:
            if self.metrics_server is not None:
                self.metrics_server.close()
            self.runtime_costs.close()
            raise
        manager = create_manager(self.config, event_log)
        rsm = open_remote_storage(self.config)
        # The offloader copies through the fail-closed facade: NotReadyRlmm until the
        # manager has started, and again from before it closes.
        facade = SwappableRlmm(NotReadyRlmm("the sidecar's metadata manager is starting"))
        rlm = RemoteLogManager(
            facade,
            rsm,
            broker_id=self.config.broker_id,
            copier_concurrency=self.settings.copier_concurrency,
            task_interval_s=self.settings.task_interval_ms / 1000,
            ready_timeout_s=float(self.config.manager["ready_timeout_s"]),
            metrics=self.metrics,
            listener=self.display.event,
            copy_quota=self.settings.copy_quota(),
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, rlm)
        loop.add_signal_handler(signal.SIGUSR1, dump_tasks)
        try:
            if await self._start_manager(manager, report):
                facade.swap(manager)
                await self._rounds(rlm, report)
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
                loop.remove_signal_handler(sig)
            try:
                # A gain's own round outlives the rounds only when they failed: stopped
                # here, before the manager it copies through closes.
                for task in self._side:
                    await _cancel(task)
                self._side = []
                await rlm.close()
                if self._cluster is not None:
                    await self._cluster.close()
                facade.swap(NotReadyRlmm("the sidecar's metadata manager is closed"))
                await manager.close()  # writes the final snapshot, closes the event log
            finally:
                rsm.close()
                self._keeper.close()
                self.display.close()
                if self.metrics_server is not None:
                    self.metrics_server.close()
                self.runtime_costs.close()
                self.long_lived.thaw()
        report.stopped_by_signal = self._signals > 0
        report.skipped_topics = dict(self._skipped)
        return report

    def stop(self) -> None:
        """Stop after the round in progress (as a first SIGTERM does, without the signal)."""
        self._stop.set()

    async def _start_manager(self, manager: OffloadMetadataManager, report: SidecarReport) -> bool:
        """Start the metadata manager; False if stopped first. Refused by Kafka (a
        credential, an ACL): ``--once`` raises it; a long-running sidecar stays up, not
        ready and saying why, and tries again every AUTH_RETRY_S until let in."""
        while True:
            try:
                if not await self._unless_stopped(manager.start()):
                    return False
                self.metrics.metadata_denied.set(0)
                return True
            except EventLogAuthError as e:
                if self.once:
                    raise
                if report.denied != str(e):
                    log.error("the metadata topic refuses this sidecar: %s", e)
                report.denied = str(e)
                self.metrics.metadata_denied.set(1)
                self.metrics.readiness.not_ready(f"metadata refused: {e}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), AUTH_RETRY_S)
            if self._stop.is_set():
                return False

    async def _unless_stopped(self, step: Awaitable[object]) -> bool:
        """Await ``step``; False, with it cancelled, if a stop comes first. A metadata
        log that cannot be reached makes the manager's start wait up to Kafka's
        initialization timeout (minutes), longer than an orchestrator's grace period."""
        task = asyncio.ensure_future(step)
        stop = asyncio.ensure_future(self._stop.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not task.done():
                task.cancel()
                # asyncio.wait, not ``await task`` under suppress(CancelledError): a
                # cancellation of this coroutine itself must propagate.
                await asyncio.wait([task])
        if task.cancelled():
            return False
        task.result()  # its error, if it failed
        return True

    async def _rounds(self, rlm: RemoteLogManager, report: SidecarReport) -> None:
        for log_dir in self.log_dirs:
            problem = await asyncio.to_thread(log_dir_problem, log_dir)
            if problem is not None:
                log.warning("%s", problem)
                report.warnings.append(problem)
        warned: set[str] = set()
        scanned = LogDirCache()  # unchanged dirs are not listed again each round
        found: set[TopicIdPartition] = set()
        while not self._stop.is_set():
            disabled: list[LogDirSource] = []
            sources = await asyncio.to_thread(
                scan_log_dirs, self.log_dirs, self.settings, warned, disabled, scanned
            )
            now_found = {s.topic_id_partition for s in sources}
            gone = found - now_found
            if gone:
                await rlm.stop_partitions(gone)
                for tp in gone:
                    self._led.pop(tp, None)
            found = now_found
            report.partitions = len(found)
            view = await self._view([*sources, *disabled], report)
            assignment = None
            if not isinstance(view, _Unknown):
                sources = self._settle(sources, disabled, view)
                assignment = self._assignment(sources, view)
                await self._delete_disabled(rlm, disabled, view)
            # what the poll may lead before the next round: the topics still offloaded
            self._sources = {s.topic_id_partition: s for s in sources}
            results: dict[TopicIdPartition, tuple[CopyResult, ExpireResult]] = {}
            if assignment is None and self._led:
                await rlm.abandon(list(self._led))
                self.metrics.leadership_changes.inc(len(self._led))
                self._led = {}
                report.led = 0
                self.metrics.partitions_led.set(0)
            if assignment is not None:
                await self._lead(rlm, assignment, report)
                # Before the round too: a first round over a backlog can take minutes, and
                # a restarted sidecar must not publish its lag only after it.
                await self._record_event_log_lag(rlm)
                self._round = asyncio.create_task(self._run_round(rlm))
                poll = asyncio.create_task(self._poll(rlm, report), name="rlmm-leadership-poll")
                try:
                    results = await self._round
                except asyncio.CancelledError:
                    if self._signals < 2:
                        raise  # not ours: propagate
                finally:
                    self._round = None
                    await _cancel(poll)
                if self._keeper is not None and not isinstance(view, _Unknown):
                    await self._keeper.after_round(list(self._led), view)
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
            if self._led and not self.once:
                self.long_lived.after_round()
            self.native_memory.trim()
            self.display.round_done(len(found), len(self._led))
            if self.once:
                break
            # Unknown leadership is asked again sooner than a round's interval.
            interval = self.settings.task_interval_ms / 1000
            if report.leadership_unknown is not None:
                interval = min(interval, self.settings.leadership_poll_ms / 1000)
            # Meanwhile the poll leads what this broker gains, each with a round of its
            # own at once: the other partitions keep their interval.
            poll = asyncio.create_task(self._poll(rlm, report), name="rlmm-leadership-poll")
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), interval)
            finally:
                await _cancel(poll)
        # Gains' rounds still running: a first signal lets their copies in flight
        # finish (no new segment starts), a second one cancelled them.
        await self._harvest(wait=True)

    async def _run_round(
        self, rlm: RemoteLogManager
    ) -> dict[TopicIdPartition, tuple[CopyResult, ExpireResult]]:
        """A round of the partitions led but those a gain's own round runs now, with the
        results of the gains' rounds that ended by its end (``--once``, or stopping: of
        all of them, once they end). Cancelled (a second signal), it abandons them all."""
        chosen = [tp for tp in self._led if tp not in self._gaining]
        main = asyncio.create_task(rlm.run_round(chosen), name="rlmm-round")
        try:
            results = await main
            results.update(await self._harvest(wait=self.once or self._stop.is_set()))
        except BaseException:
            await _cancel(main)
            for task in self._side:
                await _cancel(task)
            self._side = []
            raise
        return results

    async def _harvest(
        self, *, wait: bool
    ) -> dict[TopicIdPartition, tuple[CopyResult, ExpireResult]]:
        """The results of the gains' own rounds that have ended, taken off ``_side``
        (``wait``: of every one, once all have ended; the poll may add more meanwhile)."""
        while wait and (running := [t for t in self._side if not t.done()]):
            await asyncio.wait(running)
        results: dict[TopicIdPartition, tuple[CopyResult, ExpireResult]] = {}
        for task in [t for t in self._side if t.done()]:
            self._side.remove(task)
            if not task.cancelled():
                results.update(task.result())
        return results

    async def _gain(
        self,
        rlm: RemoteLogManager,
        report: SidecarReport,
        view: ClusterView,
        gained: Sequence[TopicIdPartition],
    ) -> dict[TopicIdPartition, tuple[CopyResult, ExpireResult]]:
        """Lead ``gained`` (found by the poll) and run their round now."""
        try:
            sources = [self._sources[tp] for tp in gained if tp in self._sources]
            assignment = assign(sources, view, self.config.broker_id)
            lead = [s for s in assignment.lead if s.topic_id_partition.topic not in self._skipped]
            self._say_waiting(assignment.waiting, keep=True)
            if not lead:
                return {}
            try:
                await rlm.on_leadership_changes(lead, [], start_tasks=False)
                wanted = await self._drop_foreign(rlm, {s.topic_id_partition for s in lead})
            except Exception as e:  # the next round's assignment leads them again
                log.error("leading %s failed (tried again next round): %s",
                          ", ".join(map(str, gained)), e)  # fmt: skip
                return {}
            led = {tp: assignment.epochs.get(tp, -1) for tp in wanted}
            self._changed(led, dict(self._led))
            self._led.update(led)
            report.led = len(self._led)
            self.metrics.partitions_led.set(len(self._led))
            return await rlm.run_round(list(led))
        finally:
            self._gaining -= set(gained)

    async def _view(
        self, sources: Sequence[LogDirSource], report: SidecarReport
    ) -> ClusterView | _Unknown | None:
        """The cluster's view of ``sources``' topics; None without a cluster; _UNKNOWN
        (nothing is led this round) when leadership cannot be learned."""
        if self._cluster is None:
            report.leadership_unknown = None
            self.metrics.leadership_known.set(1)
            return None
        try:
            view = await self._cluster.view({s.topic_id_partition.topic for s in sources})
        except LeadershipError as e:
            if report.leadership_unknown != str(e):
                log.error("leadership unknown, nothing is copied or expired: %s", e)
            report.leadership_unknown = str(e)
            self.metrics.leadership_known.set(0)
            return _UNKNOWN
        if report.leadership_unknown is not None:
            log.info("leadership learned again from the cluster at %s", self._cluster.bootstrap)
        report.leadership_unknown = None
        self.metrics.leadership_known.set(1)
        if not view.configs_seen and not self._configs_warned:
            self._configs_warned = True
            log.warning(
                "the cluster at %s denies DescribeConfigs to this sidecar: topics the cluster"
                " tiers itself are known only by segments rlmm did not write in their"
                " metadata, and the topics' configs are rlmm's alone (grant"
                " DESCRIBE_CONFIGS on the topics and the cluster)",
                self._cluster.bootstrap,
            )
        return view

    def _settle(
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
        before = self._effective.get(topic)
        self._effective[topic] = (effective, origins)
        problem = never_copied_problem(effective) if effective.remote_storage_enable else None
        if problem is not None and self._said_delay.get(topic) != problem:
            log.warning("topic %s: %s", topic, problem)
        if problem is None:
            self._said_delay.pop(topic, None)
        else:
            self._said_delay[topic] = problem
        if before is None and quiet:
            return effective
        if before is None:
            from_cluster = [n for n, o in origins.items() if o == "cluster"]
            if from_cluster:
                log.info("topic %s follows the cluster's %s", topic, ", ".join(
                    f"{n}={_kafka_value(effective, n)}" for n in from_cluster))  # fmt: skip
            return effective
        changed = [n for n in origins if _kafka_value(effective, n) != _kafka_value(before[0], n)]
        for name in changed:
            log.info(
                "topic %s: %s = %s (was %s), from %s%s", topic, name,
                _kafka_value(effective, name), _kafka_value(before[0], name),
                "the cluster's topic config" if origins[name] == "cluster" else origins[name],
                _CONSEQUENCE.get((name, _kafka_value(effective, name)), ""),
            )  # fmt: skip
        return effective

    async def _delete_disabled(
        self, rlm: RemoteLogManager, disabled: Sequence[LogDirSource], view: ClusterView | None
    ) -> None:
        """KIP-950: a topic with remote.storage.enable=false and
        remote.log.delete.on.disable=true loses its remote data: the partitions this
        broker leads are deleted (segments, then the partition's metadata), once."""
        wanted = [s for s in disabled if s.retention().remote_log_delete_on_disable]
        if not wanted:
            return
        led = lead_all(wanted) if view is None else assign(wanted, view, self.config.broker_id)
        for source in led.lead:
            tp = source.topic_id_partition
            if tp in self._deleted_on_disable or tp.topic in self._skipped:
                continue
            try:
                deleted = await rlm.delete_partition(tp, only_if_tiered=True)
            except ForeignSegmentError as e:
                self._skip(tp.topic, "foreign-segments", str(e))
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

    def _assignment(self, sources: Sequence[LogDirSource], view: ClusterView | None) -> Assignment:
        """This round's split of ``sources`` by ``view`` (None: no cluster, lead all). A
        replicated partition over a metadata log other brokers cannot share raises
        LeadershipError (the sidecar stops)."""
        if view is None:
            return lead_all(sources)
        assignment = assign(sources, view, self.config.broker_id)
        kind = self.config.event_log_options().get("type", "file")
        if assignment.replicated and kind != "kafka":
            tp = assignment.replicated[0]
            state = view.partitions[(tp.topic, tp.partition)]
            raise LeadershipError(
                f"{tp} has {len(state.replicas)} replicas (brokers"
                f" {', '.join(map(str, state.replicas))}), but the metadata log is"
                f" eventlog.type = {kind!r}, on this host only: the other brokers' sidecars"
                " cannot see it, and a new leader would copy everything again. Set"
                ' [eventlog] type = "kafka" (the cluster\'s __remote_log_metadata) for a'
                " replicated cluster"
            )
        for topic in assignment.kafka_tiered:
            self._skip(
                topic,
                "kafka-tiered",
                "the cluster tiers it itself"
                " (remote.storage.enable=true, remote.log.storage.system.enable=true)",
            )
        return assignment

    def _skip(self, topic: str, reason: str, why: str) -> None:
        if topic not in self._skipped:
            log.warning("never touching topic %s: %s", topic, why)
            self._skipped[topic] = reason
            for r in ("kafka-tiered", "foreign-segments"):
                self.metrics.topics_skipped.labels(r).set(
                    sum(1 for v in self._skipped.values() if v == r)
                )

    async def _lead(
        self, rlm: RemoteLogManager, assignment: Assignment, report: SidecarReport
    ) -> None:
        """Lead what ``assignment`` says (minus topics with segments rlmm did not write),
        follow the rest; count the changes."""
        lead = [s for s in assignment.lead if s.topic_id_partition.topic not in self._skipped]
        wanted = {s.topic_id_partition for s in lead}
        stale = [
            tp
            for tp, epoch in self._led.items()
            if tp not in wanted or assignment.epochs.get(tp, -1) != epoch
        ]
        if stale:
            await rlm.abandon(stale)
        follow = [*assignment.follow, *assignment.waiting]
        follow += [tp for tp in self._led if tp not in wanted]
        # Only what changed is led or followed again: a broker's thousands of partitions
        # led at the same epoch, through the same source, cost nothing round after round.
        fresh = [s for s in lead if not rlm.leads(s)]
        newly_followed = [tp for tp in follow if tp not in rlm.followed]
        if fresh or newly_followed:
            await rlm.on_leadership_changes(fresh, newly_followed, start_tasks=False)
        wanted = await self._drop_foreign(rlm, wanted)
        led = {tp: assignment.epochs.get(tp, -1) for tp in wanted}
        self._changed(led, self._led, with_released=True)
        self._say_waiting(assignment.waiting)
        self._led = led
        report.led = len(led)
        self.metrics.partitions_led.set(len(led))
        self.metrics.partitions_waiting.set(len(assignment.waiting))

    async def _drop_foreign(
        self, rlm: RemoteLogManager, wanted: set[TopicIdPartition]
    ) -> set[TopicIdPartition]:
        """``wanted`` minus the topics whose metadata holds segments rlmm did not write
        (those are skipped for good, and abandoned)."""
        for tp in wanted:
            foreign = await rlm.foreign_segments(tp)
            if foreign:
                m = foreign[0]
                self._skip(
                    tp.topic,
                    "foreign-segments",
                    f"its metadata holds {len(foreign)} segments in {tp} that rlmm did not"
                    f" write (e.g. {m.remote_log_segment_id}, broker {m.broker_id}): another"
                    " writer tiers it (Kafka's own RemoteLogManager?)",
                )
        dropped = [tp for tp in wanted if tp.topic in self._skipped]
        if dropped:
            await rlm.abandon(dropped)
        return {tp for tp in wanted if tp.topic not in self._skipped}

    def _changed(
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
        if self._cluster is not None and (gained or released):
            total = len(led) if with_released else len(set(led) | set(before))
            log.info(
                "leading %d partitions%s%s", total,
                f"; now leading {', '.join(gained)}" if gained else "",
                f"; no longer leading {', '.join(released)}" if released else "",
            )  # fmt: skip

    def _say_waiting(self, waiting: Mapping[TopicIdPartition, str], *, keep: bool = False) -> None:
        """Say once per partition and epoch why a partition led is not led yet."""
        for tp, why in waiting.items():
            if (tp, why) not in self._said_waiting:
                log.info("%s: waiting to lead: %s", tp, why)
        said = set(waiting.items())
        self._said_waiting = self._said_waiting | said if keep else said

    async def _poll(self, rlm: RemoteLogManager, report: SidecarReport) -> None:
        """Ask the cluster for leadership every leadership.poll.ms: a partition led by
        another broker now is abandoned at once (its copy in flight deleted); one this
        broker now leads is led at once and gets a round of its own, in a task of its
        own (``_side``); unknown leadership stops all."""
        if self._cluster is None:
            return
        interval = self.settings.leadership_poll_ms / 1000
        while True:
            await asyncio.sleep(interval)
            raise_if_cancelling()  # a cancellation a library swallowed ends the poll
            topics = {tp.topic for tp in self._led} | {tp.topic for tp in rlm.followers}
            try:
                view = await self._cluster.view(topics)
            except LeadershipError as e:
                raise_if_cancelling()
                if self._led:
                    log.error("leadership unknown: abandoning every partition: %s", e)
                    self.metrics.leadership_known.set(0)
                    self.metrics.readiness.not_ready(f"leadership unknown: {e}")
                    await rlm.abandon(list(self._led))
                    self.metrics.leadership_changes.inc(len(self._led))
                    self._led = {}
                    self.metrics.partitions_led.set(0)
                continue
            gone = lost(self._led, view, self.config.broker_id)
            if gone:
                await rlm.abandon(gone)
                self.metrics.leadership_changes.inc(len(gone))
                for tp in gone:
                    self._led.pop(tp, None)
                self.metrics.partitions_led.set(len(self._led))
            gained = [
                tp
                for tp in rlm.followers
                if (state := view.partitions.get((tp.topic, tp.partition))) is not None
                and state.leader == self.config.broker_id
                and tp.topic not in view.kafka_tiered
                and tp.topic not in self._skipped
                and tp not in self._gaining
                and tp in self._sources
            ]
            if gained and not self._stop.is_set():
                # Its own task, never the poll's: cancelling the poll at a round's end
                # must not cut a gain in half; a round takes its results once it ended.
                self._gaining |= set(gained)
                self._side.append(
                    asyncio.create_task(self._gain(rlm, report, view, gained), name="rlmm-gain")
                )

    def _count_failures(
        self, results: Mapping[TopicIdPartition, tuple[CopyResult, ExpireResult]]
    ) -> str | None:
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
        if not applied or self._event_log is None:
            return None
        try:
            ends = await asyncio.wait_for(
                self._event_log.end_offsets(sorted(applied)), EVENT_LOG_LAG_TIMEOUT_S
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


class _Unknown:
    """Leadership could not be learned this round."""


_UNKNOWN = _Unknown()
# What a KIP-950 change means, said with it.
_CONSEQUENCE = {
    ("remote.log.copy.disable", "true"): ": copying stops; the remote data stays readable"
    " and keeps expiring",
    ("remote.log.copy.disable", "false"): ": copying resumes",
    ("remote.storage.enable", "false"): ": no longer offloaded (remote data deleted only with"
    " remote.log.delete.on.disable=true)",
}


def _kafka_value(settings: RetentionSettings, name: str) -> str:
    """``settings``' value of the Kafka setting ``name``, as Kafka writes it."""
    value = getattr(settings, name.replace(".", "_"))
    return str(value).lower() if isinstance(value, bool) else str(value)


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


async def plan_sidecar(config: RlmmConfig, log_dirs: Sequence[Path]) -> SidecarPlan:
    """Scan ``log_dirs``, ask the cluster (leadership, topic configs) and resolve each
    topic's settings, changing nothing: no metadata is read or written, nothing is
    copied or deleted."""
    sidecar = Sidecar(config, log_dirs, once=True, display=Display(rich=False))
    plan = SidecarPlan(sidecar.config.broker_id, sidecar.leadership_source())
    event_log = open_event_log(sidecar.config)
    cluster = sidecar._cluster_client(event_log)
    sidecar._cluster = cluster
    try:
        disabled: list[LogDirSource] = []
        sources = await asyncio.to_thread(
            scan_log_dirs, sidecar.log_dirs, sidecar.settings, set(), disabled
        )
        report = SidecarReport()
        view = await sidecar._view([*sources, *disabled], report)
        if isinstance(view, _Unknown):
            plan.leadership_unknown = report.leadership_unknown
            view = None
        kept = sidecar._settle(sources, disabled, view)
        assignment = sidecar._assignment(kept, view) if view is not None else lead_all(kept)
        led = {s.topic_id_partition for s in assignment.lead}
        if plan.leadership_unknown is not None:
            led = set()
        by_topic: dict[str, list[LogDirSource]] = {}
        for source in [*kept, *disabled]:
            by_topic.setdefault(source.topic_id_partition.topic, []).append(source)
        for topic, group in sorted(by_topic.items()):
            effective, origins = sidecar._effective.get(topic, (group[0].retention(), {}))
            plan.topics.append(TopicPlan(
                topic, len(group), sum(1 for s in group if s.topic_id_partition in led),
                offloaded=any(s in kept for s in group),
                settings={n: (_kafka_value(effective, n), origins.get(n, "offload"))
                          for n in OFFLOAD_TOPIC_SETTINGS},
                skipped=sidecar._skipped.get(topic),
            ))  # fmt: skip
        return plan
    finally:
        if cluster is not None:
            await cluster.close()
        await event_log.close()


def dump_tasks() -> None:
    """Log where every asyncio task of the process waits (SIGUSR1: a stuck sidecar says
    what it is stuck on, without a debugger)."""
    import io

    out = io.StringIO()
    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    for task in tasks:
        task.print_stack(file=out)
    log.warning("SIGUSR1: %d asyncio tasks\n%s", len(tasks), out.getvalue())


async def _cancel(task: asyncio.Task[Any], timeout_s: float = 60.0) -> None:
    """Cancel ``task`` and wait (bounded) until it ended; our own cancellation still
    propagates. A task that outlives the bound is a bug: said loudly, never waited on."""
    task.cancel()
    done, _ = await asyncio.wait([task], timeout=timeout_s)
    if not done:
        import io

        where = io.StringIO()
        task.print_stack(file=where)
        log.error("task %s did not end within %gs of its cancellation; it waits at:\n%s",
                  task.get_name(), timeout_s, where.getvalue())  # fmt: skip


def _refusal(error: BaseException) -> str | None:
    """Kafka's refusal of the metadata topic among ``error``'s causes, if any."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, EventLogAuthError):
            return str(seen)
        seen = seen.__cause__ or seen.__context__
    return None


async def run_sidecar(
    config: RlmmConfig,
    log_dirs: Sequence[Path],
    *,
    once: bool = False,
    metrics_port: int | None = None,
    metrics_host: str = DEFAULT_METRICS_HOST,
    display: Display | None = None,
) -> SidecarReport:
    """Run the sidecar until done (``once``) or stopped by a signal."""
    return await Sidecar(
        config,
        log_dirs,
        once=once,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        display=display,
    ).run()


__all__ = [
    "DEFAULT_METRICS_HOST",
    "Sidecar",
    "SidecarPlan",
    "SidecarReport",
    "TopicPlan",
    "plan_sidecar",
    "run_sidecar",
]
