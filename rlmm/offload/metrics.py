"""OffloadMetrics: Kafka's tiered-storage figures as Prometheus metrics.

Each metric maps to one of Kafka's (``kafka.server:type=BrokerTopicMetrics`` unless
noted); the table is in docs/offload.md. Invariant: every instance has its own
CollectorRegistry (two managers in one process never collide), and a gauge always
holds the value of the last round, per partition.

The HTTP port answers ``/metrics`` (the registry, rendered by prometheus_client),
``/healthz`` (200 while the process serves), ``/readyz`` (200 only when the last round
completed without error and the metadata is caught up, else 503 with one line saying
why) and 404 for every other path.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from rlmm.model import TopicIdPartition

if TYPE_CHECKING:
    from rlmm.offload.manager import CopyResult, ExpireResult

_TOPIC = ("topic",)
_PARTITION = ("topic", "partition")
NOT_STARTED = "starting: no round completed yet"
PATHS = ("/metrics", "/healthz", "/readyz")

_StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class Readiness:
    """What ``/readyz`` answers: set by the sidecar's loop, read by the HTTP threads.

    Invariant: ready only after a round completed with no error and the metadata was
    caught up; any later failed round, or ``not_ready()``, makes it not ready with a
    one-line reason until the next good round. The gauges mirror the state.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self._lock = threading.Lock()
        self._ready = False
        self._reason = NOT_STARTED
        self._published: dict[int, int] = {}  # metadata end offsets at the last round's end
        self.ready_gauge = Gauge(
            "rlmm_offload_ready", "1 when /readyz answers 200, else 0", registry=registry
        )
        self.last_round = Gauge(
            "rlmm_offload_last_round_completed_timestamp_seconds",
            "Unix time the last round completed (with or without errors); 0: none yet",
            registry=registry,
        )
        self.last_good_round = Gauge(
            "rlmm_offload_last_good_round_timestamp_seconds",
            "Unix time the last round completed without error; 0: none yet",
            registry=registry,
        )

    def state(self) -> tuple[bool, str]:
        """(ready, reason): the reason is one line ("ok" when ready)."""
        with self._lock:
            return self._ready, self._reason

    def not_ready(self, reason: str) -> None:
        self._set(False, reason)

    def round_completed(self, problem: str | None) -> None:
        """A round ended: ready when ``problem`` is None, else not ready because of it."""
        now = time.time()
        self.last_round.set(now)
        if problem is None:
            self.last_good_round.set(now)
        self._set(problem is None, problem or "ok")

    def _set(self, ready: bool, reason: str) -> None:
        line = " ".join(reason.split()) or "unknown"  # one line, whatever it was given
        with self._lock:
            self._ready, self._reason = ready, line
        self.ready_gauge.set(1 if ready else 0)

    def metadata_problem(self, applied: Mapping[int, int], ends: Mapping[int, int]) -> str | None:
        """None when every metadata event published before the previous round ended has
        been applied; else which metadata partition is behind. ``ends`` (end offsets now)
        are kept for the next call: a transient lag (events other brokers just wrote)
        is no problem, a consumer that did not move for a whole interval is."""
        behind = [
            (p, applied.get(p, -1), end - 1)
            for p, end in sorted(self._published.items())
            if applied.get(p, -1) < end - 1
        ]
        self._published = dict(ends)
        if not behind:
            return None
        p, at, wanted = behind[0]
        more = f" (and {len(behind) - 1} more)" if len(behind) > 1 else ""
        return (
            f"metadata not caught up: partition {p} applied offset {at}, events up to"
            f" {wanted} were published a round ago{more}"
        )


def round_problem(
    results: Mapping[TopicIdPartition, tuple[CopyResult, ExpireResult]],
) -> str | None:
    """None when no partition of the round failed; else one line naming the first
    failure (a copy that failed after its retries leaves its segments stuck)."""
    failed = [(tp, copy) for tp, (copy, _expire) in results.items() if copy.error is not None]
    if not failed:
        return None
    tp, copy = failed[0]
    more = f" (and {len(failed) - 1} more partitions)" if len(failed) > 1 else ""
    pending = f"; {copy.pending} segments not copied" if copy.pending else ""
    return f"last round failed: {tp}: {copy.error}{pending}{more}"


class _QuietHandler(WSGIRequestHandler):
    """No log line per request (Prometheus and kubelet ask every few seconds)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def health_app(
    registry: CollectorRegistry, readiness: Readiness
) -> Callable[[dict[str, Any], _StartResponse], Iterable[bytes]]:
    """The WSGI app of the metrics port (the module docstring says what it answers)."""
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: _StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return metrics(environ, start_response)
        if path == "/healthz":
            status, body = "200 OK", "ok"
        elif path == "/readyz":
            ready, reason = readiness.state()
            status, body = ("200 OK", "ok") if ready else ("503 Service Unavailable", reason)
        else:
            status = "404 Not Found"
            body = f"not found: {path} (this port serves {', '.join(PATHS)})"
        data = (body + "\n").encode()
        start_response(
            status,
            [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data)))],
        )
        return [b""] if environ.get("REQUEST_METHOD") == "HEAD" else [data]

    return app


class MetricsServer:
    """The HTTP endpoint's server and thread; ``close()`` stops both (idempotent)."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
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


class OffloadMetrics:
    """Counters and gauges of one RemoteLogManager (and of its metadata event log)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
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
        self.copy_lag_bytes = Gauge(
            "rlmm_remote_copy_lag_bytes",
            "Bytes eligible but not yet copied (RemoteCopyLagBytes)",
            _PARTITION,
            registry=r,
        )
        self.copy_lag_segments = Gauge(
            "rlmm_remote_copy_lag_segments",
            "Segments eligible but not yet copied (RemoteCopyLagSegments)",
            _PARTITION,
            registry=r,
        )
        self.delete_lag_bytes = Gauge(
            "rlmm_remote_delete_lag_bytes",
            "Bytes retention wants deleted, not yet deleted (RemoteDeleteLagBytes)",
            _PARTITION,
            registry=r,
        )
        self.delete_lag_segments = Gauge(
            "rlmm_remote_delete_lag_segments",
            "Segments retention wants deleted, not yet deleted (RemoteDeleteLagSegments)",
            _PARTITION,
            registry=r,
        )
        self.remote_log_size = Gauge(
            "rlmm_remote_log_size_bytes",
            "Bytes of the partition in remote storage (RemoteLogSizeBytes)",
            _PARTITION,
            registry=r,
        )
        self.metadata_count = Gauge(
            "rlmm_remote_log_metadata_count",
            "Remote segments known for the partition (RemoteLogMetadataCount)",
            _PARTITION,
            registry=r,
        )
        self.event_log_lag = Gauge(
            "rlmm_metadata_event_log_lag",
            "Metadata events published but not yet applied, per metadata partition",
            ("metadata_partition",),
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
        self.task_interval = Gauge(
            "rlmm_offload_task_interval_seconds",
            "remote.log.manager.task.interval.ms, in seconds (for alerts on late rounds)",
            registry=r,
        )
        self.readiness = Readiness(r)

    def serve(self, port: int, addr: str = "127.0.0.1") -> MetricsServer:
        """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``addr:port`` (0: a free
        port) from a daemon thread, until closed."""

        class Server(ThreadingWSGIServer):
            address_family = socket.getaddrinfo(
                addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0][0]

        server = make_server(
            addr, port, health_app(self.registry, self.readiness), Server, _QuietHandler
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
        ):  # fmt: skip
            counter.labels(topic)

    def set_copy_lag(self, tp: TopicIdPartition, nbytes: int, segments: int) -> None:
        self.copy_lag_bytes.labels(tp.topic, str(tp.partition)).set(nbytes)
        self.copy_lag_segments.labels(tp.topic, str(tp.partition)).set(segments)

    def set_delete_lag(self, tp: TopicIdPartition, nbytes: int, segments: int) -> None:
        self.delete_lag_bytes.labels(tp.topic, str(tp.partition)).set(nbytes)
        self.delete_lag_segments.labels(tp.topic, str(tp.partition)).set(segments)

    def set_remote_log(self, tp: TopicIdPartition, nbytes: int, segments: int) -> None:
        self.remote_log_size.labels(tp.topic, str(tp.partition)).set(nbytes)
        self.metadata_count.labels(tp.topic, str(tp.partition)).set(segments)


__all__ = ["MetricsServer", "OffloadMetrics", "Readiness", "health_app", "round_problem"]
