"""The `rlmm offload` sidecar: offload the segments of Kafka log dirs on an interval.

Job: build the configured parts (event log, RLMM with snapshots, RSM, metrics
endpoint), scan the log dirs each round, lead every offloadable partition found, run
a copy and an expiration round, and sleep ``remote.log.manager.task.interval.ms``.

Invariants: the sidecar never writes into a log dir; the first SIGTERM/SIGINT lets
the segments being copied finish and starts no new one, a second abandons them
(their objects are deleted before exit); either way the manager writes a snapshot,
everything started here is stopped, and the run ends normally (exit 0). ``/readyz``
says not ready from the start and while stopping, and after each round says what
that round found (see ``rlmm.offload.health.Readiness``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eventlog import EventLog
from eventlog.errors import EventLogAuthError
from rlmm.config import RlmmConfig
from rlmm.factory import create_manager, open_event_log, open_remote_storage
from rlmm.manager import AUTH_RETRY_S, TopicBasedRemoteLogMetadataManager
from rlmm.model import TopicIdPartition
from rlmm.offload.display import Display, Tally
from rlmm.offload.health import NOT_STARTED, round_problem
from rlmm.offload.logdir import log_dir_problem, scan_log_dirs
from rlmm.offload.manager import CopyResult, RemoteLogManager
from rlmm.offload.metrics import MetricsServer, OffloadMetrics
from rlmm.offload.settings import OffloadSettings

log = logging.getLogger(__name__)
# Loopback unless told otherwise: a scrape from another host needs --metrics-host.
DEFAULT_METRICS_HOST = "127.0.0.1"


@dataclass
class SidecarReport:
    """What a run did (the CLI prints it)."""

    rounds: int = 0
    partitions: int = 0
    tally: Tally = field(default_factory=Tally)
    stopped_by_signal: bool = False
    warnings: list[str] = field(default_factory=list)  # log dirs that look wrong
    denied: str | None = None  # the last round's refusal by Kafka (an ACL, a credential)


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
        self.config = config
        self.metrics_host = metrics_host
        self.settings = OffloadSettings.from_config(config)
        self.log_dirs = [Path(d) for d in log_dirs]
        self.once = once
        self.metrics_port = metrics_port
        self.display = display if display is not None else Display()
        self.metrics = OffloadMetrics()
        self.metrics.task_interval.set(self.settings.task_interval_ms / 1000)
        self.metrics_server: MetricsServer | None = None
        self._stop = asyncio.Event()
        self._round: asyncio.Task[object] | None = None
        self._signals = 0
        self._event_log: EventLog | None = None

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
        line = (
            f"rlmm offload: config {self.config.source}; remote storage {store}; event log"
            f" {eventlog.get('type', 'file')} {where} ({eventlog.get('partitions')} partitions);"
            f" log dirs {', '.join(str(d) for d in self.log_dirs)}; metrics {metrics};"
            f" retention.ms {self.config.offload['retention.ms']}"
        )
        if self.config.source == "defaults":
            line += (
                "; no config file: embedded defaults under data_dir"
                f" {self.config.data_dir} (pass --config or set RLMM_CONFIG)"
            )
        return line

    def _on_signal(self, rlm: RemoteLogManager) -> None:
        self._signals += 1
        rlm.request_stop()
        self._stop.set()
        self.metrics.readiness.not_ready("stopping (signal received)")
        if self._signals == 1:
            # A normal stop (SIGTERM from systemd or Kubernetes): not a warning.
            log.info("stopping: finishing the segments being copied (signal again to abandon)")
        elif self._round is not None:
            log.warning("stopping now: abandoning the segments being copied")
            self._round.cancel()

    async def run(self) -> SidecarReport:
        report = SidecarReport(tally=self.display.tally)
        self.metrics.readiness.not_ready(NOT_STARTED)
        if self.metrics_port is not None:
            self.metrics_server = self.metrics.serve(self.metrics_port, self.metrics_host)
        log.info("%s", self.startup_summary())
        event_log = self._event_log = open_event_log(self.config)
        rlmm = create_manager(self.config, event_log)
        rsm = open_remote_storage(self.config)
        rlm = RemoteLogManager(
            rlmm,
            rsm,
            broker_id=self.config.broker_id,
            copier_concurrency=self.settings.copier_concurrency,
            task_interval_s=self.settings.task_interval_ms / 1000,
            ready_timeout_s=float(self.config.manager["ready_timeout_s"]),
            metrics=self.metrics,
            listener=self.display.event,
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, rlm)
        try:
            if await self._start_manager(rlmm, report):
                await self._rounds(rlm, report)
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            try:
                await rlm.close()
                await rlmm.close()  # writes the final snapshot, closes the event log
            finally:
                rsm.close()
                self.display.close()
                if self.metrics_server is not None:
                    self.metrics_server.close()
        report.stopped_by_signal = self._signals > 0
        return report

    async def _start_manager(
        self, rlmm: TopicBasedRemoteLogMetadataManager, report: SidecarReport
    ) -> bool:
        """Start the metadata manager; False if stopped first. Refused by Kafka (a
        credential, an ACL): ``--once`` raises it; a long-running sidecar stays up, not
        ready and saying why, and tries again every AUTH_RETRY_S until let in."""
        while True:
            try:
                await rlmm.start()
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

    async def _rounds(self, rlm: RemoteLogManager, report: SidecarReport) -> None:
        for log_dir in self.log_dirs:
            problem = await asyncio.to_thread(log_dir_problem, log_dir)
            if problem is not None:
                log.warning("%s", problem)
                report.warnings.append(problem)
        warned: set[str] = set()
        led: set[TopicIdPartition] = set()
        while not self._stop.is_set():
            sources = await asyncio.to_thread(scan_log_dirs, self.log_dirs, self.settings, warned)
            found = {s.topic_id_partition for s in sources}
            gone = led - found
            if gone:
                await rlm.stop_partitions(gone)
            await rlm.on_leadership_changes(sources, start_tasks=False)
            led = found
            report.partitions = len(found)
            self._round = asyncio.create_task(rlm.run_round())
            results = {}
            try:
                results = await self._round
            except asyncio.CancelledError:
                if self._signals < 2:
                    raise  # not ours: propagate
            finally:
                self._round = None
            report.rounds += 1
            report.denied = self._count_failures(results)
            behind = await self._record_event_log_lag(rlm)
            if not self._stop.is_set():
                self.metrics.readiness.round_completed(round_problem(results) or behind)
            self.display.round_done(len(found))
            if self.once:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.settings.task_interval_ms / 1000)

    def _count_failures(
        self, results: Mapping[TopicIdPartition, tuple[CopyResult, Any]]
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
            self.display.tally.errors.append(str(copied.error))
        self.metrics.metadata_denied.set(1 if denied else 0)
        return denied

    async def _record_event_log_lag(self, rlm: RemoteLogManager) -> str | None:
        """Set the lag gauges; return why the metadata is not caught up (None: it is)."""
        applied = rlm.rlmm.applied_offsets
        if not applied or self._event_log is None:
            return None
        try:
            ends = await self._event_log.end_offsets(sorted(applied))
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


__all__ = ["DEFAULT_METRICS_HOST", "Sidecar", "SidecarReport", "run_sidecar"]
