"""What ``rlmm serve`` shows on its metrics port: the sidecar's metric names and probes.

The counters carry the sidecar's names, which are Kafka's BrokerTopicMetrics in
Prometheus' form (``RemoteCopyBytesPerSec`` is ``rlmm_remote_copy_bytes_total``, a
rate over it is Kafka's meter), per topic; ``/healthz`` answers while the process
serves, ``/readyz`` once every configured side is ready (the store open, the manager
started), else 503 with the reason.

Invariant: the calls only add to counters; the HTTP threads only read; nothing here
blocks a call.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import ThreadingWSGIServer

from rlmm.offload.health import QuietHandler, health_app


def _topic_counter(registry: CollectorRegistry, name: str, kafka: str, what: str) -> Counter:
    return Counter(name, f"{what} (Kafka's {kafka}), per topic", ["topic"], registry=registry)


class PluginMetrics:
    """The registry of one ``rlmm serve`` and its readiness."""

    def __init__(self, version: str) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        self.copy_bytes = _topic_counter(
            registry, "rlmm_remote_copy_bytes", "RemoteCopyBytesPerSec", "bytes copied"
        )
        self.copy_requests = _topic_counter(
            registry, "rlmm_remote_copy_requests", "RemoteCopyRequestsPerSec", "segment copies"
        )
        self.copy_errors = _topic_counter(
            registry, "rlmm_remote_copy_errors", "RemoteCopyErrorsPerSec", "failed copies"
        )
        self.fetch_bytes = _topic_counter(
            registry, "rlmm_remote_fetch_bytes", "RemoteFetchBytesPerSec", "bytes fetched"
        )
        self.fetch_requests = _topic_counter(
            registry,
            "rlmm_remote_fetch_requests",
            "RemoteFetchRequestsPerSec",
            "ranged reads of segments (one per chunk the broker's stream asks for)",
        )
        self.fetch_errors = _topic_counter(
            registry, "rlmm_remote_fetch_errors", "RemoteFetchErrorsPerSec", "failed reads"
        )
        self.delete_requests = _topic_counter(
            registry, "rlmm_remote_delete_requests", "RemoteDeleteRequestsPerSec", "deletes"
        )
        self.delete_errors = _topic_counter(
            registry, "rlmm_remote_delete_errors", "RemoteDeleteErrorsPerSec", "failed deletes"
        )
        self.copy_seconds = Histogram(
            "rlmm_remote_copy_seconds",
            "Time of one segment copy (log, indexes, snapshot, epochs)",
            registry=registry,
        )
        self.calls = Counter(
            "rlmm_serve_calls", "Calls the bridge made, per method", ["method"], registry=registry
        )
        self._calls_by_method: dict[str, Counter] = {}
        self.call_errors = Counter(
            "rlmm_serve_call_errors",
            "Calls answered with an error, per method and error type",
            ["method", "type"],
            registry=registry,
        )
        self.in_flight = Gauge(
            "rlmm_serve_calls_in_flight", "Calls being answered now", registry=registry
        )
        self.connections = Gauge(
            "rlmm_serve_bridge_connections", "Bridge classes connected now", registry=registry
        )
        Gauge(
            "rlmm_serve_info", "This rlmm serve's release", ["version"], registry=registry
        ).labels(version).set(1)
        self.readiness = ServeReadiness()

    def copied(self, topic: str, nbytes: int, seconds: float) -> None:
        self.copy_requests.labels(topic).inc()
        self.copy_bytes.labels(topic).inc(nbytes)
        self.copy_seconds.observe(seconds)

    def call(self, method: str) -> None:
        """Count one call of ``method`` (its counter child kept: lookups are hot)."""
        child = self._calls_by_method.get(method)
        if child is None:
            child = self._calls_by_method[method] = self.calls.labels(method)
        child.inc()

    def fetched(self, topic: str, nbytes: int) -> None:
        self.fetch_requests.labels(topic).inc()
        self.fetch_bytes.labels(topic).inc(nbytes)

    def serve(self, port: int, addr: str = "127.0.0.1") -> MetricsPort:
        """``/metrics``, ``/healthz`` and ``/readyz`` on ``addr:port`` (0: a free port)
        from a daemon thread, until closed."""

        class Server(ThreadingWSGIServer):
            address_family = socket.getaddrinfo(
                addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0][0]

        server = make_server(
            addr, port, health_app(self.registry, self.readiness), Server, QuietHandler
        )
        thread = threading.Thread(
            target=server.serve_forever, name=f"rlmm-serve-metrics-{port}", daemon=True
        )
        thread.start()
        return MetricsPort(server, thread)


class ServeReadiness:
    """``/readyz``: ready once each side that was configured is ready; the reason otherwise."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, str] = {"bridge": "no bridge has configured rlmm serve yet"}

    def waiting(self, part: str, reason: str) -> None:
        with self._lock:
            self._waiting[part] = reason

    def ready(self, part: str) -> None:
        with self._lock:
            self._waiting.pop(part, None)

    def state(self) -> tuple[bool, str]:
        with self._lock:
            if not self._waiting:
                return True, "ok"
            return False, "; ".join(self._waiting.values())


@dataclass
class MetricsPort:
    server: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def close(self) -> None:
        """Stop serving; idempotent."""
        if self.thread.is_alive():
            self.server.shutdown()
            self.thread.join(timeout=5)
        self.server.server_close()


__all__ = ["MetricsPort", "PluginMetrics", "ServeReadiness"]
