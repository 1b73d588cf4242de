"""``rlmm serve``: one process per broker answering the JVM bridge over a local socket.

The broker's two plugin classes each hold one connection (the RSM's and the RLMM's);
each says ``hello`` (protocol and release: a bridge and a serve of different releases
refuse each other in one line), then ``configure`` with the properties Kafka gave it,
then calls. Every request is answered in its own task, so a slow copy never holds up
a fetch or a lookup; answers go back in whatever order they finish. A lookup the
manager's cache answers alone (``isReady``, ``listRemoteLogSegments``, ...) is answered
inline as its frame is read, without a task: an idle broker asks them of every
partition each task interval, and a task per call was most of their cost. Each other
call runs up to its first wait before the next frame is read, so an inline answer
reflects every call sent before it on the same connection (as far as the call changes
state before it waits: leadership and stop do). On the RLMM class's connection, frames
without an id are pushed too: ``{"push": "applied", "offsets": [[metadata partition,
offset], ...]}`` as the manager applies events (at most one push per ``PUSH_COALESCE_S``), so the
bridge knows when a listing it keeps has gone stale.

Invariants:
- one serve per socket: the socket's ``.lock`` file is held (flock) for the process's
  life; a second serve on the same socket exits with code 3 (the bridge then attaches
  to the first);
- nothing outlives its owner: the last open plugin class closing, SIGINT, SIGTERM or
  the broker's pid vanishing (``--parent-pid``) stops the process: the calls in
  flight are cancelled, the manager takes its final snapshot, the store closes, the
  socket file is removed. A SIGTERM while the broker lives and a class is open (the
  broker's shutdown signals its process group) waits for the classes to close, at
  most ``TERM_GRACE_S``;
- every error is answered, never raised into the connection: a RemoteStorageError
  with its wire type, anything else as ``internal`` (logged with its traceback); a
  connection that breaks the protocol is closed with one warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import importlib.metadata
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from rlmm.errors import RemoteStorageError
from rlmm.plugin.errors import AlreadyServingError, ProtocolError, VersionMismatchError
from rlmm.plugin.metadata_calls import Lookup, MetadataCalls
from rlmm.plugin.metrics import MetricsPort, PluginMetrics
from rlmm.plugin.protocol import PROTOCOL_VERSION, arg, error_type, frame, read_frame
from rlmm.plugin.storage_calls import StorageCalls

log = logging.getLogger(__name__)

PARENT_POLL_S = 1.0
# After SIGTERM with the broker alive: how long to keep answering while it closes its
# plugin classes (a broker's shutdown signals its whole process group, this one too).
TERM_GRACE_S = 30.0
ROLES = ("rsm", "rlmm")
# Inline answers wait for the socket to drain only past this many unsent bytes.
WRITE_HIGH_WATER = 1 << 20
Handler = Callable[[Mapping[str, Any]], Awaitable[Any]]
# Pushes of the applied offsets follow the applies, at most one per this interval (a
# burst of batches is one push). The bridge's own writes are answered with their
# position, so this only bounds how long a listing changed by another broker's write is
# kept.
PUSH_COALESCE_S = 0.05


@dataclass(slots=True)
class _Peer:
    """A connected plugin class: its role, and whether it said close."""

    role: str
    closed: bool = False


def release() -> str:
    """This installation's rlmm release (what the bridge's jar must equal)."""
    return importlib.metadata.version("rlmm")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class PluginServer:
    """The socket, the two sides' calls and the process's life (see the module)."""

    def __init__(
        self,
        config_path: Path | None,
        socket_path: Path,
        *,
        parent_pid: int | None = None,
        overrides: Mapping[str, Any] | None = None,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
    ) -> None:
        self.socket_path = socket_path
        self._parent_pid = parent_pid
        self._metrics_at = (metrics_port, metrics_host)
        self.version = release()
        self.metrics = PluginMetrics(self.version)
        self.storage = StorageCalls(config_path, self.metrics, overrides)
        self.metadata = MetadataCalls(
            config_path, self.metrics.readiness, overrides, storage=self.storage
        )
        self._methods: dict[str, Handler] = {
            "configure": self._configure,
            **self.storage.handlers(),
            **self.metadata.handlers(),
        }
        self._lookups: dict[str, Lookup] = self.metadata.lookups()
        self._stop = asyncio.Event()
        self._connections: set[asyncio.Task[None]] = set()
        # connection -> its plugin class: the process stops itself
        # once every connected class has closed (the broker closes the RSM, then the
        # RLMM: the first must not take the process from the second).
        self._peers: dict[asyncio.Task[None], _Peer] = {}
        self._writers: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self._pushers: dict[asyncio.Task[None], asyncio.Task[None]] = {}
        self._lock_file: IO[str] | None = None
        self._terminating = False
        self.metrics_port: MetricsPort | None = None

    # --- life -------------------------------------------------------------------------

    def _take_lock(self) -> None:
        path = self.socket_path.with_name(self.socket_path.name + ".lock")
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        lock = path.open("a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            lock.close()
            raise AlreadyServingError(
                f"another rlmm serve holds {self.socket_path} (its lock {path} is taken)"
            ) from e
        self._lock_file = lock

    async def serve(self, ready: Callable[[PluginServer], None] | None = None) -> None:
        """Serve until stopped (signal, parent gone or ``stop()``); then shut down."""
        self._take_lock()
        loop = asyncio.get_running_loop()
        try:
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()  # a dead serve's; the lock says none is alive
            server = await asyncio.start_unix_server(
                self._connection, path=str(self.socket_path), limit=1 << 20
            )
            os.chmod(self.socket_path, 0o600)  # the broker's user only
            loop.add_signal_handler(signal.SIGTERM, self._terminate)
            loop.add_signal_handler(signal.SIGINT, self.stop)
            port, host = self._metrics_at
            if port is not None:
                self.metrics_port = self.metrics.serve(port, host)
            watch = asyncio.create_task(self._watch_parent(), name="rlmm-serve-parent")
            log.info(
                "rlmm serve %s (pid %d) listening on %s%s",
                self.version,
                os.getpid(),
                self.socket_path,
                "" if self.metrics_port is None else f", metrics on port {self.metrics_port.port}",
            )
            if ready is not None:
                ready(self)
            try:
                await self._stop.wait()
            finally:
                watch.cancel()
                server.close()
                await self._shutdown()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(server.wait_closed(), 5)
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()
            if self._lock_file is not None:
                self._lock_file.close()

    def stop(self) -> None:
        self._stop.set()

    def _terminate(self) -> None:
        """SIGTERM: stop now, unless the broker is alive and a plugin class is still
        open (the broker is shutting down with its process group and will close it):
        then once the last class closes, the broker is gone, or TERM_GRACE_S passed.
        A second SIGTERM stops now."""
        still = self._open_roles()
        # A serve the bridge started knows the broker's pid; a container sidecar does
        # not, and its open connections are the sign of a live broker.
        alive = self._parent_pid is None or _alive(self._parent_pid)
        if self._terminating or not still or not alive:
            self.stop()
            return
        self._terminating = True
        log.info(
            "SIGTERM: answering until the broker closes its plugin classes (%s), at most %.0f s",
            ", ".join(sorted(still)),
            TERM_GRACE_S,
        )
        asyncio.get_running_loop().call_later(TERM_GRACE_S, self.stop)

    async def _watch_parent(self) -> None:
        if self._parent_pid is None:
            return
        while _alive(self._parent_pid):
            await asyncio.sleep(PARENT_POLL_S)
        log.warning("the broker (pid %d) is gone: stopping", self._parent_pid)
        self.stop()

    async def _shutdown(self) -> None:
        log.info("rlmm serve stopping")
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.metadata.close()
        await asyncio.to_thread(self.storage.close)
        if self.metrics_port is not None:
            self.metrics_port.close()
        log.info("rlmm serve stopped")

    # --- one connection ----------------------------------------------------------------

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        me = asyncio.current_task()
        assert me is not None
        self._connections.add(me)
        self._writers[me] = writer
        self.metrics.connections.inc()
        send = asyncio.Lock()
        calls: set[asyncio.Task[None]] = set()
        try:
            while True:
                message = await read_frame(reader)
                if message is None:
                    break
                method = message.get("method")
                lookup = self._lookups.get(method) if isinstance(method, str) else None
                if lookup is not None:
                    writer.write(self._answer_lookup(message, lookup))
                    if writer.transport.get_write_buffer_size() > WRITE_HIGH_WATER:
                        async with send:
                            await writer.drain()
                    continue
                task = asyncio.create_task(self._answer(message, writer, send, me))
                calls.add(task)
                task.add_done_callback(calls.discard)
                # Let the call run up to its first wait before the next frame is read, so
                # a lookup answered inline never overtakes what was sent before it (a
                # partition stopped, then asked isReady, must not be found ready).
                await asyncio.sleep(0)
        except ProtocolError as e:
            log.warning("closing a bridge connection that broke the protocol: %s", e)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            for task in list(calls):
                task.cancel()
            pusher = self._pushers.pop(me, None)
            if pusher is not None:
                pusher.cancel()
            self._writers.pop(me, None)
            self.metrics.connections.dec()
            self._connections.discard(me)
            self._peers.pop(me, None)
            if self._terminating and not self._open_roles():
                self.stop()  # the broker went without closing: nothing left to wait for
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _answer(
        self,
        message: Mapping[str, Any],
        writer: asyncio.StreamWriter,
        send: asyncio.Lock,
        peer: asyncio.Task[None],
    ) -> None:
        request_id = message.get("id")
        method = message.get("method")
        answer: dict[str, Any] = {"id": request_id}
        self.metrics.in_flight.inc()
        try:
            args = message.get("args") or {}
            if not isinstance(args, dict):
                raise ProtocolError(f"{method}: args is a {type(args).__name__}, not a map")
            if method == "hello":
                answer["result"] = self._hello(args, peer)
            elif method == "close":
                answer["result"] = self._close_call(args, peer)
            else:
                if not isinstance(method, str) or (handler := self._methods.get(method)) is None:
                    raise ProtocolError(f"unknown method {method!r}")
                self.metrics.call(method)
                answer["result"] = await handler(args)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            answer["error"] = self._error(method, e)
        finally:
            self.metrics.in_flight.dec()
        data = frame(answer)
        async with send:
            writer.write(data)
            with contextlib.suppress(ConnectionError):
                await writer.drain()

    def _answer_lookup(self, message: Mapping[str, Any], lookup: Lookup) -> bytes:
        method = message["method"]
        answer: dict[str, Any] = {"id": message.get("id")}
        try:
            args = message.get("args") or {}
            if not isinstance(args, dict):
                raise ProtocolError(f"{method}: args is a {type(args).__name__}, not a map")
            self.metrics.call(method)
            answer["result"] = lookup(args)
        except Exception as e:
            answer["error"] = self._error(method, e)
        return frame(answer)

    def _error(self, method: object, e: Exception) -> dict[str, str]:
        """The wire error of a failed call, logged as its kind deserves."""
        kind = error_type(e)
        if kind == "internal":
            log.exception("%s failed", method)
        elif kind == "not_found":
            # Kafka asks for indexes that may not exist (a segment without aborted
            # transactions has no transaction index): an answer, not a problem.
            log.debug("%s: %s", method, e)
        elif not isinstance(e, RemoteStorageError) or not e.retriable:
            log.warning("%s: %s", method, e)
        self.metrics.call_errors.labels(str(method), kind).inc()
        return {"type": kind, "message": _one_line(method, e)}

    # --- the calls of both roles ----------------------------------------------------------

    def _hello(self, args: Mapping[str, Any], peer: asyncio.Task[None]) -> dict[str, Any]:
        protocol = args.get("protocol")
        theirs = args.get("version")
        role = args.get("role")
        if protocol != PROTOCOL_VERSION or theirs != self.version:
            raise VersionMismatchError(
                f"the rlmm bridge jar is release {theirs} (protocol {protocol}) and rlmm serve"
                f" is {self.version} (protocol {PROTOCOL_VERSION}): install the jar built from"
                " the same rlmm release (make plugin) as the rlmm on the broker's PATH"
            )
        log.info("bridge %s connected (broker pid %s)", role, args.get("jvm_pid"))
        self._peers[peer] = _Peer(str(role))
        writer = self._writers.get(peer)
        if role == "rlmm" and writer is not None and peer not in self._pushers:
            self._pushers[peer] = asyncio.create_task(
                self._push_applied(writer), name="rlmm-serve-push-applied"
            )
        return {"version": self.version, "pid": os.getpid(), "protocol": PROTOCOL_VERSION}

    async def _push_applied(self, writer: asyncio.StreamWriter) -> None:
        """Tell the RLMM class's bridge each metadata partition's applied offset as it
        moves (see the module); ends with the connection."""
        told: dict[int, int] = {}
        while not writer.is_closing():
            moved = {p: o for p, o in self.metadata.applied_offsets().items() if told.get(p) != o}
            if not moved:
                # Compared and then waited for without a turn of the loop between: an
                # apply in between would be a wake-up lost, and a push never sent.
                await self.metadata.applied_moved()  # an idle broker: no wake-up at all
                continue
            told.update(moved)
            # a few bytes per metadata partition: never waits for the socket to drain
            offsets = [[p, o] for p, o in moved.items()]
            writer.write(frame({"push": "applied", "offsets": offsets}))
            await asyncio.sleep(PUSH_COALESCE_S)  # a burst of applied batches: one push

    async def _configure(self, args: Mapping[str, Any]) -> None:
        role = arg(args, "role", str)
        props = arg(args, "props", dict)
        if role not in ROLES or not all(isinstance(v, str) for v in props.values()):
            raise ProtocolError(f"configure: role {role!r} or its props are not valid")
        self.metrics.readiness.ready("bridge")
        if role == "rsm":
            await self.storage.configure(props)
        else:
            await self.metadata.configure(props)

    def _open_roles(self) -> list[str]:
        """Roles of the connected plugin classes that have not closed."""
        return sorted({p.role for p in self._peers.values() if not p.closed})

    def _close_call(self, args: Mapping[str, Any], peer: asyncio.Task[None]) -> dict[str, Any]:
        """A plugin class closes; the process stops once no connected class is open.
        ``stopping`` tells the bridge whether to wait for this process to exit."""
        if peer in self._peers:
            self._peers[peer].closed = True
        still = self._open_roles()
        # Started by the bridge (it passes the broker's pid): the broker is closing us.
        # A container sidecar's life is the orchestrator's, unless it was told to stop.
        stopping = not still and (self._parent_pid is not None or self._terminating)
        log.info(
            "bridge %s closing%s",
            args.get("role"),
            "; no class left open: stopping"
            if stopping
            else f"; still open: {', '.join(still) or 'none (serving on: no --parent-pid)'}",
        )
        if stopping:
            # after this answer is on its way (the task writes it before yielding)
            asyncio.get_running_loop().call_soon(self.stop)
        return {"stopping": stopping, "open": still}


def _one_line(method: object, error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return f"rlmm serve {method}: {text}"


__all__ = ["PluginServer", "release"]
