"""Kafka per-partition state files: leader-epoch-checkpoint, producer snapshot, partition.metadata.

Job: parse and encode
- ``leader-epoch-checkpoint``: text, a version line (0), an entry count, then one
  ``"<epoch> <start offset>"`` line per entry (Kafka's CheckpointFile);
- ``<offset:020>.snapshot``: ProducerStateManager's snapshot, version int16 (1), CRC-32C
  uint32 over everything after it, then an int32-counted array of entries (producer id
  int64, epoch int16, last sequence int32, last offset int64, offset delta int32,
  timestamp int64, coordinator epoch int32, current txn first offset int64);
- ``partition.metadata``: text ``version: 0`` / ``topic_id: <Kafka base64 uuid>``.

Invariant: a parser either returns the whole file's content or raises SegmentFormatError
naming the file and the byte (or line) where it went wrong; a count is checked against
the entries there before any is built, and every value against its Kafka type's
range; encoders write exactly what
Kafka writes, so a parse of an encode is the identity.
"""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import crc32c

from remote.errors import SegmentFormatError
from rlmm.model import kafka_uuid_from_str, kafka_uuid_to_str

LEADER_EPOCH_CHECKPOINT_VERSION = 0
PRODUCER_SNAPSHOT_VERSION = 1
PARTITION_METADATA_VERSION = 0
_SNAPSHOT_HEADER = struct.Struct(">hIi")  # version, crc, entry count
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_START = 6  # Kafka's PRODUCER_ENTRIES_OFFSET: the CRC covers the count and entries
_INT32_MAX = 2**31 - 1  # Kafka's leader epochs are int32, offsets int64
_INT64_MAX = 2**63 - 1

Data = bytes | bytearray | memoryview | str | os.PathLike[str]


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """A leader epoch and the first offset written in it."""

    epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class ProducerStateEntry:
    """One producer's state in a producer snapshot (Kafka's field order and names)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    version: int
    topic_id: uuid.UUID


def _load(data: Data) -> tuple[bytes, str]:
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data), "<buffer>"
    name = os.fspath(data)
    try:
        return Path(name).read_bytes(), name
    except OSError as e:
        raise SegmentFormatError(f"{name}: cannot read: {e}", name, 0) from e


def _text_lines(raw: bytes, name: str) -> list[str]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SegmentFormatError(
            f"{name}: not UTF-8 text at byte position {e.start}", name, e.start
        ) from e
    return text.splitlines()


def _line_position(lines: list[str], index: int) -> int:
    return sum(len(line.encode()) + 1 for line in lines[:index])


def read_leader_epoch_checkpoint(data: Data, *, name: str | None = None) -> list[EpochEntry]:
    """Entries of a ``leader-epoch-checkpoint`` (epochs and start offsets increasing)."""
    raw, src = _load(data)
    name = name or src
    lines = _text_lines(raw, name)

    def bad(index: int, why: str) -> SegmentFormatError:
        pos = _line_position(lines, index)
        return SegmentFormatError(
            f"{name}: {why} on line {index + 1} (byte position {pos})", name, pos
        )

    if len(lines) < 2:
        raise bad(len(lines), "missing version or entry count")
    if lines[0].strip() != str(LEADER_EPOCH_CHECKPOINT_VERSION):
        raise bad(0, f"unsupported leader epoch checkpoint version {lines[0]!r}")
    try:
        count = int(lines[1].strip())
    except ValueError as e:
        raise bad(1, f"entry count {lines[1]!r} is not an integer") from e
    body = [line for line in lines[2:] if line.strip()]
    if count < 0 or len(body) != count:
        raise bad(1, f"entry count {count} but {len(body)} entries follow")
    out: list[EpochEntry] = []
    for i, line in enumerate(body, start=2):
        parts = line.split()
        try:
            if len(parts) != 2:
                raise ValueError(line)
            entry = EpochEntry(int(parts[0]), int(parts[1]))
        except ValueError as e:
            raise bad(i, f"entry {line!r} is not '<epoch> <start offset>'") from e
        if not (0 <= entry.epoch <= _INT32_MAX and 0 <= entry.start_offset <= _INT64_MAX):
            raise bad(i, f"entry {line:.60} is out of range (epoch int32, offset int64, >= 0)")
        if out and (entry.epoch <= out[-1].epoch or entry.start_offset < out[-1].start_offset):
            raise bad(i, f"entry {line!r} is not after the previous entry")
        out.append(entry)
    return out


def encode_leader_epoch_checkpoint(entries: Iterable[EpochEntry]) -> bytes:
    items = list(entries)
    lines = [str(LEADER_EPOCH_CHECKPOINT_VERSION), str(len(items))]
    lines += [f"{e.epoch} {e.start_offset}" for e in items]
    return ("\n".join(lines) + "\n").encode()


def read_producer_snapshot(data: Data, *, name: str | None = None) -> list[ProducerStateEntry]:
    """Entries of a producer state snapshot, its CRC-32C checked."""
    raw, src = _load(data)
    name = name or src
    if len(raw) < _SNAPSHOT_HEADER.size:
        raise SegmentFormatError(
            f"{name}: producer snapshot of {len(raw)} bytes is shorter than its "
            f"{_SNAPSHOT_HEADER.size}-byte header (byte position 0)",
            name,
            0,
        )
    version, crc, count = _SNAPSHOT_HEADER.unpack_from(raw)
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise SegmentFormatError(
            f"{name}: unsupported producer snapshot version {version} at byte position 0", name, 0
        )
    actual = crc32c.crc32c(raw[_CRC_START:])
    if actual != crc:
        raise SegmentFormatError(
            f"{name}: producer snapshot CRC-32C mismatch (stored {crc:#010x}, computed "
            f"{actual:#010x}) at byte position 2",
            name,
            2,
        )
    expected = _SNAPSHOT_HEADER.size + count * _SNAPSHOT_ENTRY.size
    if count < 0 or len(raw) != expected:
        raise SegmentFormatError(
            f"{name}: producer snapshot declares {count} entries ({expected} bytes) but holds "
            f"{len(raw)} bytes (byte position {_SNAPSHOT_HEADER.size})",
            name,
            _SNAPSHOT_HEADER.size,
        )
    return [
        ProducerStateEntry(
            *_SNAPSHOT_ENTRY.unpack_from(raw, _SNAPSHOT_HEADER.size + i * _SNAPSHOT_ENTRY.size)
        )
        for i in range(count)
    ]


def encode_producer_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    items = list(entries)
    body = struct.pack(">i", len(items)) + b"".join(
        _SNAPSHOT_ENTRY.pack(
            e.producer_id,
            e.producer_epoch,
            e.last_sequence,
            e.last_offset,
            e.offset_delta,
            e.timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
        for e in items
    )
    return struct.pack(">hI", PRODUCER_SNAPSHOT_VERSION, crc32c.crc32c(body)) + body


def read_partition_metadata(data: Data, *, name: str | None = None) -> PartitionMetadata:
    """The version and topic id of a ``partition.metadata`` file."""
    raw, src = _load(data)
    name = name or src
    lines = _text_lines(raw, name)
    fields: dict[str, str] = {}
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep:
            pos = _line_position(lines, i)
            raise SegmentFormatError(
                f"{name}: line {i + 1} {line!r} is not 'key: value' (byte position {pos})",
                name,
                pos,
            )
        fields[key.strip()] = value.strip()
    try:
        version = int(fields["version"])
        topic_id = kafka_uuid_from_str(fields["topic_id"])
    except (KeyError, ValueError) as e:
        raise SegmentFormatError(
            f"{name}: missing or invalid version / topic_id ({e}) (byte position 0)", name, 0
        ) from e
    if version != PARTITION_METADATA_VERSION:
        raise SegmentFormatError(
            f"{name}: unsupported partition.metadata version {version}", name, 0
        )
    return PartitionMetadata(version, topic_id)


def encode_partition_metadata(topic_id: uuid.UUID) -> bytes:
    # Byte-for-byte what the broker wrote in the real fixture (no trailing newline).
    return (
        f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {kafka_uuid_to_str(topic_id)}".encode()
    )


def leader_epochs_in_range(
    entries: Iterable[EpochEntry], start_offset: int, end_offset_exclusive: int
) -> dict[int, int]:
    """Epoch → first offset for the offsets [start, end), the first clipped to ``start``.

    This is the slice Kafka's RemoteLogManager stores as ``segment_leader_epochs``.
    """
    out: dict[int, int] = {}
    for e in entries:
        if e.start_offset >= end_offset_exclusive:
            break
        if e.start_offset <= start_offset:
            out = {e.epoch: start_offset}  # a later entry still ≤ start replaces it
        else:
            out[e.epoch] = e.start_offset
    return out


__all__ = [
    "EpochEntry",
    "PartitionMetadata",
    "ProducerStateEntry",
    "encode_leader_epoch_checkpoint",
    "encode_partition_metadata",
    "encode_producer_snapshot",
    "leader_epochs_in_range",
    "read_leader_epoch_checkpoint",
    "read_partition_metadata",
    "read_producer_snapshot",
]
