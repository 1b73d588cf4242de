"""What the metrics port answers besides the metrics: ``/healthz`` and ``/readyz``.

Invariant: ``/healthz`` is 200 while the process serves; ``/readyz`` is 200 only after
a round completed without error with the metadata caught up, else 503 with one line
saying why; ``/metrics`` is the registry as prometheus_client renders it (text or
OpenMetrics, as asked, gzipped when accepted), followed by any lines rendered ahead of
time (the per-partition gauges); every other path is 404. The sidecar's loop sets the
state, the HTTP threads only read it.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Protocol
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler

from prometheus_client import CollectorRegistry, Gauge, make_wsgi_app
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import Collector

from rlmm.model import TopicIdPartition

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

    from rlmm.offload.remote_log_manager import CopyResult, ExpireResult

NOT_STARTED = "starting: no round completed yet"
PATHS = ("/metrics", "/healthz", "/readyz")

# (prometheus_client's encoder for the format asked, the name[] filter) -> the body
Scrape = Callable[[Callable[[Collector], bytes], list[str] | None], bytes]


class ReadinessState(Protocol):
    """What ``/readyz`` asks: ready or not, and the one-line reason."""

    def state(self) -> tuple[bool, str]: ...


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


class QuietHandler(WSGIRequestHandler):
    """No log line per request (Prometheus and kubelet ask every few seconds)."""

    def log_message(self, format: str, *args: object) -> None:
        pass


def health_app(
    registry: CollectorRegistry,
    readiness: ReadinessState,
    scrape: Scrape | None = None,
) -> WSGIApplication:
    """The WSGI app of the metrics port (the module docstring says what it answers);
    ``scrape(encoder, names)``, when given, renders ``/metrics`` in the encoder's format
    (``OffloadMetrics.scrape``: some lines rendered ahead of time)."""
    metrics = make_wsgi_app(registry)

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics" and scrape is not None:
            return _metrics(scrape, environ, start_response)
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


def _metrics(
    scrape: Scrape,
    environ: WSGIEnvironment,
    start_response: StartResponse,
) -> Iterable[bytes]:
    """prometheus_client's /metrics answer (``make_wsgi_app``'s: the format asked for,
    ``name[]`` filters, gzip), its body made by ``scrape``."""
    encoder, content_type = choose_encoder(environ.get("HTTP_ACCEPT") or "")
    body = scrape(encoder, parse_qs(environ.get("QUERY_STRING", "")).get("name[]"))
    headers = [("Content-Type", content_type)]
    if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")):
        body = gzip.compress(body, compresslevel=1)  # a fast level: 24k lines every scrape
        headers.append(("Content-Encoding", "gzip"))
    start_response("200 OK", headers)
    return [b""] if environ.get("REQUEST_METHOD") == "HEAD" else [body]


__all__ = [
    "NOT_STARTED",
    "PATHS",
    "QuietHandler",
    "Readiness",
    "ReadinessState",
    "health_app",
    "round_problem",
]
