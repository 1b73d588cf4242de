"""read_slice: fetch one slice's byte range and decode it into Arrow record batches.

Job: on an executor, rebuild (once per process) the remote storage manager from the
slice's options, fetch ``[start_position, end_position)`` of the segment's ``.log``
object (a ranged GET on S3), walk its batches and decode the wanted records
column-wise into ``pyarrow.RecordBatch``es of Spark's Kafka schema.

Invariants: only records with offsets in ``[from_offset, until_offset)`` come out,
in offset order, each once; control batches never do; under read_committed a
transactional batch of an aborted transaction never does (Kafka's consumer rule:
the slice's aborted transactions become "aborting" once a batch reaches their first
offset, and stop being so at their producer's ABORT marker); with the slice's
timestamp bounds (a query's filter), only records inside them come out. A corrupt
batch raises CorruptBatchError, a segment deleted since planning DataLossError
(with fail_on_data_loss false, both are logged and skipped). The fetched stream is
closed whatever happens. A slice that names a side index records there the smallest
timestamp of its bytes only when the read ran to its end and looked at every record
of every batch in them (contiguous, inside the slice's offsets, none skipped).
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator
from typing import BinaryIO

import pyarrow as pa
from aiokafka.record.default_records import DefaultRecordBatch

from remote.errors import RemoteIntegrityError, SegmentFormatError
from remote.segments.batch import RecordBatchHeader
from remote.segments.compressed import bounded_batch
from remote.segments.timestamps import SmallestTimestamp
from remote.side_index import Entry
from rlmm.archive.batches import iter_batches
from rlmm.archive.columns import ColumnBuilder
from rlmm.archive.errors import CorruptBatchError, DataLossError
from rlmm.archive.request import READ_COMMITTED, Slice
from rlmm.archive.smallest_timestamps import record_smallest_timestamp
from rlmm.archive.storage import remote_storage_for
from rlmm.errors import RemoteResourceNotFoundError
from rlmm.model import kafka_uuid_to_str

log = logging.getLogger(__name__)

# Rows per RecordBatch: about Spark's arrow.maxRecordsPerBatch (10k).
DEFAULT_BATCH_ROWS = 8192
# Rows decoded into Python lists before they become Arrow arrays: the lists' bytes
# objects stay in the CPU caches. Bigger batches are these chunks concatenated (a
# memcpy): decoding 32Ki rows per build cost ~10% more CPU per record than 8Ki, 128Ki
# rows ~40% more (outside Spark; inside, with the JVM on the same cores, more).
BUILD_ROWS = 8192
_CONTROL_KEY = struct.Struct(">hh")
_ABORT = 0


def _is_abort_marker(header: RecordBatchHeader, data: memoryview) -> bool:
    for record in DefaultRecordBatch(bounded_batch(header, data)):
        key = record.key
        return key is not None and len(key) >= 4 and _CONTROL_KEY.unpack_from(key)[1] == _ABORT
    return False


def read_slice(piece: Slice, *, batch_rows: int = DEFAULT_BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """The slice's records as RecordBatches of ``kafka_schema(piece.include_headers)``."""
    if piece.until_offset <= piece.from_offset or piece.end_position <= piece.start_position:
        return
    rsm = remote_storage_for(piece.remote_options)
    segment_id = kafka_uuid_to_str(piece.segment.remote_log_segment_id.id)
    name = f"{rsm!r}: {rsm.log_object_name(piece.segment)}"
    try:
        stream = rsm.fetch_log_segment(piece.segment, piece.start_position, piece.end_position - 1)
    except (RemoteResourceNotFoundError, RemoteIntegrityError) as e:
        # Gone since planning (retention, a partition delete) or unreadable: both are
        # data loss, Spark's failOnDataLoss decides.
        _lost(piece, segment_id, name, e)
        return
    try:
        yield from _decode(piece, stream, segment_id, name, batch_rows)
    except RemoteIntegrityError as e:
        # A truncated or altered object found while reading: the rows already yielded
        # are good; the rest of the slice is lost.
        _lost(piece, segment_id, name, e)


def _lost(piece: Slice, segment_id: str, name: str, cause: Exception) -> None:
    """Raise DataLossError, or with fail_on_data_loss false log it and count it."""
    what = (
        "is not in remote storage"
        if isinstance(cause, RemoteResourceNotFoundError)
        else ("cannot be read")
    )
    lost = DataLossError(
        f"{piece.topic}-{piece.partition}: offsets [{piece.from_offset},"
        f" {piece.until_offset}) are lost: segment {segment_id} ({name}) {what}: {cause}"
    )
    if piece.fail_on_data_loss:
        raise lost from cause
    global skipped_slices
    skipped_slices += 1
    log.warning("%s; skipped (fail_on_data_loss is false)", lost)


skipped_slices = 0
"""Slices (or their rest) skipped for data loss in this process (failOnDataLoss false)."""


def _decode(
    piece: Slice, stream: BinaryIO, segment_id: str, name: str, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    # Learning the smallest timestamp of the bytes read, for rlmm's side index: only
    # while every batch is contiguous, wholly in the slice's offsets and looked at.
    learning = piece.side_index is not None
    builder = ColumnBuilder(
        piece.topic,
        piece.partition,
        piece.from_offset,
        piece.until_offset,
        piece.include_headers,
        piece.min_timestamp_ms,
        piece.max_timestamp_ms,
        track_smallest=learning,
    )
    min_ts = piece.min_timestamp_ms
    lo, hi = piece.from_offset, piece.until_offset
    committed = piece.isolation_level == READ_COMMITTED
    pending = sorted(piece.aborted_transactions, key=lambda t: t[1])
    next_aborted = 0
    aborting: set[int] = set()
    build_rows = min(batch_rows, BUILD_ROWS)
    chunks: list[pa.RecordBatch] = []  # built, not yet yielded: fewer than batch_rows rows
    chunk_rows = 0
    covered = piece.start_position
    skipped = SmallestTimestamp(name)  # of the batches the builder does not see
    with stream as f:
        for header, data in iter_batches(
            f,
            piece.start_position,
            segment_id=segment_id,
            object_name=name,
            skip_corrupt=not piece.fail_on_data_loss,
        ):
            if learning:
                learning = (
                    header.position == covered
                    and lo <= header.base_offset
                    and header.last_offset < hi
                )
                covered = header.end_position
            if header.last_offset < lo:
                continue
            if header.base_offset >= hi:
                break
            if committed and header.producer_id >= 0:
                while (
                    next_aborted < len(pending) and pending[next_aborted][1] <= header.last_offset
                ):
                    aborting.add(pending[next_aborted][0])
                    next_aborted += 1
                if header.is_control:
                    if _is_abort_marker(header, data):
                        aborting.discard(header.producer_id)
                    learning = learning and _learn(skipped, header, data)
                    continue
                if header.is_transactional and header.producer_id in aborting:
                    learning = learning and _learn(skipped, header, data)
                    continue
            if header.is_control:
                learning = learning and _learn(skipped, header, data)
                continue
            if min_ts is not None and header.magic >= 2 and header.max_timestamp < min_ts:
                learning = False  # its smallest timestamp stays unknown
                continue  # every record is older than the query keeps: not decoded
            rows = len(builder)
            try:
                builder.add(header, data)
            except Exception as e:  # aiokafka raises assorted types on bad record bytes
                error = CorruptBatchError(
                    f"segment {segment_id}: object {name}: cannot decode the records of the"
                    f" batch at byte position {header.position} (offsets {header.base_offset}"
                    f"..{header.last_offset}): {type(e).__name__}: {e}",
                    segment_id,
                    name,
                    header.position,
                )
                builder.truncate(rows)
                learning = False
                if piece.fail_on_data_loss:
                    raise error from e
                log.warning("%s; batch skipped", error)
                continue
            if len(builder) >= build_rows:
                built = builder.build()
                if built.num_rows:
                    chunks.append(built)
                    chunk_rows += built.num_rows
                    if chunk_rows >= batch_rows:
                        yield _concat(chunks)
                        chunks, chunk_rows = [], 0
    if len(builder):
        built = builder.build()
        if built.num_rows:
            chunks.append(built)
    if chunks:
        yield _concat(chunks)
    if learning and piece.side_index is not None and covered > piece.start_position:
        skipped.merge(builder.smallest_ms)
        if skipped.value is not None:
            record_smallest_timestamp(
                piece.side_index,
                piece.remote_options,
                piece.segment,
                Entry(piece.start_position, covered, skipped.value),
            )


def _learn(skipped: SmallestTimestamp, header: RecordBatchHeader, data: memoryview) -> bool:
    """Fold in a batch the builder does not see (Kafka's ListOffsets counts control and
    aborted records too); False when its records cannot be decoded."""
    try:
        skipped.add(header, data)
    except SegmentFormatError:
        return False
    return True


def _concat(chunks: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(chunks) == 1:
        return chunks[0]
    return pa.Table.from_batches(chunks).combine_chunks().to_batches()[0]


__all__ = ["read_slice"]
