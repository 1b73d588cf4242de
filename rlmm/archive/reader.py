"""read_slice: fetch one slice's byte range and decode it into Arrow record batches.

Job: on an executor, rebuild (once per process) the remote storage manager from the
slice's options, fetch ``[start_position, end_position)`` of the segment's ``.log``
object (a ranged GET on S3), walk its batches and decode the wanted records
column-wise into ``pyarrow.RecordBatch``es of Spark's Kafka schema; or hand out the
wanted batches whole (``read_slice_batches``, for a restore that sends them as they
are), chosen by the same read_committed rule.

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
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO, TypeVar

import pyarrow as pa
from aiokafka.record.default_records import DefaultRecordBatch

from remote.errors import RemoteIntegrityError, SegmentFormatError
from remote.segments.batch import RecordBatchHeader
from remote.segments.compressed import bounded_batch
from remote.segments.timestamps import SmallestTimestamp
from remote.side_index import Entry
from rlmm.archive.batches import iter_batches
from rlmm.archive.columns import ColumnBuilder
from rlmm.archive.errors import ArchiveError, CorruptBatchError, DataLossError
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
_T = TypeVar("_T")


def _is_abort_marker(header: RecordBatchHeader, data: memoryview) -> bool:
    for record in DefaultRecordBatch(bounded_batch(header, data)):
        key = record.key
        return key is not None and len(key) >= 4 and _CONTROL_KEY.unpack_from(key)[1] == _ABORT
    return False


def read_slice(piece: Slice, *, batch_rows: int = DEFAULT_BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """The slice's records as RecordBatches of ``kafka_schema(piece.include_headers)``."""

    def body(stream: BinaryIO, segment_id: str, name: str) -> Iterator[pa.RecordBatch]:
        return _decode(piece, stream, segment_id, name, batch_rows)

    return _read(piece, body)


def read_slice_batches(piece: Slice) -> Iterator[tuple[RecordBatchHeader, memoryview]]:
    """The data batches holding the slice's records, whole and in offset order: the
    batches read_slice decodes (the same read_committed rule drops aborted and control
    batches), each with its bytes (a view: copy what is kept past the next batch).

    A batch may hold records outside ``[from_offset, until_offset)`` (one cut by the
    slice's ends): ``decode_batches`` keeps only the slice's. The slice's timestamp
    bounds (a query's filter) cannot apply to whole batches: such a slice is refused."""
    if piece.min_timestamp_ms is not None or piece.max_timestamp_ms is not None:
        raise ArchiveError(f"{piece}: whole batches cannot be read under timestamp bounds")

    def body(
        stream: BinaryIO, segment_id: str, name: str
    ) -> Iterator[tuple[RecordBatchHeader, memoryview]]:
        with stream as f:
            for header, data, kind in _classified(piece, f, segment_id, name):
                if kind == _DATA:
                    yield header, data

    return _read(piece, body)


def decode_batches(
    piece: Slice, batches: Iterable[tuple[RecordBatchHeader, memoryview]]
) -> pa.RecordBatch:
    """The records of ``batches`` (from ``read_slice_batches(piece)``) inside the
    slice's offsets, as read_slice decodes them (a corrupt batch is CorruptBatchError,
    or with fail_on_data_loss false logged and skipped)."""
    segment_id = kafka_uuid_to_str(piece.segment.remote_log_segment_id.id)
    name = _object_name(piece)
    builder = _builder(piece)
    for header, data in batches:
        _add(builder, piece, header, data, segment_id, name)
    return builder.build()


def _builder(piece: Slice, *, track_smallest: bool = False) -> ColumnBuilder:
    """A builder of the slice's rows: its offsets, headers and timestamp bounds."""
    return ColumnBuilder(
        piece.topic,
        piece.partition,
        piece.from_offset,
        piece.until_offset,
        piece.include_headers,
        piece.min_timestamp_ms,
        piece.max_timestamp_ms,
        track_smallest=track_smallest,
    )


def _object_name(piece: Slice) -> str:
    rsm = remote_storage_for(piece.remote_options)
    return f"{rsm!r}: {rsm.log_object_name(piece.segment)}"


def _read(piece: Slice, body: Callable[[BinaryIO, str, str], Iterator[_T]]) -> Iterator[_T]:
    """Fetch the slice's byte range and run ``body`` over it; a segment gone or
    unreadable is data loss (``_lost``)."""
    if piece.until_offset <= piece.from_offset or piece.end_position <= piece.start_position:
        return
    rsm = remote_storage_for(piece.remote_options)
    segment_id = kafka_uuid_to_str(piece.segment.remote_log_segment_id.id)
    name = _object_name(piece)
    try:
        stream = rsm.fetch_log_segment(piece.segment, piece.start_position, piece.end_position - 1)
    except (RemoteResourceNotFoundError, RemoteIntegrityError) as e:
        # Gone since planning (retention, a partition delete) or unreadable: both are
        # data loss, Spark's failOnDataLoss decides.
        _lost(piece, segment_id, name, e)
        return
    try:
        yield from body(stream, segment_id, name)
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


# What _classified says of a batch.
_BELOW, _DATA, _DROPPED, _PAST = range(4)


def _classified(
    piece: Slice, f: BinaryIO, segment_id: str, name: str
) -> Iterator[tuple[RecordBatchHeader, memoryview, int]]:
    """Every batch of the stream up to the first past the slice's offsets, with what it
    is: below the slice, data, dropped (control, or aborted under read_committed), or
    past the slice (the last one)."""
    lo, hi = piece.from_offset, piece.until_offset
    committed = piece.isolation_level == READ_COMMITTED
    pending = sorted(piece.aborted_transactions, key=lambda t: t[1])
    next_aborted = 0
    aborting: set[int] = set()
    for header, data in iter_batches(
        f,
        piece.start_position,
        segment_id=segment_id,
        object_name=name,
        skip_corrupt=not piece.fail_on_data_loss,
    ):
        if header.last_offset < lo:
            yield header, data, _BELOW
            continue
        if header.base_offset >= hi:
            yield header, data, _PAST
            return
        if committed and header.producer_id >= 0:
            while next_aborted < len(pending) and pending[next_aborted][1] <= header.last_offset:
                aborting.add(pending[next_aborted][0])
                next_aborted += 1
            if header.is_control:
                if _is_abort_marker(header, data):
                    aborting.discard(header.producer_id)
                yield header, data, _DROPPED
                continue
            if header.is_transactional and header.producer_id in aborting:
                yield header, data, _DROPPED
                continue
        yield header, data, _DROPPED if header.is_control else _DATA


def _add(
    builder: ColumnBuilder,
    piece: Slice,
    header: RecordBatchHeader,
    data: memoryview,
    segment_id: str,
    name: str,
) -> bool:
    """Decode one data batch into ``builder``; False when it was corrupt and skipped
    (fail_on_data_loss false), with nothing of it left in the builder."""
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
        if piece.fail_on_data_loss:
            raise error from e
        log.warning("%s; batch skipped", error)
        return False
    return True


def _decode(
    piece: Slice, stream: BinaryIO, segment_id: str, name: str, batch_rows: int
) -> Iterator[pa.RecordBatch]:
    # Learning the smallest timestamp of the bytes read, for rlmm's side index: only
    # while every batch is contiguous, wholly in the slice's offsets and looked at.
    learning = piece.side_index is not None
    builder = _builder(piece, track_smallest=learning)
    min_ts = piece.min_timestamp_ms
    lo, hi = piece.from_offset, piece.until_offset
    build_rows = min(batch_rows, BUILD_ROWS)
    chunks: list[pa.RecordBatch] = []  # built, not yet yielded: fewer than batch_rows rows
    chunk_rows = 0
    covered = piece.start_position
    skipped = SmallestTimestamp(name)  # of the batches the builder does not see
    with stream as f:
        for header, data, kind in _classified(piece, f, segment_id, name):
            if learning:
                learning = (
                    header.position == covered
                    and lo <= header.base_offset
                    and header.last_offset < hi
                )
                covered = header.end_position
            if kind == _BELOW:
                continue
            if kind == _PAST:
                break
            if kind == _DROPPED:
                learning = learning and _learn(skipped, header, data)
                continue
            if min_ts is not None and header.magic >= 2 and header.max_timestamp < min_ts:
                learning = False  # its smallest timestamp stays unknown
                continue  # every record is older than the query keeps: not decoded
            if not _add(builder, piece, header, data, segment_id, name):
                learning = False
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


__all__ = ["decode_batches", "read_slice", "read_slice_batches"]
