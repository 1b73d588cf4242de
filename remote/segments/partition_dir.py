"""A Kafka partition directory (``<topic>-<partition>/``) on local disk, read-only.

Job: list a partition's segments (``<base:020>.log`` with ``.index``, ``.timeindex``,
``.txnindex``), its producer snapshots, its ``leader-epoch-checkpoint`` and
``partition.metadata``, and summarise a segment the way Kafka's RemoteLogManager
describes it before copying: base and end offset, max timestamp, size, the leader
epoch slice, whether the transaction index is empty, the producer snapshot that goes
with it (the one at the next segment's base offset) and, from a full scan, the
smallest record timestamp.

Invariant: nothing here writes; every summary is derived from the files themselves
(batches and indexes), and anything unreadable raises SegmentFormatError naming the
file and byte position.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from remote.errors import SegmentFormatError
from remote.segments.batch import RecordBatchReader
from remote.segments.checkpoints import (
    EpochEntry,
    leader_epochs_in_range,
    read_leader_epoch_checkpoint,
    read_partition_metadata,
)
from remote.segments.indexes import (
    last_offset_index_entry,
    read_time_index,
    read_txn_index,
)
from remote.segments.timestamps import SmallestTimestamp
from rlmm.model import TopicIdPartition

LOG_SUFFIX = ".log"
OFFSET_INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"

# Kafka's UnifiedLog.parseTopicPartitionName: "<topic>-<p>" optionally followed by
# ".<32 hex>-delete|-future|-stray" for dirs being deleted or moved.
_DIR_NAME = re.compile(
    r"^(?P<topic>.+)-(?P<partition>\d+)(?:\.[0-9a-f]{32}-(?:delete|future|stray))?$"
)
_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_OFFSET_FILE = re.compile(r"^(?P<offset>\d{20})\.(?P<suffix>[a-z]+)$")


def offset_file_name(offset: int, suffix: str) -> str:
    """Kafka's file name for an offset: 20 zero-padded digits then the suffix."""
    return f"{offset:020d}{suffix}"


def parse_partition_dir_name(name: str) -> tuple[str, int]:
    """Topic and partition of a Kafka partition dir name such as ``orders-3``."""
    m = _DIR_NAME.match(name)
    if m is None or not _TOPIC.match(m.group("topic")):
        raise SegmentFormatError(
            f"{name!r} is not a Kafka partition dir name '<topic>-<partition>'", name
        )
    return m.group("topic"), int(m.group("partition"))


@dataclass(frozen=True, slots=True)
class LogSegmentSummary:
    """A local log segment's facts, read from its files (``LogSegmentFiles.summary``):
    what Kafka's RemoteLogManager needs to describe it (offsets inclusive). Not the
    cache's ``rlmm.cache.SegmentSummary``, a remote segment's row in the metadata cache."""

    base_offset: int
    end_offset: int
    max_timestamp_ms: int
    size_in_bytes: int
    segment_leader_epochs: dict[int, int]
    txn_index_empty: bool
    producer_snapshot_path: Path | None
    next_offset: int
    # The smallest record timestamp (remote.segments.timestamps), known from a full
    # scan only; None when the summary did not read every batch.
    smallest_timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class LogSegmentFiles:
    """The files of one segment; index paths are where Kafka puts them (they may be absent)."""

    base_offset: int
    log_path: Path
    next_base_offset: int | None = None
    partition_dir: PartitionDir | None = field(default=None, compare=False, repr=False)

    @property
    def offset_index_path(self) -> Path:
        return self.log_path.with_suffix(OFFSET_INDEX_SUFFIX)

    @property
    def time_index_path(self) -> Path:
        return self.log_path.with_suffix(TIME_INDEX_SUFFIX)

    @property
    def txn_index_path(self) -> Path:
        return self.log_path.with_suffix(TXN_INDEX_SUFFIX)

    @property
    def size_in_bytes(self) -> int:
        return _size(self.log_path)

    def txn_index_empty(self) -> bool:
        """True when there is no ``.txnindex`` or it holds no aborted transaction."""
        return _size(self.txn_index_path) == 0

    def end_offset(self) -> int | None:
        """Last offset of the last batch (None for an empty segment).

        Starts scanning at the last offset index entry, as Kafka's readNextOffset does.
        """
        last = None
        for h in RecordBatchReader(self.log_path, start_position=self._last_indexed_position()):
            last = h
        return None if last is None else last.last_offset

    def _last_indexed_position(self) -> int:
        try:
            last = last_offset_index_entry(self.offset_index_path, self.base_offset)
        except SegmentFormatError:
            if not self.offset_index_path.exists():
                return 0
            raise
        return 0 if last is None else last.position

    def summary(
        self,
        leader_epochs: list[EpochEntry] | None = None,
        *,
        full_scan: bool = False,
        verify_crc: bool = False,
    ) -> LogSegmentSummary:
        """Describe this segment; ``full_scan`` reads every batch instead of trusting the indexes.

        The quick path scans only the batches after the last offset index entry and
        takes the max timestamp from the time index's last entry and those batches.
        The full scan also decodes each batch's record timestamps for the smallest one
        (in the same pass as the CRC check: the batch bytes are already in memory).
        Meant for rolled segments: a torn tail raises SegmentFormatError here.
        """
        if leader_epochs is None:
            leader_epochs = self.partition_dir.leader_epochs() if self.partition_dir else []
        start = 0 if full_scan else self._last_indexed_position()
        reader = RecordBatchReader(
            self.log_path, start_position=start, verify_crc=verify_crc, allow_truncated_tail=False
        )
        end_offset = -1
        max_ts = -1
        smallest = SmallestTimestamp(str(self.log_path)) if full_scan else None
        for h, data in reader.batches():
            end_offset = h.last_offset
            max_ts = max(max_ts, h.max_timestamp)
            if smallest is not None:
                smallest.add(h, data)
        if end_offset < 0:
            raise SegmentFormatError(
                f"{self.log_path}: segment holds no record batch", str(self.log_path), 0
            )
        if not full_scan and self.time_index_path.exists():
            times = read_time_index(self.time_index_path, self.base_offset)
            if times:
                max_ts = max(max_ts, times[-1].timestamp)
        next_offset = end_offset + 1
        # Kafka copies the snapshot taken at the roll, named after the next segment's base.
        snapshot_offset = (
            self.next_base_offset if self.next_base_offset is not None else next_offset
        )
        snapshot = self.log_path.with_name(offset_file_name(snapshot_offset, SNAPSHOT_SUFFIX))
        epochs = leader_epochs_in_range(leader_epochs, self.base_offset, next_offset)
        if not epochs:
            raise SegmentFormatError(
                f"{self.log_path}: no leader epoch covers offsets {self.base_offset}..{end_offset}",
                str(self.log_path),
                0,
            )
        txn_empty = self.txn_index_empty() or not read_txn_index(self.txn_index_path)
        return LogSegmentSummary(
            base_offset=self.base_offset,
            end_offset=end_offset,
            max_timestamp_ms=max_ts,
            size_in_bytes=self.size_in_bytes,
            segment_leader_epochs=epochs,
            txn_index_empty=txn_empty,
            producer_snapshot_path=snapshot if snapshot.exists() else None,
            next_offset=next_offset,
            smallest_timestamp_ms=None if smallest is None else smallest.value,
        )


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
    except OSError as e:
        raise SegmentFormatError(f"{path}: cannot stat: {e}", str(path)) from e


class PartitionDir:
    """A Kafka partition directory; ``topic`` and ``partition`` come from its name.

    Give ``topic`` and ``partition`` explicitly for a directory not named
    ``<topic>-<partition>`` (a copy, a test fixture).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        topic: str | None = None,
        partition: int | None = None,
    ) -> None:
        self.path = Path(path)
        if not self.path.is_dir():
            raise SegmentFormatError(f"{self.path}: not a directory", str(self.path))
        if topic is None or partition is None:
            parsed_topic, parsed_partition = parse_partition_dir_name(self.path.name)
            topic = parsed_topic if topic is None else topic
            partition = parsed_partition if partition is None else partition
        self.topic: str = topic
        self.partition: int = partition

    def __repr__(self) -> str:
        return f"PartitionDir({str(self.path)!r})"

    @property
    def topic_id(self) -> uuid.UUID | None:
        """The topic id from ``partition.metadata`` (None when the file is absent)."""
        p = self.path / PARTITION_METADATA
        return read_partition_metadata(p).topic_id if p.exists() else None

    def topic_id_partition(self) -> TopicIdPartition:
        topic_id = self.topic_id
        if topic_id is None:
            raise SegmentFormatError(
                f"{self.path}: no {PARTITION_METADATA}, topic id unknown", str(self.path)
            )
        return TopicIdPartition(topic_id, self.topic, self.partition)

    def leader_epochs(self) -> list[EpochEntry]:
        p = self.path / LEADER_EPOCH_CHECKPOINT
        return read_leader_epoch_checkpoint(p) if p.exists() else []

    def _offsets(self, suffix: str) -> Iterator[tuple[int, os.DirEntry[str]]]:
        for entry in os.scandir(self.path):
            m = _OFFSET_FILE.match(entry.name)
            if m and "." + m.group("suffix") == suffix and entry.is_file():
                yield int(m.group("offset")), entry

    def _offset_files(self, suffix: str) -> dict[int, Path]:
        return dict(sorted((offset, Path(e.path)) for offset, e in self._offsets(suffix)))

    def producer_snapshots(self) -> dict[int, Path]:
        """Producer snapshot files by offset, ascending."""
        return self._offset_files(SNAPSHOT_SUFFIX)

    def log_base_offsets(self) -> list[int]:
        """The base offsets of every segment's ``.log``, ascending (no Path per file)."""
        return self.offsets_of(LOG_SUFFIX)[LOG_SUFFIX]

    def offsets_of(self, *suffixes: str) -> dict[str, list[int]]:
        """The offsets of the files of each suffix (``.log``, ``.snapshot``...), each
        ascending, from one listing of the directory (no Path per file)."""
        found: dict[str, list[int]] = {suffix: [] for suffix in suffixes}
        for entry in os.scandir(self.path):
            m = _OFFSET_FILE.match(entry.name)
            if m is None:
                continue
            offsets = found.get("." + m.group("suffix"))
            if offsets is not None and entry.is_file():
                offsets.append(int(m.group("offset")))
        for offsets in found.values():
            offsets.sort()
        return found

    def segments(self) -> list[LogSegmentFiles]:
        """Every segment, ascending by base offset (the last one is the active segment)."""
        logs = self._offset_files(LOG_SUFFIX)
        bases = list(logs)
        return [
            LogSegmentFiles(base, logs[base], bases[i + 1] if i + 1 < len(bases) else None, self)
            for i, base in enumerate(bases)
        ]

    def segment(self, base_offset: int) -> LogSegmentFiles:
        for s in self.segments():
            if s.base_offset == base_offset:
                return s
        raise SegmentFormatError(
            f"{self.path}: no segment with base offset {base_offset}", str(self.path)
        )


__all__ = [
    "LogSegmentFiles",
    "LogSegmentSummary",
    "PartitionDir",
    "offset_file_name",
    "parse_partition_dir_name",
]
