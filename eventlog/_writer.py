"""Group commit for the file log: plan a flush on the loop, do its I/O in a thread.

A flush takes every queued request of one partition, packs them (whole requests
only, so ``append_batch`` stays atomic) into RecordBatches of about
``max_batch_bytes``, assigns offsets from the log end, and decides where segments
roll. ``write_plans`` then does, per partition file, one ``write`` of all its batches
and one fsync; ``apply_plan`` publishes the result to readers; ``complete`` resolves
the callers' futures.

Invariant: nothing in a plan is visible (partition state, futures) until its I/O has
returned; a roll seals the old segment (fsync + index file) before the new file is
created, so a follower that sees a new segment knows the previous one is complete.
"""

from __future__ import annotations

import asyncio
import copy
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from eventlog._batch import BatchInfo, encode_batch
from eventlog._partition import Partition
from eventlog._segment import OffsetIndex, Segment, fsync_dir, segment_path, write_index

if TYPE_CHECKING:
    from eventlog.errors import EventLogError


class _Stats(Protocol):
    writes: int
    fsyncs: int
    batches: int
    records: int
    rolls: int


@dataclass
class Request:
    """One append/append_batch call waiting for its offsets."""

    partition: int
    records: list[tuple[bytes | None, bytes]]
    future: asyncio.Future[list[int]]

    def fail(self, error: EventLogError) -> None:
        if not self.future.done():
            self.future.set_exception(error)


@dataclass
class SegmentWrite:
    """The bytes of one flush that go to one segment file."""

    segment: Segment
    new: bool
    chunks: list[bytes] = field(default_factory=list)
    batches: list[tuple[int, BatchInfo]] = field(default_factory=list)
    # Set when this flush seals the segment: its complete index, to write to disk.
    seal_index: OffsetIndex | None = None


@dataclass
class FlushPlan:
    partition: Partition
    writes: list[SegmentWrite]
    results: list[tuple[Request, list[int]]]

    def complete(self) -> None:
        for request, offsets in self.results:
            if not request.future.done():
                request.future.set_result(offsets)


def _groups(requests: list[Request], max_batch_bytes: int) -> list[list[Request]]:
    """Consecutive requests packed into groups of about max_batch_bytes (never split)."""
    groups: list[list[Request]] = []
    size = 0
    for request in requests:
        weight = sum(len(v) + (len(k) if k else 0) for k, v in request.records)
        if groups and size + weight <= max_batch_bytes:
            groups[-1].append(request)
            size += weight
        else:
            groups.append([request])
            size = weight
    return groups


def _sealed_index(write: SegmentWrite) -> OffsetIndex:
    index = copy.deepcopy(write.segment.index)
    for position, info in write.batches:
        index.add(position, info)
    return index


def make_plan(
    part: Partition, requests: list[Request], limits: tuple[int, int], now_ms: int
) -> FlushPlan:
    """Encode the batches and lay them out over the active segment and any new ones."""
    segment_bytes, max_batch_bytes = limits
    offset = part.next_offset
    current = SegmentWrite(part.active, new=False)
    writes = [current]
    size = part.active.size
    results: list[tuple[Request, list[int]]] = []
    for group in _groups(requests, max_batch_bytes):
        records = [record for request in group for record in request.records]
        data = encode_batch(offset, records, now_ms)
        if size > 0 and size + len(data) > segment_bytes:
            current.seal_index = _sealed_index(current)
            fresh = Segment(
                offset,
                segment_path(part.dir, offset),
                OffsetIndex(part.active.index.interval_bytes),
                0,
                offset,
            )
            current = SegmentWrite(fresh, new=True)
            writes.append(current)
            size = 0
        current.chunks.append(data)
        current.batches.append((size, BatchInfo(offset, offset + len(records) - 1, len(data))))
        size += len(data)
        for request in group:
            count = len(request.records)
            results.append((request, list(range(offset, offset + count))))
            offset += count
    return FlushPlan(part, [w for w in writes if w.chunks or w.seal_index], results)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def write_plans(plans: list[FlushPlan], fsync_always: bool, stats: _Stats) -> None:
    """The I/O of one flush (worker thread): per file one write, then one fsync.

    The fsyncs of the different partition files run concurrently: the filesystem
    commits them in one journal transaction, where a sequential loop would pay one
    commit per dirty partition (with 50 partitions, 50x the latency).
    """
    to_sync: list[int] = []
    for plan in plans:
        part = plan.partition
        for write in plan.writes:
            if write.new:
                part.fd = os.open(
                    write.segment.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_APPEND, 0o644
                )
                fsync_dir(part.dir)
                stats.rolls += 1
            assert part.fd is not None
            if write.chunks:
                _write_all(part.fd, b"".join(write.chunks))
                stats.writes += 1
            if write.seal_index is not None:
                # Seal: data durable, index written, fd closed before the next file exists.
                os.fsync(part.fd)
                stats.fsyncs += 1
                sealed = copy.copy(write.segment)
                sealed.index = write.seal_index
                write_index(sealed)
                os.close(part.fd)
                part.fd = None
        last = plan.writes[-1] if plan.writes else None
        if last is not None and last.seal_index is None and last.chunks:
            assert part.fd is not None
            if fsync_always:
                to_sync.append(part.fd)
            else:
                part.dirty = True
        stats.batches += sum(len(w.batches) for w in plan.writes)
        stats.records += sum(len(r.records) for r, _ in plan.results)
    fdatasync_all(to_sync)
    stats.fsyncs += len(to_sync)


def fdatasync_all(fds: list[int]) -> None:
    """fdatasync every file, concurrently: the filesystem folds them into one commit."""
    if len(fds) == 1:
        os.fdatasync(fds[0])
    elif fds:
        # list() re-raises the first failure, after every fsync has been tried.
        list(_sync_pool().map(os.fdatasync, fds))


_SYNC_POOL: ThreadPoolExecutor | None = None


def _sync_pool() -> ThreadPoolExecutor:
    global _SYNC_POOL
    if _SYNC_POOL is None:
        _SYNC_POOL = ThreadPoolExecutor(max_workers=16, thread_name_prefix="eventlog-fsync")
    return _SYNC_POOL


def apply_plan(plan: FlushPlan) -> None:
    """Publish a written flush (event loop): new segments, sizes, index, log end."""
    part = plan.partition
    for request, offsets in plan.results:
        part.tail.extend(zip(offsets, (value for _key, value in request.records), strict=True))
    for write in plan.writes:
        if write.new:
            part.segments.append(write.segment)
        segment = write.segment
        for position, info in write.batches:
            segment.index.add(position, info)
            segment.size = position + info.size
            segment.next_offset = info.next_offset
        if write.seal_index is not None:
            segment.index = write.seal_index
