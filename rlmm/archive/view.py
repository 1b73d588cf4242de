"""MetadataView: a read-only picture of the remote log metadata, as of the moment it opened.

Job: load the newest snapshot it can see, then replay each metadata partition's tail
up to the end offset seen at open, applying events to a RemotePartitionMetadataStore
(the manager's own store and codec), and answer listing questions from it.

Invariants: nothing is written anywhere: the file event log is opened read-only
(the writer's LOCK is never taken, so a running sidecar keeps writing), a Kafka
event log never creates its topic and, unless configured otherwise, waits only
READ_ONLY_WAIT_MS for a broker to answer (a wrong bootstrap address fails a CLI
command or a Spark job within seconds; the sidecar keeps the event log's longer
wait for a broker starting beside it), the snapshot store is opened read-only. Every
resource opened while loading (event log, its clients, the event loop) is closed
before :func:`open_metadata_view` returns, also on error; the view itself holds only
memory. Events are applied exactly as the manager's apply loop applies them:
redelivered copies and illegal events are skipped (and counted), never fatal.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import Any, Protocol, TypeVar

from eventlog import EventLog, EventLogError
from eventlog.registry import backend, log_start_offsets
from rlmm.archive.errors import ArchiveError, MetadataLogUnavailableError
from rlmm.archive.lineage import Gap, LineageRange, gaps, lineage_ranges
from rlmm.cache import RemotePartitionMetadataStore
from rlmm.codec import decode
from rlmm.config import RlmmConfig
from rlmm.errors import CodecError, RemoteStorageError
from rlmm.factory import open_event_log
from rlmm.model import (
    RemoteLogSegmentMetadata,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from rlmm.partitioning import metadata_partition_for
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
        found = newest_snapshot(self._config, partitions=needed, log_starts=starts)
        return None if found is None else found.snapshot


def open_read_only_event_log(config: RlmmConfig) -> EventLog:
    """The configured event log, set up to read only (not started)."""
    kind = config.eventlog.get("type", "file")
    options = backend(kind).read_only_options(config.eventlog, wait_ms=READ_ONLY_WAIT_MS)
    if options is None:
        raise ArchiveError(
            f"eventlog.type = {kind!r} cannot be viewed from another process"
            " (use 'file' or 'kafka')"
        )
    return open_event_log(dataclasses.replace(config, eventlog=MappingProxyType(options)))


@dataclass
class ViewStats:
    """What loading the view did (for operators and tests)."""

    restored_from_snapshot: bool = False
    snapshot_applied_offsets: dict[int, int] = field(default_factory=dict)
    replayed_events: int = 0
    skipped_undecodable: int = 0
    skipped_invalid: int = 0
    skipped_duplicates: int = 0
    full_replays: int = 0  # metadata partitions replayed from 0 despite the snapshot


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

    def fingerprint(self) -> Any:
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


def _apply(store: RemotePartitionMetadataStore, stats: ViewStats, p: int, o: int, v: bytes) -> None:
    try:
        event = decode(v)
    except CodecError as e:
        stats.skipped_undecodable += 1
        log.warning("metadata partition %d offset %d: skipped undecodable record: %s", p, o, e)
        return
    if store.is_redelivery(event):
        stats.skipped_duplicates += 1
        return
    try:
        store.apply(event)
    except RemoteStorageError as e:
        stats.skipped_invalid += 1
        log.warning("metadata partition %d offset %d: skipped illegal event: %s", p, o, e)
        return
    stats.replayed_events += 1


async def _replay_partition(
    event_log: EventLog,
    store: RemotePartitionMetadataStore,
    stats: ViewStats,
    p: int,
    start: int,
    end: int,
) -> int:
    """Apply offsets [start, end) of metadata partition ``p``; the last offset applied."""
    last = start - 1
    batches = event_log.read_batches(p, start)
    async with contextlib.aclosing(batches):  # type: ignore[type-var]
        async for batch in batches:
            if last == start - 1 and batch and batch[0][0] > start:
                # Events the replay needs are gone (log retention): the state would be
                # silently incomplete, so refuse (a newer snapshot would cover them).
                raise ArchiveError(
                    f"metadata partition {p}: the event log starts at offset {batch[0][0]}"
                    f" but the replay needs offsets from {start} (deleted by retention?);"
                    " no snapshot covers them"
                )
            for offset, value in batch:
                if offset >= end:
                    return last
                _apply(store, stats, p, offset, value)
                last = offset
            if last >= end - 1:
                return last
    return last


def eventlog_source(config: RlmmConfig) -> str:
    """Where the ``[eventlog]`` settings came from, for a message."""
    if config.source == "defaults":
        return "[eventlog] settings, no config file"
    return f"[eventlog] of {config.source}"


def _other_than(p: int, n: int) -> Callable[[TopicIdPartition], bool]:
    return lambda tp: metadata_partition_for(tp, n) != p


async def load_metadata_view(config: RlmmConfig) -> MetadataView:
    """Build a view (async form of :func:`open_metadata_view`)."""
    source = snapshot_source(config)
    snap = await asyncio.to_thread(source.load_latest) if source is not None else None
    event_log = open_read_only_event_log(config)
    n = event_log.partition_count
    store = RemotePartitionMetadataStore()
    stats = ViewStats()
    applied: dict[int, int] = {}
    if snap is not None and snap.partition_count != n:
        log.warning(
            "ignoring snapshot for %d metadata partitions (the log has %d): full replay",
            snap.partition_count,
            n,
        )
        snap = None
    if snap is not None:
        store.load_state(snap.state)
        applied.update(snap.applied_offsets)
        stats.restored_from_snapshot = True
        stats.snapshot_applied_offsets = dict(snap.applied_offsets)
    timeout = float(config.manager["ready_timeout_s"])
    try:
        async with asyncio.timeout(timeout):
            await event_log.start()
            ends = await event_log.end_offsets(range(n))
            for p in range(n):
                if applied.get(p, -1) > ends[p] - 1:
                    # The snapshot saw events the log no longer has: trust the log.
                    log.warning(
                        "snapshot of metadata partition %d is at offset %d but the log ends"
                        " at %d: replaying the partition from offset 0",
                        p,
                        applied[p],
                        ends[p] - 1,
                    )
                    store.drop(_other_than(p, n))
                    applied.pop(p)
                    stats.full_replays += 1
            todo = [p for p in range(n) if applied.get(p, -1) + 1 < ends[p]]
            results = await asyncio.gather(
                *(
                    _replay_partition(event_log, store, stats, p, applied.get(p, -1) + 1, ends[p])
                    for p in todo
                )
            )
            for p, last in zip(todo, results, strict=True):
                applied[p] = last
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
    for p in range(n):
        applied.setdefault(p, -1)
    return MetadataView(store, applied, n, stats)


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
