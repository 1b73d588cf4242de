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

Here: the process (its parts built and closed, signals, the manager's start, the
startup line) and ``--dry-run``'s plan. Beside it: the rounds (``round_loop``), the
partitions led (``cluster_leadership``), the poll and the gains' rounds
(``leadership_poll``), each topic's switches and KIP-950 (``topic_switches``), the
topics never touched (``skipped_topics``), what a run did (``run_report``) and what a
dry run would do (``dry_run``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
from collections.abc import Awaitable, Sequence
from pathlib import Path
from types import MappingProxyType

from prometheus_client import ProcessCollector

from eventlog import EventLog
from eventlog.errors import EventLogAuthError, EventLogConfigError
from eventlog.registry import known_options
from rlmm.archive.view import READ_ONLY_WAIT_MS
from rlmm.config import RlmmConfig
from rlmm.errors import ConfigError
from rlmm.facade import NotReadyRlmm, SwappableRlmm
from rlmm.factory import (
    create_manager,
    open_event_log,
    open_remote_storage,
    open_topic_config_store,
)
from rlmm.offload.cluster import ClusterClient, quiet_abandoned_connections
from rlmm.offload.cluster_leadership import ClusterLeadership, Unknown
from rlmm.offload.display import Display
from rlmm.offload.dry_run import SidecarPlan, TopicPlan, topic_plans
from rlmm.offload.errors import OffloadError
from rlmm.offload.health import NOT_STARTED
from rlmm.offload.leadership import check_node_id, lead_all, read_node_id
from rlmm.offload.leadership_poll import LeadershipPoll
from rlmm.offload.logdir import LogDirSource, scan_log_dirs
from rlmm.offload.metrics import MetricsServer, OffloadMetrics
from rlmm.offload.remote_log_manager import RemoteLogManager
from rlmm.offload.round_loop import RoundLoop
from rlmm.offload.run_report import SidecarReport
from rlmm.offload.settings import OffloadSettings
from rlmm.offload.skipped_topics import SkippedTopics
from rlmm.offload.tasks import dump_tasks
from rlmm.offload.topic_configs import TopicConfigKeeper
from rlmm.offload.topic_switches import TopicSwitches
from rlmm.offload_metadata import AUTH_RETRY_S, OffloadMetadataManager
from rlmm.process.long_lived import LongLivedHeap
from rlmm.process.native_memory import NativeMemory
from rlmm.process.runtime_costs import RuntimeCosts

log = logging.getLogger(__name__)
# Loopback unless told otherwise: a scrape from another host needs --metrics-host.
DEFAULT_METRICS_HOST = "127.0.0.1"


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
        if "refused_timeout_ms" in known_options(config.event_log_type):
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
        self._signals = 0
        self._skipped = SkippedTopics(self.metrics)
        self._leading = ClusterLeadership(config, self.metrics, self._skipped)
        self._switches = TopicSwitches(self.settings, config.broker_id, self._skipped)
        self._poll = LeadershipPoll(
            self._leading,
            self.metrics,
            broker_id=config.broker_id,
            interval_s=self.settings.leadership_poll_ms / 1000,
            stop=self._stop,
        )
        self._rounds: RoundLoop | None = None  # built once the event log is open

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
        if self.config.event_log_backend().kafka_client:
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
        from eventlog.kafka_client import client_settings_from_properties

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
            if self._rounds is not None:
                self._rounds.abandon()

    def _open(self) -> tuple[EventLog, TopicConfigKeeper]:
        """Serve the metrics, say the startup line, open the event log, the cluster
        client and the topic config keeper (whatever was started is closed on failure)."""
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
            event_log = open_event_log(self.config)
            cluster = self._leading.cluster = self._cluster_client(event_log)
            keeper = TopicConfigKeeper(
                open_topic_config_store(self.config) if cluster is not None else None,
                cluster,
                self.settings.topic_configs_refresh_ms / 1000,
            )
        except BaseException:
            if self.metrics_server is not None:
                self.metrics_server.close()
            self.runtime_costs.close()
            raise
        return event_log, keeper

    async def run(self) -> SidecarReport:
        report = SidecarReport(tally=self.display.tally)
        event_log, keeper = self._open()
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
        rounds = self._rounds = self._round_loop(event_log, keeper)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, rlm)
        loop.add_signal_handler(signal.SIGUSR1, dump_tasks)
        try:
            if await self._start_manager(manager, report):
                facade.swap(manager)
                await rounds.run(rlm, report)
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
                loop.remove_signal_handler(sig)
            try:
                # A gain's own round outlives the rounds only when they failed: stopped
                # here, before the manager it copies through closes.
                await self._poll.close()
                await rlm.close()
                if self._leading.cluster is not None:
                    await self._leading.cluster.close()
                facade.swap(NotReadyRlmm("the sidecar's metadata manager is closed"))
                await manager.close()  # writes the final snapshot, closes the event log
            finally:
                rsm.close()
                keeper.close()
                self.display.close()
                if self.metrics_server is not None:
                    self.metrics_server.close()
                self.runtime_costs.close()
                self.long_lived.thaw()
        report.stopped_by_signal = self._signals > 0
        report.skipped_topics = dict(self._skipped.reasons)
        return report

    def _round_loop(self, event_log: EventLog, keeper: TopicConfigKeeper) -> RoundLoop:
        """The rounds of this run, over its parts."""
        return RoundLoop(
            self.log_dirs,
            self.settings,
            once=self.once,
            stop=self._stop,
            metrics=self.metrics,
            display=self.display,
            native_memory=self.native_memory,
            long_lived=self.long_lived,
            leading=self._leading,
            poll=self._poll,
            switches=self._switches,
            event_log=event_log,
            keeper=keeper,
        )

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


async def plan_sidecar(config: RlmmConfig, log_dirs: Sequence[Path]) -> SidecarPlan:
    """Scan ``log_dirs``, ask the cluster (leadership, topic configs) and resolve each
    topic's settings, changing nothing: no metadata is read or written, nothing is
    copied or deleted."""
    sidecar = Sidecar(config, log_dirs, once=True, display=Display(rich=False))
    plan = SidecarPlan(sidecar.config.broker_id, sidecar.leadership_source())
    event_log = open_event_log(sidecar.config)
    cluster = sidecar._leading.cluster = sidecar._cluster_client(event_log)
    try:
        disabled: list[LogDirSource] = []
        sources = await asyncio.to_thread(
            scan_log_dirs, sidecar.log_dirs, sidecar.settings, set(), disabled
        )
        report = SidecarReport()
        view = await sidecar._leading.view([*sources, *disabled], report)
        if isinstance(view, Unknown):
            plan.leadership_unknown = report.leadership_unknown
            view = None
        kept = sidecar._switches.settle(sources, disabled, view)
        leading = sidecar._leading
        assignment = leading.assignment(kept, view) if view is not None else lead_all(kept)
        led = {s.topic_id_partition for s in assignment.lead}
        if plan.leadership_unknown is not None:
            led = set()
        plan.topics = topic_plans(kept, disabled, led, sidecar._switches, sidecar._skipped)
        return plan
    finally:
        if cluster is not None:
            await cluster.close()
        await event_log.close()


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
