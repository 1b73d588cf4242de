"""On-disk segments of one file-log partition: naming, sparse offset index, scans, recovery.

A partition dir holds ``<base_offset:020>.log`` segments of Kafka RecordBatch v2 and,
for sealed segments, a Kafka-format ``.index`` (4-byte relative offset + 4-byte
position, big-endian; the offset is the last offset of the batch at that position,
as Kafka writes it). The active (last) segment's index lives in memory and is
rebuilt by the validating scan on open.

Invariant: a ``Segment``'s ``size`` covers only whole, checked batches; everything in
this module is synchronous and runs in worker threads, never on the event loop.
"""

from __future__ import annotations

import logging
import os
import struct
from bisect import bisect_right
from dataclasses import dataclass, field
from pathlib import Path

from eventlog._batch import BadBatchError, BatchInfo, check_batch, peek_size
from eventlog.errors import EventLogCorruptError

logger = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
_ENTRY = struct.Struct(">ii")
_SCAN_CHUNK = 1 << 20


def segment_path(part_dir: Path, base_offset: int) -> Path:
    return part_dir / f"{base_offset:020d}{LOG_SUFFIX}"


def list_segments(part_dir: Path) -> list[tuple[int, Path]]:
    """``(base_offset, path)`` of every ``.log`` segment in the dir, by base offset."""
    found = []
    for entry in os.scandir(part_dir):
        stem, dot, suffix = entry.name.partition(".")
        if dot and "." + suffix == LOG_SUFFIX and len(stem) == 20 and stem.isdigit():
            found.append((int(stem), Path(entry.path)))
    found.sort()
    return found


def fsync_dir(path: Path) -> None:
    """Make a created, renamed or removed dir entry durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class OffsetIndex:
    """Sparse index: parallel, strictly increasing lists of last offsets and positions."""

    interval_bytes: int
    offsets: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    bytes_since_entry: int = 0

    def entries_for(self, batches: list[tuple[int, BatchInfo]]) -> list[tuple[int, int]]:
        """The entries appending ``(position, batch)`` pairs would add (state untouched)."""
        pending = self.bytes_since_entry
        out = []
        for position, info in batches:
            # Kafka's rule: index a batch once more than interval bytes precede it.
            if pending > self.interval_bytes:
                out.append((info.last_offset, position))
                pending = 0
            pending += info.size
        return out

    def add(self, position: int, info: BatchInfo) -> None:
        if self.bytes_since_entry > self.interval_bytes:
            self.offsets.append(info.last_offset)
            self.positions.append(position)
            self.bytes_since_entry = 0
        self.bytes_since_entry += info.size

    def lookup(self, offset: int) -> int:
        """Position of a batch at or before the one holding ``offset`` (0 if none)."""
        i = bisect_right(self.offsets, offset) - 1
        return self.positions[i] if i >= 0 else 0

    def encode(self, base_offset: int) -> bytes:
        pairs = zip(self.offsets, self.positions, strict=True)
        return b"".join(_ENTRY.pack(o - base_offset, p) for o, p in pairs)


@dataclass
class Segment:
    """One ``.log`` file: ``size`` bytes of checked batches, offsets up to ``next_offset``."""

    base_offset: int
    path: Path
    index: OffsetIndex
    size: int = 0
    next_offset: int = 0

    @property
    def index_path(self) -> Path:
        return self.path.with_suffix(INDEX_SUFFIX)


@dataclass
class ScanResult:
    """Where a scan stopped: after the last good batch, and why it did not go on."""

    size: int
    next_offset: int
    # None: clean end of file. Otherwise the problem at ``size`` (torn or invalid).
    problem: str | None = None
    # The declared size of the invalid batch at ``size``, if its length field was sane.
    bad_size: int | None = None


def scan(segment: Segment, *, verify_crc: bool = True) -> ScanResult:
    """Walk whole batches from ``segment.size`` to end of file, extending the segment.

    Each good batch grows ``size``/``next_offset`` and feeds the sparse index; the
    scan stops at end of file, at a cut batch, or at the first invalid one.
    """
    with open(segment.path, "rb") as f:
        file_size = os.fstat(f.fileno()).st_size
        pos = segment.size
        while pos < file_size:
            f.seek(pos)
            chunk = f.read(min(_SCAN_CHUNK, file_size - pos))
            at = 0
            while True:
                try:
                    size = peek_size(chunk, at)
                    if size is not None and size > len(chunk) and at == 0:
                        # One batch larger than a chunk: read exactly that batch.
                        chunk = chunk + f.read(size - len(chunk))
                    info = check_batch(chunk, at, segment.next_offset, verify_crc=verify_crc)
                except BadBatchError as e:
                    return ScanResult(pos + at, segment.next_offset, e.reason, e.total_size)
                if info is None:
                    break
                segment.index.add(pos + at, info)
                segment.size = pos + at + info.size
                segment.next_offset = info.next_offset
                at += info.size
            if at == 0:
                return ScanResult(pos, segment.next_offset, "batch cut short by end of file")
            pos += at
    return ScanResult(segment.size, segment.next_offset)


def load_index(segment: Segment, file_size: int) -> bool:
    """Load a sealed segment's ``.index``; False if missing or not self-consistent."""
    try:
        data = segment.index_path.read_bytes()
    except FileNotFoundError:
        return False
    if len(data) % _ENTRY.size:
        return False
    offsets: list[int] = []
    positions: list[int] = []
    for rel, pos in _ENTRY.iter_unpack(data):
        bad_order = offsets and (rel + segment.base_offset <= offsets[-1] or pos <= positions[-1])
        if rel < 0 or not 0 <= pos < file_size or bad_order:
            return False
        offsets.append(rel + segment.base_offset)
        positions.append(pos)
    segment.index.offsets, segment.index.positions = offsets, positions
    return True


def write_index(segment: Segment) -> None:
    """Atomically (temp + fsync + rename) write a sealed segment's index file."""
    tmp = segment.index_path.with_suffix(INDEX_SUFFIX + ".tmp")
    with open(tmp, "wb") as f:
        f.write(segment.index.encode(segment.base_offset))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, segment.index_path)


def open_sealed(base_offset: int, path: Path, next_base: int, interval: int) -> Segment:
    """A segment before the last: trust its index if sane, else rebuild it from headers."""
    file_size = path.stat().st_size
    seg = Segment(base_offset, path, OffsetIndex(interval), file_size, next_base)
    if not load_index(seg, file_size):
        # Header-only walk (no CRC): sealed data is checked by CRC when it is read.
        probe = Segment(base_offset, path, OffsetIndex(interval), 0, base_offset)
        result = scan(probe, verify_crc=False)
        if result.problem is not None:
            raise EventLogCorruptError(
                f"sealed segment {path} is corrupt at byte {result.size}: {result.problem}",
                str(path),
                result.size,
            )
        seg.index = probe.index
    return seg


def _corrupt_in_middle(path: Path, result: ScanResult) -> bool:
    """True if valid batches follow the bad one: corruption in the middle, not a torn tail."""
    if result.bad_size is None:
        return False
    after = result.size + result.bad_size
    with open(path, "rb") as f:
        f.seek(after)
        head = f.read(_SCAN_CHUNK)
        try:
            size = peek_size(head, 0)
            if size is not None and size > len(head):
                head += f.read(size - len(head))
            # The next batch's base offset is unknown (the bad one's count is suspect).
            return check_batch(head, 0, None) is not None
        except BadBatchError:
            return False


def recover_last(seg: Segment, *, verify_crc: bool = True) -> int:
    """Validate the active segment from its start; truncate a torn/corrupt tail.

    Returns the number of bytes cut. Corruption followed by valid batches is not a
    torn tail (cutting it would lose acknowledged data): that raises instead.
    ``verify_crc=False`` trusts the CRCs (clean shutdown) unless the walk finds a
    problem, which is then judged with the full check.
    """
    if not verify_crc:
        probe = Segment(
            seg.base_offset, seg.path, OffsetIndex(seg.index.interval_bytes), 0, seg.base_offset
        )
        if scan(probe, verify_crc=False).problem is None:
            seg.index, seg.size, seg.next_offset = probe.index, probe.size, probe.next_offset
            return 0
    result = scan(seg, verify_crc=True)
    file_size = seg.path.stat().st_size
    if result.problem is None:
        return 0
    if _corrupt_in_middle(seg.path, result):
        raise EventLogCorruptError(
            f"{seg.path} is corrupt at byte {result.size} ({result.problem}) with valid "
            f"batches after it; refusing to truncate acknowledged data",
            str(seg.path),
            result.size,
        )
    cut = file_size - result.size
    logger.warning(
        "truncating %s at byte %d (next offset %d): %s; %d bytes dropped",
        seg.path,
        result.size,
        result.next_offset,
        result.problem,
        cut,
    )
    fd = os.open(seg.path, os.O_WRONLY)
    try:
        os.ftruncate(fd, result.size)
        os.fsync(fd)
    finally:
        os.close(fd)
    return cut
