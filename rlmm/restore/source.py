"""A source partition's plan as steps for the restore's writer: archived batches to send
as they are, records to re-encode, and where each slice ends.

Job: read each slice's data batches whole (the archive's read_committed reader chooses
them: aborted and control batches never come out) and decide, batch by batch, whether
it can go to the target unchanged but for the producer's fields (``Passthrough``) or
must be decoded and its records appended to batches of the producer's own
(``Records``, the rows of one or more consecutive batches).

Invariants: steps come in offset order and hold each record of the plan once;
``passthrough_refusal`` lets a batch through only when the broker accepts it from a
producer and it holds exactly the records the per-record path would write: magic 2,
CreateTime, no attribute but the codec (and the transactional bit, restamped), offsets
deltas 0..n-1, every offset inside the slice, at most ``max_bytes``. Decoding happens
here, in the reader's thread, never on the event loop.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Generator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from remote.segments.batch import (
    COMPRESSION_CODEC_MASK,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    RecordBatchHeader,
)
from rlmm.archive import Slice
from rlmm.archive.reader import decode_batches, read_slice_batches
from rlmm.restore.plan import PartitionPlan

# offset, key, value, CreateTime ms, timestamp type, headers
Row = tuple[int, bytes | None, bytes | None, int, int, list[tuple[str, bytes | None]]]

# Why a batch was re-encoded (the report counts each).
PARTITIONER = "partitioner"  # murmur2 spreads a batch's records over partitions
BOUNDARY = "range boundary"  # records outside the slice (range ends, a resume point)
LOG_APPEND_TIME = "LogAppendTime"  # the broker would keep the attribute's meaning
OFFSET_GAPS = "offset gaps"  # compacted: Kafka refuses inner offsets that are not 0..n-1
TOO_LARGE = "too large"  # above the target's max.message.bytes (or the writer's cap)
ATTRIBUTES = "attributes"  # magic 0/1, or a flag (delete horizon) a producer never sets

_PASSABLE_ATTRIBUTES = COMPRESSION_CODEC_MASK | TRANSACTIONAL_FLAG_MASK
_CHUNK_BYTES = 1 << 20  # archived bytes per step list handed to the writer
_DECODE_RECORDS = 8192  # records decoded at once (the archive reader's build size)


@dataclass(frozen=True)
class Passthrough:
    """An archived batch, whole (its bytes copied out of the read buffer)."""

    header: RecordBatchHeader
    data: bytes


@dataclass(frozen=True)
class Records:
    """The slice's records of consecutive batches that cannot pass through."""

    rows: list[Row]
    reasons: Counter[str]  # one count per archived batch


@dataclass(frozen=True)
class SliceEnd:
    """Every offset of the slice below ``until_offset`` has been handed out."""

    until_offset: int
    size_in_bytes: int


Step = Passthrough | Records | SliceEnd


def passthrough_refusal(header: RecordBatchHeader, piece: Slice, max_bytes: int) -> str | None:
    """Why ``header``'s batch cannot be sent as it is, or None when it can."""
    if header.magic != 2 or header.attributes & ~_PASSABLE_ATTRIBUTES & ~TIMESTAMP_TYPE_MASK:
        return ATTRIBUTES
    if header.attributes & TIMESTAMP_TYPE_MASK:
        return LOG_APPEND_TIME
    if header.base_offset < piece.from_offset or header.last_offset >= piece.until_offset:
        return BOUNDARY
    # Offsets in a batch only grow, so n records over n offsets are deltas 0..n-1.
    if header.record_count != header.last_offset - header.base_offset + 1:
        return OFFSET_GAPS
    if header.size_in_bytes > max_bytes:
        return TOO_LARGE
    return None


def partition_steps(
    p: PartitionPlan, *, passthrough: bool, max_bytes: int
) -> Generator[list[Step], None, None]:
    """The plan's steps, in lists of about a MiB of archived bytes (close it when done)."""
    for piece in p.slices:
        out: list[Step] = []
        size = 0
        held: list[tuple[RecordBatchHeader, memoryview]] = []  # to decode, in order
        records = 0
        reasons: Counter[str] = Counter()
        for header, data in read_slice_batches(piece):
            why = passthrough_refusal(header, piece, max_bytes) if passthrough else PARTITIONER
            if why is None:
                if held:
                    out.append(_decoded(piece, held, reasons))
                    records = 0
                out.append(Passthrough(header, bytes(data)))
            else:
                held.append((header, data))
                reasons[why] += 1
                records += max(header.record_count, 1)
                if records >= _DECODE_RECORDS:
                    out.append(_decoded(piece, held, reasons))
                    records = 0
            size += header.size_in_bytes
            if size >= _CHUNK_BYTES:
                if held:
                    out.append(_decoded(piece, held, reasons))
                    records = 0
                yield out
                out, size = [], 0
        if held:
            out.append(_decoded(piece, held, reasons))
        out.append(SliceEnd(piece.until_offset, piece.size_in_bytes))
        yield out


def _decoded(
    piece: Slice, held: list[tuple[RecordBatchHeader, memoryview]], reasons: Counter[str]
) -> Records:
    """The records of the held batches; empties ``held`` and ``reasons``."""
    found = Records(_rows(decode_batches(piece, held)), reasons.copy())
    held.clear()
    reasons.clear()
    return found


def _rows(batch: pa.RecordBatch) -> list[Row]:
    millis = pc.divide(batch.column("timestamp").cast(pa.int64()), 1000).to_pylist()
    headers = [
        [] if hs is None else [(h["key"], h["value"]) for h in hs]
        for hs in batch.column("headers").to_pylist()
    ]
    return list(
        zip(
            batch.column("offset").to_pylist(),
            batch.column("key").to_pylist(),
            batch.column("value").to_pylist(),
            millis,
            batch.column("timestampType").to_pylist(),
            headers,
            strict=True,
        )
    )


__all__ = [
    "Passthrough",
    "Records",
    "Row",
    "SliceEnd",
    "Step",
    "partition_steps",
    "passthrough_refusal",
]
