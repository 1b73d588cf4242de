"""MetadataView: a read-only picture of the remote log metadata, as of the moment it opened.

Job: load the newest snapshot it can see, then replay each metadata partition's tail
up to the end offset seen at open, through the manager's own replay (rlmm.replay: its
codec, store and apply body), and answer listing questions from the state.

Invariants: nothing is written anywhere: the file event log is opened read-only
(the writer's LOCK is never taken, so a running sidecar keeps writing), a Kafka
event log never creates its topic and, unless configured otherwise, waits only
READ_ONLY_WAIT_MS for a broker to answer (a wrong bootstrap address fails a CLI
command or a Spark job within seconds; the sidecar keeps the event log's longer
wait for a broker starting beside it), the snapshot store is opened read-only. Every
resource opened while loading (event log, its clients, the event loop) is closed
before :func:`open_metadata_view` returns, also on error; the view itself holds only
memory. Events are applied as the manager's apply loop applies them, by the same code
(rlmm.replay): redelivered copies and illegal events are skipped (and counted), never
fatal.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import Any, Protocol, TypeVar

from eventlog import EventLog, EventLogError
from eventlog.registry import log_start_offsets, types_where
from rlmm.archive.errors import ArchiveError, MetadataLogUnavailableError
from rlmm.archive.lineage import Gap, LineageRange, gaps, lineage_ranges
from rlmm.cache import RemotePartitionMetadataStore
from rlmm.config import RlmmConfig
from rlmm.errors import ReplayGapError
from rlmm.factory import open_event_log, open_snapshot_source
from rlmm.model import (
    RemoteLogSegmentMetadata,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from rlmm.replay import MetadataReplay, ReplayStats
from rlmm.snapshotting import newest_snapshot
from snapshot import Snapshot

log = logging.getLogger(__name__)
T = TypeVar("T")
# How long a read-only view waits for the metadata cluster to answer, unless
# eventlog.init_timeout_ms (Kafka's remote.log.metadata.initialization.retry.max.timeout.ms)
# says otherwise.
READ_ONLY_WAIT_MS = 5_000


class SnapshotSource(Protocol):
    """Where the view finds the newest snapshot (a local dir today; S3 can plug in)."""

    def load_latest(self) -> Snapshot | None: ...


def snapshot_source(config: RlmmConfig) -> SnapshotSource | None:
    """The configured snapshot store, opened read-only; None when snapshots are off.

    The one place that knows where snapshots live: rlmm.snapshotting picks the newest
    published snapshot (local dir or S3, any owner) that the log can continue from.
    """
    if not config.snapshot.get("enabled", True):
        return None
    return _PublishedSnapshots(config)


class _PublishedSnapshots:
    def __init__(self, config: RlmmConfig) -> None:
        self._config = config

    def load_latest(self) -> Snapshot | None:
        # Partitions whose log no longer starts at 0 (retention) must be covered by the
        # snapshot; the others can be replayed from 0 if it leaves them out.
        starts = log_start_offsets(self._config.event_log_options())
        needed = [p for p, start in starts.items() if start > 0]
        store = open_snapshot_source(self._config)
        try:
            found = newest_snapshot(self._config, store, partitions=needed, log_starts=starts)
        finally:
            store.close()
        return None if found is None else found.snapshot


def open_read_only_event_log(config: RlmmConfig) -> EventLog:
    """The configured event log, set up to read only (not started)."""
    kind = config.event_log_type
    options = config.event_log_backend().read_only_options(
        config.eventlog, wait_ms=READ_ONLY_WAIT_MS
    )
    if options is None:
        readable = " or ".join(
            repr(k) for k in types_where(lambda c: c.shared or c.directory_option is not None)
        )
        raise ArchiveError(
            f"eventlog.type = {kind!r} cannot be viewed from another process"
            f" (use {readable}: a log in a directory or on a cluster)"
        )
    return open_event_log(dataclasses.replace(config, eventlog=MappingProxyType(options)))


@dataclass
class ViewStats(ReplayStats):
    """What loading the view did (for operators and tests): the replay's counters and
    the applied offsets of the snapshot it started from."""

    snapshot_applied_offsets: dict[int, int] = field(default_factory=dict)

    @property
    def replayed_events(self) -> int:
        """The events applied (``applied_events``, the view's name for it)."""
        return self.applied_events


class MetadataView:
    """Every topic-partition's remote segments, as of the end offsets seen at open."""

    def __init__(
        self,
        store: RemotePartitionMetadataStore,
        applied_offsets: dict[int, int],
        partition_count: int,
        stats: ViewStats | None = None,
    ) -> None:
        self._store = store
        self._applied = dict(applied_offsets)
        self.partition_count = partition_count
        self.stats = stats or ViewStats()
        self._closed = False

    # ---- queries --------------------------------------------------------------------

    @property
    def applied_offsets(self) -> dict[int, int]:
        """Metadata partition -> last applied offset (-1: nothing in it)."""
        return dict(self._applied)

    def topic_partitions(self) -> list[TopicIdPartition]:
        """Every topic-partition the metadata knows, sorted by (topic, partition)."""
        return sorted(self._store.partitions(), key=lambda tp: (tp.topic, tp.partition))

    def find(self, topic: str, partition: int) -> TopicIdPartition | None:
        """The known topic-partition with this name and number (None if unknown)."""
        for tp in self._store.partitions():
            if tp.topic == topic and tp.partition == partition:
                return tp
        return None

    def segments(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """Every live segment of ``tp`` in any state, sorted by start offset."""
        cache = self._store.caches.get(tp)
        return [] if cache is None else cache.list_remote_log_segments()

    def lineage_ranges(self, tp: TopicIdPartition) -> list[LineageRange]:
        """The offsets each lineage segment serves (see rlmm.archive.lineage)."""
        cache = self._store.caches.get(tp)
        return [] if cache is None else lineage_ranges(cache)

    def lineage(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """COPY_SEGMENT_FINISHED segments along the leader-epoch lineage (none superseded)."""
        out: list[RemoteLogSegmentMetadata] = []
        for r in self.lineage_ranges(tp):
            if not out or out[-1] is not r.segment:
                out.append(r.segment)
        return out

    def gaps(self, tp: TopicIdPartition) -> list[Gap]:
        """Offsets missing between lineage segments (data loss)."""
        return gaps(self.lineage_ranges(tp))

    def fingerprint(self) -> object:
        """Order-independent picture of the whole state (for equality checks)."""
        return self._store.fingerprint()

    def delete_state(self, tp: TopicIdPartition) -> RemotePartitionDeleteMetadata | None:
        return self._store.delete_states.get(tp)

    # ---- lifecycle ------------------------------------------------------------------

    def close(self) -> None:
        """Drop the state (idempotent); the view holds no open resources."""
        self._closed = True

    def __enter__(self) -> MetadataView:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


# ---- loading ------------------------------------------------------------------------


def eventlog_source(config: RlmmConfig) -> str:
    """Where the ``[eventlog]`` settings came from, for a message."""
    if config.source == "defaults":
        return "[eventlog] settings, no config file"
    return f"[eventlog] of {config.source}"


async def load_metadata_view(config: RlmmConfig) -> MetadataView:
    """Build a view (async form of :func:`open_metadata_view`)."""
    source = snapshot_source(config)
    snap = await asyncio.to_thread(source.load_latest) if source is not None else None
    event_log = open_read_only_event_log(config)
    n = event_log.partition_count
    stats = ViewStats()
    replay = MetadataReplay(n, stats)
    if snap is not None and replay.restore(snap):
        stats.snapshot_applied_offsets = dict(snap.applied_offsets)
    timeout = float(config.manager["ready_timeout_s"])
    try:
        async with asyncio.timeout(timeout):
            await event_log.start()
            ends = await event_log.end_offsets(range(n))
            await replay.replay_to(event_log, ends)
    except ReplayGapError as e:
        raise ArchiveError(str(e)) from e
    except EventLogError as e:
        raise MetadataLogUnavailableError(
            f"cannot read the remote log metadata from {event_log!r} ({eventlog_source(config)}):"
            f" {e}"
        ) from e
    except TimeoutError as e:
        raise MetadataLogUnavailableError(
            f"reading the remote log metadata from {event_log!r} ({eventlog_source(config)})"
            f" took longer than manager.ready_timeout_s = {timeout}s"
        ) from e
    finally:
        await event_log.close()
    return MetadataView(replay.store, replay.applied, n, stats)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on a private event loop (a thread if one is running)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    result: list[T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(coro))
        except BaseException as e:  # handed to the caller's thread
            error.append(e)

    thread = threading.Thread(target=target, name="rlmm-archive-view")
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


def open_metadata_view(config: RlmmConfig) -> MetadataView:
    """Load a read-only view: newest snapshot + replay of the event log's tail.

    Synchronous (runs its own event loop); closes everything it opened before it
    returns. Errors: ArchiveError (and rlmm ConfigError for bad settings).
    """
    return _run(load_metadata_view(config))


__all__ = [
    "MetadataView",
    "SnapshotSource",
    "ViewStats",
    "eventlog_source",
    "load_metadata_view",
    "open_metadata_view",
    "open_read_only_event_log",
    "snapshot_source",
]
