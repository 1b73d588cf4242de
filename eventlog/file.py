"""FileEventLog: the embedded event log, Kafka-format segments in a local directory.

Layout (like a Kafka data dir, readable by ``kafka-dump-log.sh``)::

    <dir>/LOCK                                   flock'ed by the one writer process
    <dir>/eventlog.json                          format version + partition count
    <dir>/.clean-shutdown                        the last writer closed cleanly
    <dir>/__remote_log_metadata-<p>/<base:020>.log     RecordBatch v2, CRC-32C
    <dir>/__remote_log_metadata-<p>/<base:020>.index   sparse index, sealed segments
    <dir>/retention/<owner>.json                 retention claims (eventlog._retention)

The first three are ``eventlog._log_dir``'s; a partition's segments are
``eventlog._partition``'s and ``eventlog._segment``'s.

Appends go through an accumulator: callers queue a request and await a future; one
writer task takes everything queued, builds one RecordBatch per partition, and does
one write and one fsync per partition file in a worker thread (group commit), then
completes the futures and wakes followers.

Retention: the writer deletes whole sealed segments that lie entirely below the
floor every registered owner claims (``register_retention``), oldest first, at a
safe point (on start and after each claim this process registers, holding the I/O
lock). A partition's log start is its first segment's base offset; a read below it
raises OffsetBeforeLogStartError naming the partition, both offsets and the owners'
snapshots to start from.

Invariant: an offset is handed back, and becomes visible to readers of this process,
only once its batch is written and (``fsync="always"``) fsynced; so every offset a
caller or reader has seen survives a crash, and offsets stay dense from the log
start; the segments left after any crash, even one during deletion, are a
contiguous range ending at the log end, and never start above the lowest claimed
floor.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import warnings
from bisect import bisect_right
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from eventlog._log_dir import (
    META_FILE,
    check_meta,
    lock_writer,
    mark_clean_shutdown,
    stored_start_offsets,
    take_clean_mark,
)
from eventlog._partition import (
    Partition,
    follow,
    open_for_write,
    open_read_only,
)
from eventlog._reader import read_chunk
from eventlog._records import check_key, check_offset, check_values, to_bytes
from eventlog._retention import (
    ClaimSet,
    RetentionClaim,
    RetentionRegistry,
    delete_segments,
    remove_orphan_indexes,
)
from eventlog._writer import (
    FlushPlan,
    Request,
    apply_plan,
    fdatasync_all,
    make_plan,
    write_plans,
)
from eventlog.errors import (
    EventLogClosedError,
    EventLogConfigError,
    EventLogReadOnlyError,
    EventLogStorageError,
    InvalidRecordError,
    OffsetBeforeLogStartError,
)
from eventlog.log import EventLog

logger = logging.getLogger(__name__)

MiB = 1 << 20
# One request is one RecordBatch (atomicity); Kafka's batch Length field is an int32.
MAX_REQUEST_BYTES = 1 << 30
FsyncPolicy = Literal["always", "interval"]


@dataclass
class FileEventLogStats:
    """Counters (monotonic over the life of one open log)."""

    flushes: int = 0
    writes: int = 0
    fsyncs: int = 0
    batches: int = 0
    records: int = 0
    rolls: int = 0
    # Repairs made on open: torn/corrupt tail bytes cut, segments cut or removed.
    truncated_bytes: int = 0
    truncated_segments: int = 0
    # Retention: whole segments (and their bytes) deleted below the claimed floors.
    retention_deleted_segments: int = 0
    retention_deleted_bytes: int = 0


@dataclass
class _Options:
    fsync: FsyncPolicy
    fsync_interval_s: float
    segment_bytes: int
    index_interval_bytes: int
    max_batch_bytes: int
    group_commit: bool
    poll_interval_s: float
    read_chunk_bytes: int = field(default=MiB)


def _positive_int(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise EventLogConfigError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


class FileEventLog(EventLog):
    """A partitioned, durable log in ``dir``; one writer process, any number of readers."""

    directory_option: ClassVar[str | None] = "dir"

    def __init__(
        self,
        dir: str | os.PathLike[str],
        partitions: int,
        *,
        fsync: str = "always",
        fsync_interval_ms: int = 1000,
        segment_bytes: int = 4 * MiB,
        index_interval_bytes: int = 4096,
        max_batch_bytes: int = MiB,
        group_commit: bool = True,
        read_only: bool = False,
        poll_interval_ms: int = 100,
    ) -> None:
        self._partitions = _positive_int("partitions", partitions)
        if fsync not in ("always", "interval"):
            raise EventLogConfigError(f"fsync must be 'always' or 'interval', got {fsync!r}")
        self._options = _Options(
            fsync="always" if fsync == "always" else "interval",
            fsync_interval_s=_positive_int("fsync_interval_ms", fsync_interval_ms) / 1000,
            segment_bytes=_positive_int("segment_bytes", segment_bytes, 1024),
            index_interval_bytes=_positive_int("index_interval_bytes", index_interval_bytes),
            max_batch_bytes=_positive_int("max_batch_bytes", max_batch_bytes),
            group_commit=bool(group_commit),
            poll_interval_s=_positive_int("poll_interval_ms", poll_interval_ms) / 1000,
        )
        self.dir = Path(dir)
        self.read_only = bool(read_only)
        self.stats = FileEventLogStats()
        self._parts: list[Partition] = []
        self._lock_fd: int | None = None
        self._started = False
        self._closed = False
        self._start_lock = asyncio.Lock()
        self._io_lock = asyncio.Lock()
        self._pending: list[Request] = []
        self._wakeup = asyncio.Event()
        self._closing = asyncio.Event()
        self._closed_event = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._refresh_locks: list[asyncio.Lock] = []
        self._failure: EventLogStorageError | None = None
        self.retention = RetentionRegistry(self.dir)

    @classmethod
    def read_only_options(cls, options: Mapping[str, Any], *, wait_ms: int) -> dict[str, Any]:
        """Read only: no writer lock, nothing created or deleted."""
        return {**options, "read_only": True}

    @classmethod
    def log_start_offsets(cls, options: Mapping[str, Any]) -> dict[int, int]:
        """From the log directory's listing (``stored_start_offsets``)."""
        return stored_start_offsets(options["dir"], int(options["partitions"]))

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else f"fsync={self._options.fsync}"
        return f"FileEventLog({str(self.dir)!r}, partitions={self._partitions}, {mode})"

    def __del__(self) -> None:
        if getattr(self, "_started", False) and not getattr(self, "_closed", True):
            warnings.warn(f"unclosed {self!r}", ResourceWarning, stacklevel=1, source=self)

    @property
    def partition_count(self) -> int:
        return self._partitions

    async def __aenter__(self) -> FileEventLog:
        # Narrows the ABC's return type so ``async with`` callers see ``stats``.
        await self.start()
        return self

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Lock the dir (writer), check the partition count, recover every partition."""
        async with self._start_lock:
            if self._closed:
                raise EventLogClosedError(f"{self!r} is closed")
            if self._started:
                return
            await asyncio.to_thread(self._open_sync)
            self._refresh_locks = [asyncio.Lock() for _ in self._parts]
            self._started = True
            if not self.read_only:
                self._tasks.append(asyncio.create_task(self._write_loop()))
                if self._options.fsync == "interval":
                    self._tasks.append(asyncio.create_task(self._sync_loop()))
        if not self.read_only:
            # Claims registered while the log was closed (or a deletion a crash cut short).
            await self.enforce_retention()

    def _open_sync(self) -> None:
        if self.dir.exists() and not self.dir.is_dir():
            raise EventLogConfigError(f"event log dir {self.dir} exists and is not a directory")
        if self.read_only:
            if not (self.dir / META_FILE).is_file():
                raise EventLogConfigError(f"no event log in {self.dir} (missing {META_FILE})")
        else:
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise EventLogConfigError(f"cannot create event log dir {self.dir}: {e}") from e
            self._lock_fd = lock_writer(self.dir)
        try:
            check_meta(self.dir, self._partitions)
            interval = self._options.index_interval_bytes
            # After a clean close every tail was fsynced whole: like Kafka, skip the CRC
            # pass over the active segments (a structural walk still finds their ends).
            # The marker goes before the first append can happen, so a crash after this
            # open is recovered in full next time.
            clean = not self.read_only and take_clean_mark(self.dir)
            for p in range(self._partitions):
                if self.read_only:
                    self._parts.append(open_read_only(self.dir, p, interval))
                    continue
                part, repaired = open_for_write(self.dir, p, interval, verify_crc=not clean)
                remove_orphan_indexes(part.dir, {seg.base_offset for seg in part.segments})
                self._parts.append(part)
                self.stats.truncated_bytes += repaired.truncated_bytes
                self.stats.truncated_segments += repaired.truncated_segments
        except BaseException as e:
            self._release()
            self._parts = []
            if isinstance(e, OSError):
                raise EventLogStorageError(f"cannot open event log in {self.dir}: {e}") from e
            raise

    def _release(self) -> None:
        for part in self._parts:
            if part.fd is not None:
                os.close(part.fd)
                part.fd = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the fd drops the flock
            self._lock_fd = None

    async def close(self) -> None:
        """Drain queued appends, fsync, unlock; pending readers end. Idempotent."""
        async with self._start_lock:
            if self._closed:
                # A concurrent close is draining: return once it is done.
                await self._closed_event.wait()
                return
            self._closed = True
            if not self._started:
                self._closed_event.set()
                return
        self._closing.set()
        self._wakeup.set()
        for task in self._tasks:
            await task
        if self._options.fsync == "interval" and not self.read_only:
            await self._sync_dirty()
        async with self._io_lock:
            if not self.read_only and self._failure is None and self._parts:
                await asyncio.to_thread(mark_clean_shutdown, self.dir)
            self._release()
        for part in self._parts:
            part.notifier.notify_all()
        self._closed_event.set()

    async def _ensure_open(self, partition: int) -> None:
        if not self._started and not self._closed:
            await self.start()
        if self._closed:
            raise EventLogClosedError(f"{self!r} is closed (partition {partition})")

    # -- writes ----------------------------------------------------------------------

    async def append(self, partition: int, value: bytes, key: bytes | None = None) -> int:
        self._check_partition(partition)
        record = (check_key(key, partition), to_bytes(value, "value", partition))
        offsets = await self._submit(partition, [record])
        return offsets[0]

    async def append_batch(self, partition: int, values: Sequence[bytes]) -> list[int]:
        self._check_partition(partition)
        records: list[tuple[bytes | None, bytes]] = [
            (None, v) for v in check_values(values, partition)
        ]
        if not records:
            await self._ensure_open(partition)
            return []
        return await self._submit(partition, records)

    async def _submit(self, partition: int, records: list[tuple[bytes | None, bytes]]) -> list[int]:
        if self.read_only:
            raise EventLogReadOnlyError(
                f"{self.dir} is open read-only: cannot append to partition {partition}"
            )
        await self._ensure_open(partition)
        if self._closing.is_set():
            raise EventLogClosedError(f"{self!r} is closing (partition {partition})")
        if self._failure is not None:
            raise self._failure
        total = sum(len(v) + (len(k) if k else 0) for k, v in records)
        if total > MAX_REQUEST_BYTES:
            raise InvalidRecordError(
                f"append of {total} bytes to partition {partition} exceeds the "
                f"{MAX_REQUEST_BYTES}-byte cap of one RecordBatch"
            )
        request = Request(partition, records, asyncio.get_running_loop().create_future())
        self._pending.append(request)
        self._wakeup.set()
        return await request.future

    async def _write_loop(self) -> None:
        """The one writer: take what is queued, write + fsync it, complete the futures."""
        while True:
            if not self._pending:
                if self._closing.is_set():
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            if self._options.group_commit:
                taken, self._pending = self._pending, []
            else:
                taken, self._pending = self._pending[:1], self._pending[1:]
            if self._failure is not None:
                for request in taken:
                    request.fail(self._failure)
                continue
            await self._flush(taken)

    async def _flush(self, requests: list[Request]) -> None:
        now_ms = int(time.time() * 1000)
        by_partition: dict[int, list[Request]] = {}
        for request in requests:
            by_partition.setdefault(request.partition, []).append(request)
        plans: list[FlushPlan] = []
        try:
            for p, batch in by_partition.items():
                plans.append(make_plan(self._parts[p], batch, self._options_for_plan(), now_ms))
            async with self._io_lock:
                await asyncio.to_thread(
                    write_plans, plans, self._options.fsync == "always", self.stats
                )
        except Exception as e:
            # The files may now end in a partial write: stop writing (readers keep the
            # committed view); reopening recovers to the last whole batch.
            failure = EventLogStorageError(f"write to event log {self.dir} failed: {e}")
            failure.__cause__ = e
            self._failure = failure
            logger.error("%s", failure)
            for request in requests:
                request.fail(failure)
            return
        self.stats.flushes += 1
        for plan in plans:
            apply_plan(plan)
            plan.partition.notifier.notify_all()
        for plan in plans:
            plan.complete()

    def _options_for_plan(self) -> tuple[int, int]:
        # A batch should fit in a segment, so small segments also mean small batches.
        segment_bytes = self._options.segment_bytes
        return segment_bytes, min(self._options.max_batch_bytes, segment_bytes)

    async def _sync_loop(self) -> None:
        """fsync="interval": fsync dirty partition files every interval."""
        while not self._closing.is_set():
            try:
                await asyncio.wait_for(self._closing.wait(), self._options.fsync_interval_s)
            except TimeoutError:
                await self._sync_dirty()

    async def _sync_dirty(self) -> None:
        async with self._io_lock:
            dirty = [p for p in self._parts if p.dirty and p.fd is not None]
            if not dirty:
                return
            try:
                await asyncio.to_thread(fdatasync_all, [p.fd for p in dirty if p.fd is not None])
            except OSError as e:
                self._failure = EventLogStorageError(f"fsync in event log {self.dir} failed: {e}")
                logger.error("%s", self._failure)
                return
            for part in dirty:
                part.dirty = False
            self.stats.fsyncs += len(dirty)

    # -- retention -------------------------------------------------------------------

    async def register_retention(
        self, owner: str, floors: dict[int, int], start_from: object = None
    ) -> RetentionClaim:
        """Record that ``owner`` no longer needs offsets below ``floors[p]`` of partition p.

        A partition missing from ``floors`` stays fully needed by ``owner``. The writer
        then deletes what no registered owner needs any more (see the module doc).
        ``start_from`` is JSON describing where the owner would start instead (its
        snapshots); readers below the log start are pointed at it.
        """
        for p in floors:
            self._check_partition(p)
        claim = await asyncio.to_thread(self.retention.register, owner, floors, start_from)
        if self._started and not self.read_only and not self._closed:
            await self.enforce_retention()
        return claim

    async def unregister_retention(self, owner: str) -> bool:
        """Forget ``owner``'s claim; False if it had none."""
        return await asyncio.to_thread(self.retention.unregister, owner)

    async def retention_claims(self) -> ClaimSet:
        return await asyncio.to_thread(self.retention.load)

    async def enforce_retention(self) -> int:
        """Delete whole sealed segments below every owner's floor; the number deleted.

        Only the writer deletes (a read-only log returns 0). The active segment is
        never deleted, so a partition always keeps its log end.
        """
        if self.read_only or not self._started or self._closed:
            return 0
        claims = await asyncio.to_thread(self.retention.load)
        if not claims.claims:
            return 0
        deleted = 0
        async with self._io_lock:
            for part in self._parts:
                floor = claims.floor(part.number)
                segments = part.segments
                cut = 0
                # Segment i holds offsets [base_i, base_i+1): deletable iff base_i+1 <= floor.
                while cut + 1 < len(segments) and segments[cut + 1].base_offset <= floor:
                    cut += 1
                if not cut:
                    continue
                doomed = segments[:cut]
                # A new list first: readers re-seek (and see the new log start) before any
                # file they might open disappears.
                part.segments = segments[cut:]
                try:
                    freed = await asyncio.to_thread(delete_segments, part.dir, doomed)
                except OSError as e:
                    logger.warning("retention in %s stopped: %s", part.dir, e)
                    continue
                deleted += cut
                self.stats.retention_deleted_segments += cut
                self.stats.retention_deleted_bytes += freed
                logger.info(
                    "retention: deleted %d segment(s) of partition %d below offset %d"
                    " (%d bytes); the log now starts at %d",
                    cut,
                    part.number,
                    floor,
                    freed,
                    part.segments[0].base_offset,
                )
        return deleted

    async def start_offsets(self, partitions: Iterable[int]) -> dict[int, int]:
        """Log start offset (first offset still stored) of each partition."""
        return {p: part.segments[0].base_offset for p, part in (await self._current(partitions))}

    async def _before_start(self, partition: int, offset: int) -> OffsetBeforeLogStartError:
        claims = await asyncio.to_thread(self.retention.load)
        start = self._parts[partition].segments[0].base_offset
        return OffsetBeforeLogStartError(partition, offset, start, claims.start_from())

    # -- reads -----------------------------------------------------------------------

    async def end_offsets(self, partitions: Iterable[int]) -> dict[int, int]:
        return {p: part.next_offset for p, part in (await self._current(partitions))}

    async def _current(self, partitions: Iterable[int]) -> list[tuple[int, Partition]]:
        """The given partitions, checked, opened and (read-only) refreshed from disk."""
        wanted = list(partitions)
        for p in wanted:
            self._check_partition(p)
        for p in wanted:
            await self._ensure_open(p)
            if self.read_only:
                await self._refresh(p)
        return [(p, self._parts[p]) for p in wanted]

    async def _refresh(self, partition: int) -> None:
        async with self._refresh_locks[partition]:
            part = self._parts[partition]
            before = part.next_offset
            part.segments = await asyncio.to_thread(
                follow, self.dir, part, self._options.index_interval_bytes
            )
            if part.next_offset != before:
                part.notifier.notify_all()

    async def _wait_for(self, partition: int, offset: int) -> None:
        """Return once ``offset`` may be readable (or the log closed)."""
        part = self._parts[partition]
        if not self.read_only:
            await part.notifier.wait()
            return
        # Another process writes: polling file sizes is the only signal there is.
        waiter = part.notifier.wait()
        await asyncio.wait([waiter], timeout=self._options.poll_interval_s)
        if not self._closed and part.next_offset <= offset:
            await self._refresh(partition)

    async def read_batches(
        self, partition: int, start_offset: int = 0
    ) -> AsyncIterator[list[tuple[int, bytes]]]:
        self._check_partition(partition)
        offset = check_offset(start_offset, partition)
        await self._ensure_open(partition)
        part = self._parts[partition]
        seg_i = -1
        position = 0
        # Base offset the next batch must carry; unknown right after an index seek.
        expect: int | None = None
        head = part.segments[0].base_offset
        while not self._closed:
            if offset < part.segments[0].base_offset:
                raise await self._before_start(partition, offset)
            if part.segments[0].base_offset != head:
                # Retention dropped head segments: indexes into the list moved.
                head = part.segments[0].base_offset
                seg_i, expect = -1, None
            if offset >= part.next_offset:
                await self._wait_for(partition, offset)
                continue
            cached = part.tail_from(offset)
            if cached:
                offset = cached[-1][0] + 1
                seg_i, expect = -1, None  # the next disk read seeks through the index
                yield cached
                continue
            if seg_i >= len(part.segments):
                seg_i, expect = -1, None  # a follower saw its segment list shrink
            if seg_i < 0:
                seg_i = bisect_right(part.bases, offset) - 1
                position = part.segments[seg_i].index.lookup(offset)
            segment = part.segments[seg_i]
            if position >= segment.size:
                if seg_i + 1 < len(part.segments):
                    seg_i, position = seg_i + 1, 0
                else:
                    await self._wait_for(partition, offset)
                continue
            try:
                records, position, expect = await asyncio.to_thread(
                    read_chunk, segment, position, offset, expect, self._options.read_chunk_bytes
                )
            except FileNotFoundError as e:
                # Deleted by retention while we were about to read it: the checks at the
                # top of the loop now see the new log start (a follower refreshes first).
                if self.read_only:
                    await self._refresh(partition)
                elif offset >= part.segments[0].base_offset:
                    raise EventLogStorageError(
                        f"segment {segment.path} of partition {partition} vanished: {e}"
                    ) from e
                seg_i, expect = -1, None
                continue
            if records:
                offset = records[-1][0] + 1
                yield records
