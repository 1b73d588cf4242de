"""One file-log partition's in-memory state, and opening it from disk.

``open_for_write`` recovers the partition (validates the active segment, truncates a
torn tail, drops empty trailing segments); ``open_read_only``, ``refresh`` and
``follow`` (a read-only follower's refresh, past the head segments retention deleted)
only look, never change a byte. All of them run in worker threads.

Invariant: ``segments[-1].next_offset`` is the partition's log end offset and every
byte below each segment's ``size`` is a whole, checked batch; readers never read past
``size``. Only the event loop mutates a live ``Partition`` (threads work on copies or
on state the loop is not looking at yet).
"""

from __future__ import annotations

import copy
import logging
import os
from collections import deque
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from eventlog._notify import Notifier
from eventlog._retention import first_base
from eventlog._segment import (
    OffsetIndex,
    Segment,
    fsync_dir,
    list_segments,
    open_sealed,
    recover_last,
    scan,
    segment_path,
)

logger = logging.getLogger(__name__)

TOPIC = "__remote_log_metadata"


def partition_dir(root: Path, partition: int) -> Path:
    return root / f"{TOPIC}-{partition}"


# A follower at the log end lags by about one flush group; one that lags more reads
# the disk as any reader does. Each kept record costs ~330 bytes with its tuple and
# offset, so 512 per partition bounds the tail at ~8 MiB over 50 partitions (4,096
# filled ~65 MiB on a busy broker, and grew the sidecar's RSS for hours as it filled).
TAIL_RECORDS = 512


@dataclass
class Partition:
    """Segments (by base offset), the writer's fd on the active one, and its followers."""

    number: int
    dir: Path
    segments: list[Segment]
    notifier: Notifier = field(default_factory=Notifier)
    fd: int | None = None
    dirty: bool = False
    # The newest acknowledged records (dense offsets), kept by the writer so that
    # readers in its process that follow the log end are served from memory instead
    # of re-reading what was just written (one thread hop + CRC check per wake-up).
    tail: deque[tuple[int, bytes]] = field(default_factory=lambda: deque(maxlen=TAIL_RECORDS))

    def tail_from(self, offset: int) -> list[tuple[int, bytes]] | None:
        """Records from ``offset`` to the log end if the tail still holds ``offset``."""
        tail = self.tail
        if not tail or offset < tail[0][0] or offset > tail[-1][0]:
            return None
        return list(islice(tail, offset - tail[0][0], None))

    @property
    def next_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def bases(self) -> list[int]:
        return [s.base_offset for s in self.segments]


@dataclass
class Recovery:
    """What opening a partition for write had to repair."""

    truncated_bytes: int = 0
    truncated_segments: int = 0


def _open_sealed_all(listing: list[tuple[int, Path]], interval: int) -> list[Segment]:
    return [
        open_sealed(base, path, listing[i + 1][0], interval)
        for i, (base, path) in enumerate(listing[:-1])
    ]


def open_for_write(
    root: Path, number: int, interval: int, *, verify_crc: bool = True
) -> tuple[Partition, Recovery]:
    """Open (creating if needed) a partition as its writer, repairing the tail.

    ``verify_crc=False`` (after a clean shutdown) walks the active segment's batch
    headers without checking CRCs; anything odd found that way gets the full check.
    """
    pdir = partition_dir(root, number)
    pdir.mkdir(exist_ok=True)
    for stray in pdir.glob("*.tmp"):
        stray.unlink()  # a half-written index from a crash during a roll
    listing = list_segments(pdir)
    if not listing:
        path = segment_path(pdir, 0)
        path.touch()
        fsync_dir(pdir)
        fsync_dir(root)
        listing = [(0, path)]
    repaired = Recovery()
    while True:
        base, path = listing[-1]
        active = Segment(base, path, OffsetIndex(interval), 0, base)
        cut = recover_last(active, verify_crc=verify_crc)
        if cut:
            repaired.truncated_bytes += cut
            repaired.truncated_segments += 1
        if active.size or len(listing) == 1:
            break
        # An empty trailing segment (crash right after a roll): drop it so the one
        # before becomes active again and gets validated like any tail.
        logger.warning("removing empty trailing segment %s", path)
        path.unlink()
        active.index_path.unlink(missing_ok=True)
        fsync_dir(pdir)
        listing.pop()
    # The active segment's index lives in memory until the segment is sealed.
    active.index_path.unlink(missing_ok=True)
    segments = [*_open_sealed_all(listing, interval), active]
    part = Partition(number, pdir, segments)
    part.fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    return part, repaired


def open_read_only(root: Path, number: int, interval: int) -> Partition:
    """Look at a partition another process may be writing; a cut tail is left alone."""
    pdir = partition_dir(root, number)
    listing = list_segments(pdir) if pdir.is_dir() else []
    if not listing:
        # The writer has not created it yet: an empty partition until refresh sees it.
        empty = Segment(0, segment_path(pdir, 0), OffsetIndex(interval), 0, 0)
        return Partition(number, pdir, [empty])
    base, path = listing[-1]
    last = Segment(base, path, OffsetIndex(interval), 0, base)
    scan(last)
    return Partition(number, pdir, [*_open_sealed_all(listing, interval), last])


def refresh(part: Partition, interval: int) -> list[Segment]:
    """Segments as the writer has them now (read-only followers): a new list to install.

    Lists the dir before scanning the last known segment, so that when a newer segment
    exists the scanned one is already complete (the writer seals before it rolls).
    """
    listing = list_segments(part.dir) if part.dir.is_dir() else []
    segments = list(part.segments)
    # A restarted writer drops an empty trailing segment and appends to the one before.
    while len(segments) > 1 and not segments[-1].path.exists():
        segments.pop()
    last = copy.deepcopy(segments[-1])
    if last.path.exists():
        scan(last)
    segments[-1] = last
    for base, path in listing:
        if base > last.base_offset:
            fresh = Segment(base, path, OffsetIndex(interval), 0, base)
            scan(fresh)
            segments.append(fresh)
    return segments


def follow(root: Path, part: Partition, interval: int) -> list[Segment]:
    """``refresh``, after dropping the head segments the writer's retention deleted."""
    first = first_base(part.dir)
    if first is not None and part.segments[0].base_offset < first:
        kept = [seg for seg in part.segments if seg.base_offset >= first]
        if not kept:
            # Everything this follower knew is gone: look at the partition afresh.
            return open_read_only(root, part.number, interval).segments
        part = Partition(part.number, part.dir, kept)
    return refresh(part, interval)
