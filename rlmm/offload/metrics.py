"""OffloadMetrics: Kafka's tiered-storage figures as Prometheus metrics.

Each metric maps to one of Kafka's (``kafka.server:type=BrokerTopicMetrics`` unless
noted); the table is in docs/offload.md. Invariant: every instance has its own
CollectorRegistry (two managers in one process never collide), and a gauge always
holds the value of the last round, per partition, but for an age, which is the time
since a timestamp of the last round, computed when read (``PartitionAgeGauge``: a
round over an unchanged partition is skipped, and its age must grow all the same).
The unarchived-tail gauges exist only for partitions this manager leads. The
per-partition gauges (nine series per partition: 36,000 on a broker of 4,000) are
rendered for ``/metrics`` as they are set, not at each scrape (``PartitionGauge``):
prometheus_client formats about 50,000 samples a second, so a scrape of that many
would take half a second; the ages, one line each, are formatted at the scrape.

``serve`` puts the registry on an HTTP port, beside the probes of ``rlmm.offload.health``.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING
from wsgiref.simple_server import make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Metric, Summary
from prometheus_client.core import CounterMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.utils import floatToGoString

from rlmm.model import TopicIdPartition
from rlmm.offload.health import QuietHandler, Readiness, health_app

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.registry import Collector

_TOPIC = ("topic",)
_PARTITION = ("topic", "partition")
# Kafka's sensors keep two samples of 30 s by default: its -max looks about this far back.
THROTTLE_MAX_WINDOW_S = 60.0


def _escape(value: str) -> str:
    """A label value as the text exposition format writes it."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


# Set on the thread of a /metrics request while it encodes the registry: the
# per-partition gauges then collect nothing, their pre-rendered lines follow instead.
_prerendered = threading.local()


class PartitionGauge:
    """A gauge labelled (topic, partition) that keeps each series' exposition line,
    rendered when set through ``set_partition``. It is a collector of the registry like
    any gauge (an embedder's own exporter sees it); ``/metrics`` (``OffloadMetrics.scrape``)
    writes ``exposition()`` instead, the lines prometheus_client would write."""

    def __init__(self, name: str, documentation: str, registry: CollectorRegistry) -> None:
        self.name = name
        self.gauge = Gauge(name, documentation, _PARTITION, registry=None)
        registry.register(self)
        doc = documentation.replace("\\", "\\\\").replace("\n", "\\n")
        self._header = f"# HELP {name} {doc}\n# TYPE {name} gauge\n"
        self._lines: dict[tuple[str, str], str] = {}

    def labels(self, topic: str, partition: str) -> Gauge:
        """The series' Gauge (to read it; set it with ``set_partition``)."""
        return self.gauge.labels(topic, partition)

    def set_partition(self, tp: TopicIdPartition, value: float) -> None:
        key = (tp.topic, str(tp.partition))
        self.gauge.labels(*key).set(value)
        self._lines[key] = (
            f'{self.name}{{partition="{key[1]}",topic="{_escape(key[0])}"}}'
            f" {floatToGoString(value)}\n"
        )

    def remove_partition(self, tp: TopicIdPartition) -> None:
        """Drop the series of ``tp`` (absent from then on, not 0)."""
        key = (tp.topic, str(tp.partition))
        if self._lines.pop(key, None) is not None:
            self.gauge.remove(*key)

    def describe(self) -> Iterable[Metric]:
        return self.gauge.describe()

    def collect(self) -> Iterable[Metric]:
        return [] if getattr(_prerendered, "active", False) else self.gauge.collect()

    def exposition(self) -> str:
        # list(): one C call under the GIL, safe while the loop sets a new series
        return self._header + "".join(list(self._lines.values()))


class PartitionAgeGauge(PartitionGauge):
    """A PartitionGauge whose value is the seconds since a timestamp set per partition,
    computed when read (a scrape, or the registry's collect): it grows between rounds."""

    def __init__(self, name: str, documentation: str, registry: CollectorRegistry) -> None:
        super().__init__(name, documentation, registry)
        # (topic, partition) -> (the line up to its value, the timestamp in ms)
        self._series: dict[tuple[str, str], tuple[str, int]] = {}

    def set_partition(self, tp: TopicIdPartition, value: float) -> None:
        raise TypeError(f"{self.name} is an age: set its timestamp with set_since()")

    def set_since(self, tp: TopicIdPartition, timestamp_ms: int) -> None:
        """The series of ``tp`` reads now minus ``timestamp_ms``, in seconds."""
        key = (tp.topic, str(tp.partition))
        known = self._series.get(key)
        if known is not None and known[1] == timestamp_ms:
            return
        line = f'{self.name}{{partition="{key[1]}",topic="{_escape(key[0])}"}}'
        self._series[key] = (line, timestamp_ms)
        self.gauge.labels(*key).set_function(lambda: time.time() - timestamp_ms / 1000)

    def remove_partition(self, tp: TopicIdPartition) -> None:
        key = (tp.topic, str(tp.partition))
        if self._series.pop(key, None) is not None:
            self.gauge.remove(*key)

    def exposition(self) -> str:
        now = time.time()
        # list(): one C call under the GIL, safe while the loop sets or drops a series
        series = list(self._series.values())
        # to the millisecond the timestamps have (floatToGoString takes 3x as long)
        return self._header + "".join(f"{line} {now - ms / 1000:.3f}\n" for line, ms in series)


class MetricsServer:
    """The HTTP endpoint's server and thread; ``close()`` stops both (idempotent)."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        self._closed = False
        self._close_lock = threading.Lock()
        self.port: int = server.server_port
        self.host: str = str(server.server_address[0])

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            if self._thread.is_alive():
                self._server.shutdown()
                self._thread.join()
            self._server.server_close()


class _StorePaused:
    """``rlmm_remote_storage_paused_seconds_total``, read from the store at each scrape."""

    def __init__(self, read: Callable[[], float]) -> None:
        self.read = read

    def collect(self) -> Iterable[Metric]:
        yield CounterMetricFamily(
            "rlmm_remote_storage_paused_seconds",
            "Seconds the remote store held its copies, S3 having refused them (its rate:"
            " the share of time S3 refuses; RlmmRemoteStorageRefusing)",
            value=self.read(),
        )


class OffloadMetrics:
    """Counters and gauges of one RemoteLogManager (and of its metadata event log)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        # In this order: the registry exposes its families in the order they register.
        self._add_transfer_counters(self.registry)
        self._add_partition_gauges(self.registry)
        self._add_round_metrics(self.registry)
        self._add_sidecar_metrics(self.registry)
        self._add_throttle_metrics(self.registry)
        self.readiness = Readiness(self.registry)
        self._store_paused = _StorePaused(lambda: 0.0)
        self.registry.register(self._store_paused)

    def _add_transfer_counters(self, r: CollectorRegistry) -> None:
        """Per topic, what was copied, deleted and fetched (Kafka's Remote*PerSec)."""
        self.copy_bytes = Counter(
            "rlmm_remote_copy_bytes",
            "Bytes copied to remote storage (RemoteCopyBytesPerSec)",
            _TOPIC,
            registry=r,
        )
        self.copy_requests = Counter(
            "rlmm_remote_copy_requests",
            "Segment copies started (RemoteCopyRequestsPerSec)",
            _TOPIC,
            registry=r,
        )
        self.copy_errors = Counter(
            "rlmm_remote_copy_errors",
            "Segment copies that failed (RemoteCopyErrorsPerSec)",
            _TOPIC,
            registry=r,
        )
        self.delete_requests = Counter(
            "rlmm_remote_delete_requests",
            "Segment deletions started (RemoteDeleteRequestsPerSec)",
            _TOPIC,
            registry=r,
        )
        self.delete_errors = Counter(
            "rlmm_remote_delete_errors",
            "Segment deletions that failed (RemoteDeleteErrorsPerSec)",
            _TOPIC,
            registry=r,
        )
        self.fetch_bytes = Counter(
            "rlmm_remote_fetch_bytes",
            "Bytes read from remote storage (RemoteFetchBytesPerSec)",
            _TOPIC,
            registry=r,
        )
        self.fetch_requests = Counter(
            "rlmm_remote_fetch_requests",
            "Remote fetches (RemoteFetchRequestsPerSec)",
            _TOPIC,
            registry=r,
        )
        self.fetch_errors = Counter(
            "rlmm_remote_fetch_errors",
            "Remote fetches that failed (RemoteFetchErrorsPerSec)",
            _TOPIC,
            registry=r,
        )

    def _add_partition_gauges(self, r: CollectorRegistry) -> None:
        """Per partition, the lags, the remote log and the unarchived tail of the last round."""
        self.copy_lag_bytes = PartitionGauge(
            "rlmm_remote_copy_lag_bytes",
            "Bytes eligible but not yet copied (RemoteCopyLagBytes)",
            r,
        )
        self.copy_lag_segments = PartitionGauge(
            "rlmm_remote_copy_lag_segments",
            "Segments eligible but not yet copied (RemoteCopyLagSegments)",
            r,
        )
        self.delete_lag_bytes = PartitionGauge(
            "rlmm_remote_delete_lag_bytes",
            "Bytes retention wants deleted, not yet deleted (RemoteDeleteLagBytes)",
            r,
        )
        self.delete_lag_segments = PartitionGauge(
            "rlmm_remote_delete_lag_segments",
            "Segments retention wants deleted, not yet deleted (RemoteDeleteLagSegments)",
            r,
        )
        self.remote_log_size = PartitionGauge(
            "rlmm_remote_log_size_bytes",
            "Bytes of the partition in remote storage (RemoteLogSizeBytes)",
            r,
        )
        self.metadata_count = PartitionGauge(
            "rlmm_remote_log_metadata_count",
            "Remote segments known for the partition (RemoteLogMetadataCount)",
            r,
        )
        self.unarchived_offsets = PartitionGauge(
            "rlmm_unarchived_offsets",
            "Offsets of the local log not in remote storage: the log end offset minus the"
            " archive's end, the active segment included (never copied, as in Kafka; the"
            " copy lag leaves it out)",
            r,
        )
        self.unarchived_bytes = PartitionGauge(
            "rlmm_unarchived_bytes",
            "Bytes of the local segments holding offsets not in remote storage, the active"
            " segment included",
            r,
        )
        self.archive_newest_record_age = PartitionAgeGauge(
            "rlmm_archive_newest_record_age_seconds",
            "Seconds since the largest timestamp of the newest archived segment: records"
            " written after it are on the broker only (absent: nothing archived)",
            r,
        )
        self.partition_gauges = (
            self.copy_lag_bytes, self.copy_lag_segments, self.delete_lag_bytes,
            self.delete_lag_segments, self.remote_log_size, self.metadata_count,
            self.unarchived_offsets, self.unarchived_bytes, self.archive_newest_record_age,
        )  # fmt: skip

    def _add_round_metrics(self, r: CollectorRegistry) -> None:
        """What the rounds did: runs, failures, missed offsets, the metadata's lag and refusals."""
        self.event_log_lag = Gauge(
            "rlmm_metadata_event_log_lag",
            "Metadata events published but not yet applied, per metadata partition",
            ("metadata_partition",),
            registry=r,
        )
        self.offsets_missed = Counter(
            "rlmm_offload_offsets_missed",
            "Offsets the broker deleted from its local log before they were copied (its"
            " local retention outran the copy lag, or DeleteRecords): missing from the archive",
            _TOPIC,
            registry=r,
        )
        self.rounds = Counter(
            "rlmm_offload_rounds",
            "Rounds run over every leader partition (a copy, then an expiration, of each)",
            registry=r,
        )
        self.partition_rounds = Counter(
            "rlmm_offload_partition_rounds",
            "Copy and expiration runs of one partition",
            ("kind",),
            registry=r,
        )
        self.round_failures = Counter(
            "rlmm_offload_partition_round_failures",
            "Partition rounds that failed as a whole; reason=denied: Kafka refused the"
            " metadata write or read (an ACL or a credential), nothing was uploaded",
            ("reason",),
            registry=r,
        )
        for reason in ("denied", "error"):
            self.round_failures.labels(reason)
        self.metadata_denied = Gauge(
            "rlmm_offload_metadata_denied",
            "1 while the last round found the metadata topic refused to this principal",
            registry=r,
        )

    def _add_sidecar_metrics(self, r: CollectorRegistry) -> None:
        """The sidecar's state: its interval, what it leads, the topics it skips."""
        self.task_interval = Gauge(
            "rlmm_offload_task_interval_seconds",
            "remote.log.manager.task.interval.ms, in seconds (for alerts on late rounds)",
            registry=r,
        )
        self.partitions_led = Gauge(
            "rlmm_offload_partitions_led",
            "Partitions this sidecar leads now (copies and expires)",
            registry=r,
        )
        self.partitions_waiting = Gauge(
            "rlmm_offload_partitions_waiting",
            "Partitions the cluster says this broker leads whose log dir has not reached"
            " that leader epoch yet (the sidecar waits)",
            registry=r,
        )
        self.leadership_changes = Counter(
            "rlmm_offload_leadership_changes",
            "Partitions this sidecar started or stopped leading",
            registry=r,
        )
        self.leadership_known = Gauge(
            "rlmm_offload_leadership_known",
            "1 while leadership was learned from the cluster (or no cluster is configured);"
            " 0: nothing is copied or expired",
            registry=r,
        )
        self.topics_skipped = Gauge(
            "rlmm_offload_topics_skipped",
            "Topics found but never touched; reason=kafka-tiered: the cluster tiers it with"
            " Kafka's own RemoteLogManager; reason=foreign-segments: its metadata holds"
            " segments rlmm did not write",
            ("reason",),
            registry=r,
        )
        for reason in ("kafka-tiered", "foreign-segments"):
            self.topics_skipped.labels(reason)

    def _add_throttle_metrics(self, r: CollectorRegistry) -> None:
        """The copy quota's throttle times (Kafka's remote-copy-throttle-time-*)."""
        self.copy_throttle_time = Summary(
            "rlmm_remote_copy_throttle_time_seconds",
            "Throttle times copies found over the copy quota (RemoteLogManager"
            " remote-copy-throttle-time-avg, in ms there, is _sum / _count)",
            registry=r,
        )
        self.copy_throttle_time_max = Gauge(
            "rlmm_remote_copy_throttle_time_max_seconds",
            "The largest throttle time found over the last minute (RemoteLogManager"
            " remote-copy-throttle-time-max, in ms there)",
            registry=r,
        )
        self._throttles: deque[tuple[float, float]] = deque()
        self._throttles_lock = threading.Lock()  # the scrape runs on the server's thread
        self.copy_throttle_time_max.set_function(self._throttle_max)

    def watch_store(self, paused_seconds: Callable[[], float]) -> None:
        """Export the remote store's held time: ``paused_seconds()`` at each scrape
        (``RemoteStorageManager.paused_seconds``; 0 until a store is watched)."""
        self._store_paused.read = paused_seconds

    def partition_exposition(self, names: Collection[str] | None = None) -> bytes:
        """The per-partition gauges' lines (of the families ``names``, all when None)."""
        return "".join(
            g.exposition() for g in self.partition_gauges if names is None or g.name in names
        ).encode()

    def scrape(
        self, encoder: Callable[[Collector], bytes], names: list[str] | None = None
    ) -> bytes:
        """The registry (the families ``names``, all when None) through prometheus_client's
        ``encoder``, with the per-partition gauges' pre-rendered lines in their place."""
        registry = self.registry if names is None else self.registry.restricted_registry(names)
        _prerendered.active = True
        try:
            body = encoder(registry)
        finally:
            _prerendered.active = False
        eof = b"# EOF\n"  # OpenMetrics ends with it
        head = body[: -len(eof)] if body.endswith(eof) else body
        return head + self.partition_exposition(names) + body[len(head) :]

    def record_copy_throttle(self, seconds: float) -> None:
        """A copy found the quota exceeded and waits ``seconds`` (Kafka's sensor)."""
        # Prometheus' base unit, seconds, where Kafka's sensor counts milliseconds
        self.copy_throttle_time.observe(seconds)
        with self._throttles_lock:
            self._throttles.append((time.monotonic(), seconds))

    def _throttle_max(self) -> float:
        horizon = time.monotonic() - THROTTLE_MAX_WINDOW_S
        with self._throttles_lock:
            while self._throttles and self._throttles[0][0] < horizon:
                self._throttles.popleft()
            return max((s for _, s in self._throttles), default=0.0)

    def serve(self, port: int, addr: str = "127.0.0.1") -> MetricsServer:
        """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``addr:port`` (0: a free
        port) from a daemon thread, until closed."""

        class Server(ThreadingWSGIServer):
            address_family = socket.getaddrinfo(
                addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0][0]

        server = make_server(
            addr,
            port,
            health_app(self.registry, self.readiness, self.scrape),
            Server,
            QuietHandler,
        )
        thread = threading.Thread(
            target=server.serve_forever, name=f"rlmm-metrics-{port}", daemon=True
        )
        thread.start()
        return MetricsServer(server, thread)

    def init_topic(self, topic: str) -> None:
        """Create the topic's counters at 0, so that a rate over them has a sample before
        the first copy or delete (Prometheus' increase() needs two)."""
        for counter in (
            self.copy_bytes, self.copy_requests, self.copy_errors, self.delete_requests,
            self.delete_errors, self.fetch_bytes, self.fetch_requests, self.fetch_errors,
            self.offsets_missed,
        ):  # fmt: skip
            counter.labels(topic)

    def set_copy_lag(self, tp: TopicIdPartition, nbytes: int, segments: int) -> None:
        self.copy_lag_bytes.set_partition(tp, nbytes)
        self.copy_lag_segments.set_partition(tp, segments)

    def set_delete_lag(self, tp: TopicIdPartition, nbytes: int, segments: int) -> None:
        self.delete_lag_bytes.set_partition(tp, nbytes)
        self.delete_lag_segments.set_partition(tp, segments)

    def set_remote_log(self, tp: TopicIdPartition, nbytes: int, segments: int) -> None:
        self.remote_log_size.set_partition(tp, nbytes)
        self.metadata_count.set_partition(tp, segments)

    def set_unarchived(
        self, tp: TopicIdPartition, offsets: int, nbytes: int, newest_timestamp_ms: int | None
    ) -> None:
        """The tail of ``tp`` not in remote storage, and the largest timestamp of its
        newest archived segment (None: nothing archived, the age is absent)."""
        self.unarchived_offsets.set_partition(tp, offsets)
        self.unarchived_bytes.set_partition(tp, nbytes)
        if newest_timestamp_ms is None:
            self.archive_newest_record_age.remove_partition(tp)
        else:
            self.archive_newest_record_age.set_since(tp, newest_timestamp_ms)

    def clear_unarchived(self, tp: TopicIdPartition) -> None:
        """``tp`` is no longer led here: its unarchived-tail series go (another
        sidecar, its leader's, exports them)."""
        for gauge in (
            self.unarchived_offsets, self.unarchived_bytes, self.archive_newest_record_age
        ):  # fmt: skip
            gauge.remove_partition(tp)


__all__ = ["MetricsServer", "OffloadMetrics"]
