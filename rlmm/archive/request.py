"""What to read (ReadRequest, on the driver) and one unit of reading (Slice, on executors).

Offsets follow Spark's Kafka source: a start is inclusive, an end exclusive;
``EARLIEST`` (-2) and ``LATEST`` (-1) stand for the archive's first offset and the
offset after its last, per partition. Timestamps are milliseconds since the epoch: a
starting timestamp means "from the first offset whose record timestamp is >= it",
an ending timestamp "up to (excluding) the first offset whose timestamp is >= it",
as Kafka's ListOffsets answers them.

Invariant: a ReadRequest is validated when built (a bad field raises ArchiveError
naming it); a Slice is a small immutable picklable value holding everything its
reader needs (segment metadata, byte range, offset range, aborted transactions,
remote storage options), and nothing that needs the event log.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from rlmm.archive.errors import ArchiveError
from rlmm.archive.where import RowBounds
from rlmm.model import RemoteLogSegmentMetadata, kafka_uuid_to_str

EARLIEST = -2
LATEST = -1
READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
PartitionKey = tuple[str, int]  # (topic, partition)
OffsetSpec = Mapping[PartitionKey, int]
TimestampSpec = int | Mapping[PartitionKey, int]


def _frozen(name: str, value: object) -> OffsetSpec | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ArchiveError(f"{name} must be a mapping of (topic, partition) to a number")
    out: dict[PartitionKey, int] = {}
    for key, v in value.items():
        if (
            not isinstance(key, tuple)
            or len(key) != 2
            or not isinstance(key[0], str)
            or isinstance(key[1], bool)
            or not isinstance(key[1], int)
        ):
            raise ArchiveError(f"{name}: key {key!r} is not a (topic, partition) pair")
        if isinstance(v, bool) or not isinstance(v, int):
            raise ArchiveError(f"{name}: value {v!r} for {key[0]}-{key[1]} is not an int")
        out[key] = v
    return MappingProxyType(out)


@dataclass(frozen=True)
class ReadRequest:
    """Which partitions and which records of them to read (Spark's Kafka-source options)."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: Mapping[str, tuple[int, ...]] | None = None
    starting_offsets: OffsetSpec | None = None
    ending_offsets: OffsetSpec | None = None
    starting_timestamp_ms: TimestampSpec | None = None
    ending_timestamp_ms: TimestampSpec | None = None
    # Spark's startingOffsetsByTimestampStrategy: no offset matches -> "error" or "latest".
    starting_timestamp_strategy: str = "error"
    fail_on_data_loss: bool = True
    max_slice_bytes: int = 128 * 1024 * 1024
    isolation_level: str = READ_UNCOMMITTED
    include_headers: bool = False
    # The query's filter as bounds (pushed down by Spark): only pruning, never an
    # error; the offset and timestamp options above are checked as if it were absent.
    where: RowBounds | None = None

    def __post_init__(self) -> None:
        if self.where is not None and not isinstance(self.where, RowBounds):
            raise ArchiveError(f"where must be a RowBounds, got {self.where!r}")
        given = [
            name
            for name, value in (
                ("topics", self.topics),
                ("pattern", self.pattern),
                ("partitions", self.partitions),
            )
            if value
        ]
        if len(given) != 1:
            raise ArchiveError(
                "give exactly one of topics, pattern or partitions"
                + (f" (got {', '.join(given)})" if given else "")
            )
        if isinstance(self.topics, str):
            raise ArchiveError(
                f"topics must be a sequence of names, got the string {self.topics!r}"
            )
        object.__setattr__(self, "topics", tuple(self.topics))
        if self.partitions is not None:
            frozen = {}
            for topic, ps in self.partitions.items():
                if (
                    not isinstance(topic, str)
                    or not ps
                    or any(isinstance(p, bool) or not isinstance(p, int) or p < 0 for p in ps)
                ):
                    raise ArchiveError(f"partitions: {topic!r}: {ps!r} is not a list of partitions")
                frozen[topic] = tuple(ps)
            object.__setattr__(self, "partitions", MappingProxyType(frozen))
        for name in ("starting_offsets", "ending_offsets"):
            object.__setattr__(self, name, _frozen(name, getattr(self, name)))
        for name in ("starting_timestamp_ms", "ending_timestamp_ms"):
            value = getattr(self, name)
            if isinstance(value, Mapping):
                object.__setattr__(self, name, _frozen(name, value))
            elif value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ArchiveError(f"{name} must be an int (ms) or a per-partition mapping")
        if self.starting_offsets is not None and self.starting_timestamp_ms is not None:
            raise ArchiveError("give starting_offsets or starting_timestamp_ms, not both")
        if self.ending_offsets is not None and self.ending_timestamp_ms is not None:
            raise ArchiveError("give ending_offsets or ending_timestamp_ms, not both")
        for key, v in (self.starting_offsets or {}).items():
            if v == LATEST or v < EARLIEST:
                raise ArchiveError(
                    f"starting_offsets: {v} for {key[0]}-{key[1]} is not allowed in a batch read"
                    " (use an offset >= 0 or -2 for earliest)"
                )
        for key, v in (self.ending_offsets or {}).items():
            if v == EARLIEST or v < LATEST:
                raise ArchiveError(
                    f"ending_offsets: {v} for {key[0]}-{key[1]} is not allowed in a batch read"
                    " (use an offset >= 0 or -1 for latest)"
                )
        if self.isolation_level not in (READ_UNCOMMITTED, READ_COMMITTED):
            raise ArchiveError(
                f"isolation_level must be {READ_UNCOMMITTED!r} or {READ_COMMITTED!r},"
                f" got {self.isolation_level!r}"
            )
        if self.starting_timestamp_strategy not in ("error", "latest"):
            raise ArchiveError(
                "starting_timestamp_strategy must be 'error' or 'latest',"
                f" got {self.starting_timestamp_strategy!r}"
            )
        if (
            isinstance(self.max_slice_bytes, bool)
            or not isinstance(self.max_slice_bytes, int)
            or self.max_slice_bytes < 1
        ):
            raise ArchiveError(
                f"max_slice_bytes must be a positive int, got {self.max_slice_bytes!r}"
            )


@dataclass(frozen=True)
class Slice:
    """Records ``[from_offset, until_offset)`` of one segment, in bytes
    ``[start_position, end_position)`` of its ``.log`` object."""

    topic: str
    partition: int
    segment: RemoteLogSegmentMetadata
    start_position: int
    end_position: int
    from_offset: int
    until_offset: int
    remote_options: Mapping[str, Any]
    isolation_level: str = READ_UNCOMMITTED
    # (producer id, first offset, last offset) of each aborted transaction that may
    # hold records of this slice (read_committed only).
    aborted_transactions: tuple[tuple[int, int, int], ...] = ()
    include_headers: bool = False
    fail_on_data_loss: bool = True
    # The query's timestamp bounds (ms, inclusive): rows outside are not returned
    # (the query drops them anyway), and batches wholly before are not decoded.
    min_timestamp_ms: int | None = None
    max_timestamp_ms: int | None = None
    # rlmm's side index (a directory or s3:// URL), where the reader records the
    # smallest timestamp of this slice's bytes when it saw all their records; None
    # when the segment's smallest timestamp is already known (or the index is off).
    side_index: str | None = None

    @property
    def size_in_bytes(self) -> int:
        return self.end_position - self.start_position

    def __str__(self) -> str:
        return (
            f"{self.topic}-{self.partition} offsets [{self.from_offset}, {self.until_offset})"
            f" bytes [{self.start_position}, {self.end_position}) of segment"
            f" {kafka_uuid_to_str(self.segment.remote_log_segment_id.id)}"
        )


__all__ = [
    "EARLIEST",
    "LATEST",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "ReadRequest",
    "Slice",
]
