"""Write a real Kafka-format partition directory from generated records (tests, demo, bench).

Job: produce ``<topic>-<p>/`` as a Kafka broker would: RecordBatch v2 segments rolled
by size or record count, a sparse ``.index`` (one entry per ``index_interval_bytes``,
Kafka's ``index.interval.bytes`` rule), ``.timeindex``, ``.txnindex`` for aborted
transactions, a producer snapshot at every roll and at close, ``leader-epoch-checkpoint``
and ``partition.metadata``. Record bodies are encoded by aiokafka's
``DefaultRecordBatchBuilder`` (any codec it has a library for); the fields a broker
assigns (base offset, leader epoch, control flag) are patched in and the CRC redone.

Invariant: every file written reads back with this package's readers and with Kafka's
own decoders (kafka-python in the tests); offsets are dense from ``start_offset`` (but
inside a batch written with ``offset_deltas``, as Kafka's log cleaner leaves one) and
every batch lands whole in one segment. Not thread-safe; one writer per directory.
"""

from __future__ import annotations

import os
import struct
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from types import TracebackType

import crc32c
from aiokafka import codec as aiokafka_codec
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from remote.errors import SegmentFormatError, UnsupportedCompressionError
from remote.segments.batch import (
    CONTROL_FLAG_MASK,
    V2_ATTRIBUTES_OFFSET,
    V2_CRC_OFFSET,
    RecordBatchHeader,
    parse_batch_header,
)
from remote.segments.checkpoints import (
    EpochEntry,
    ProducerStateEntry,
    encode_leader_epoch_checkpoint,
    encode_partition_metadata,
    encode_producer_snapshot,
)
from remote.segments.indexes import (
    AbortedTxn,
    OffsetIndexEntry,
    TimeIndexEntry,
    encode_offset_index,
    encode_time_index,
    encode_txn_index,
)
from remote.segments.partition_dir import (
    LEADER_EPOCH_CHECKPOINT,
    LOG_SUFFIX,
    OFFSET_INDEX_SUFFIX,
    PARTITION_METADATA,
    SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    offset_file_name,
)
from remote.segments.records import CONTROL_ABORT, CONTROL_COMMIT

CODECS: dict[str, int] = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_CODEC_CHECK = {
    "none": lambda: True,
    "gzip": aiokafka_codec.has_gzip,
    "snappy": aiokafka_codec.has_snappy,
    "lz4": aiokafka_codec.has_lz4,
    "zstd": aiokafka_codec.has_zstd,
}
_BUILDER_LIMIT = 1 << 30  # one append_batch call is one batch, whatever its size
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")  # EndTransactionMarker v0: version, coordinator epoch


def available_codecs() -> list[str]:
    """Codec names aiokafka can compress with here (snappy/lz4/zstd need cramjam)."""
    return [name for name, check in _CODEC_CHECK.items() if check()]


@dataclass(frozen=True, slots=True)
class ProducerRecord:
    """A record to append; ``timestamp`` None means now (CreateTime)."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp: int | None = None


def generate_records(
    count: int,
    *,
    start: int = 0,
    value_size: int = 0,
    base_timestamp: int = 1_700_000_000_000,
    headers: int = 2,
) -> list[ProducerRecord]:
    """Deterministic records: key ``"N"``, value ``"value-N"`` padded to ``value_size``."""
    out = []
    for n in range(start, start + count):
        value = f"value-{n}".encode()
        if len(value) < value_size:
            value += b"x" * (value_size - len(value))
        hdrs = tuple((f"header{h + 1}", f"h{h + 1}-{n}".encode()) for h in range(headers))
        out.append(ProducerRecord(str(n).encode(), value, hdrs, base_timestamp + n))
    return out


@dataclass(slots=True)
class _ProducerState:
    producer_epoch: int
    last_sequence: int = -1
    last_offset: int = -1
    offset_delta: int = 0
    timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1


@dataclass(slots=True)
class _ActiveSegment:
    base_offset: int
    file: object  # BinaryIO, kept loose for mypy with the open() overloads
    size: int = 0
    records: int = 0
    bytes_since_index: int = 0
    max_timestamp: int = -1
    offset_of_max_timestamp: int = -1


class PartitionDirWriter:
    """Append batches to ``<parent>/<topic>-<partition>/`` in Kafka's on-disk format."""

    def __init__(
        self,
        parent: str | os.PathLike[str],
        topic: str,
        partition: int,
        *,
        topic_id: uuid.UUID | None = None,
        segment_bytes: int = 1 << 20,
        segment_records: int | None = None,
        index_interval_bytes: int = 4096,
        compression: str = "none",
        start_offset: int = 0,
        leader_epoch: int = 0,
    ) -> None:
        if compression not in CODECS:
            raise UnsupportedCompressionError(
                f"unknown compression {compression!r}; one of {sorted(CODECS)}"
            )
        if not _CODEC_CHECK[compression]():
            raise UnsupportedCompressionError(
                f"{compression} compression needs cramjam (pip install 'aiokafka[{compression}]');"
                f" available here: {available_codecs()}"
            )
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id or uuid.uuid4()
        self.path = Path(parent) / f"{topic}-{partition}"
        self.segment_bytes = segment_bytes
        self.segment_records = segment_records
        self.index_interval_bytes = index_interval_bytes
        self.compression = compression
        self.log_end_offset = start_offset
        self.leader_epoch = leader_epoch
        self._epochs: list[EpochEntry] = []
        self._producers: dict[int, _ProducerState] = {}
        self._offset_index: list[OffsetIndexEntry] = []
        self._time_index: list[TimeIndexEntry] = []
        self._txn_index: list[AbortedTxn] = []
        self._closed = False
        self.path.mkdir(parents=True, exist_ok=True)
        if any(self.path.iterdir()):
            raise SegmentFormatError(f"{self.path}: partition dir is not empty", str(self.path))
        (self.path / PARTITION_METADATA).write_bytes(encode_partition_metadata(self.topic_id))
        self._active = self._open_segment(start_offset)

    # -- lifecycle -------------------------------------------------------------------

    def __enter__(self) -> PartitionDirWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Flush the active segment's indexes, the checkpoint and a final snapshot (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._write_indexes(self._active)
        self._active.file.close()  # type: ignore[attr-defined]
        self._write_snapshot(self.log_end_offset)
        self._write_checkpoint()

    @property
    def active_segment_size(self) -> int:
        """Bytes written to the active segment so far."""
        return self._active.size

    # -- appends ---------------------------------------------------------------------

    def set_leader_epoch(self, epoch: int) -> None:
        """Become leader in ``epoch`` (must not go back); the next batch opens it."""
        if epoch < self.leader_epoch:
            raise ValueError(f"leader epoch {epoch} < current {self.leader_epoch} for {self.path}")
        self.leader_epoch = epoch

    def append_batch(
        self,
        records: Sequence[ProducerRecord],
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional: bool = False,
        offset_deltas: Sequence[int] | None = None,
    ) -> RecordBatchHeader:
        """Append ``records`` as one batch; idempotent when ``producer_id`` ≥ 0.

        ``offset_deltas`` (increasing, from 0) gives the records the offsets a compacted
        batch keeps: the batch spans up to the last delta, the offsets between are gone."""
        if not records:
            raise ValueError("a record batch needs at least one record")
        deltas = list(range(len(records))) if offset_deltas is None else list(offset_deltas)
        if (
            len(deltas) != len(records)
            or deltas[0] != 0
            or any(b <= a for a, b in pairwise(deltas))
        ):
            raise ValueError(f"offset deltas {deltas} are not increasing from 0, one per record")
        if transactional and producer_id < 0:
            raise ValueError("a transactional batch needs a producer id")
        base_sequence = -1
        if producer_id >= 0:
            state = self._producers.get(producer_id)
            same_epoch = state is not None and state.producer_epoch == producer_epoch
            base_sequence = state.last_sequence + 1 if state is not None and same_epoch else 0
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=CODECS[self.compression],
            is_transactional=int(transactional),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            batch_size=_BUILDER_LIMIT,
        )
        now = int(time.time() * 1000)
        stamps = [now if r.timestamp is None else r.timestamp for r in records]
        for delta, r, ts in zip(deltas, records, stamps, strict=True):
            builder.append(delta, timestamp=ts, key=r.key, value=r.value, headers=list(r.headers))
        max_delta = deltas[stamps.index(max(stamps))]
        header = self._append(bytearray(builder.build()), len(records), max_delta, control=False)
        if producer_id >= 0:
            st = self._producers.setdefault(producer_id, _ProducerState(producer_epoch))
            st.producer_epoch = producer_epoch
            st.last_sequence = base_sequence + len(records) - 1
            st.last_offset = header.last_offset
            st.offset_delta = deltas[-1]
            st.timestamp = header.max_timestamp
            if transactional and st.current_txn_first_offset < 0:
                st.current_txn_first_offset = header.base_offset
        return header

    def append_records(
        self, records: Iterable[ProducerRecord], *, batch_records: int = 1, **options: object
    ) -> list[RecordBatchHeader]:
        """Append ``records`` in batches of ``batch_records`` (options as append_batch)."""
        out: list[RecordBatchHeader] = []
        pending: list[ProducerRecord] = []
        for r in records:
            pending.append(r)
            if len(pending) >= batch_records:
                out.append(self.append_batch(pending, **options))  # type: ignore[arg-type]
                pending = []
        if pending:
            out.append(self.append_batch(pending, **options))  # type: ignore[arg-type]
        return out

    def commit_transaction(
        self,
        producer_id: int,
        producer_epoch: int,
        *,
        coordinator_epoch: int = 0,
        timestamp: int | None = None,
    ) -> RecordBatchHeader:
        return self.append_control(
            producer_id,
            producer_epoch,
            CONTROL_COMMIT,
            coordinator_epoch=coordinator_epoch,
            timestamp=timestamp,
        )

    def abort_transaction(
        self,
        producer_id: int,
        producer_epoch: int,
        *,
        coordinator_epoch: int = 0,
        timestamp: int | None = None,
    ) -> RecordBatchHeader:
        return self.append_control(
            producer_id,
            producer_epoch,
            CONTROL_ABORT,
            coordinator_epoch=coordinator_epoch,
            timestamp=timestamp,
        )

    def append_control(
        self,
        producer_id: int,
        producer_epoch: int,
        control_type: int,
        *,
        coordinator_epoch: int = 0,
        timestamp: int | None = None,
    ) -> RecordBatchHeader:
        """Append an end-transaction marker (0 abort, 1 commit); an abort goes in the .txnindex."""
        if control_type not in (CONTROL_ABORT, CONTROL_COMMIT):
            raise ValueError(f"control type {control_type} is neither abort (0) nor commit (1)")
        builder = DefaultRecordBatchBuilder(
            magic=2,
            compression_type=0,
            is_transactional=1,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=-1,
            batch_size=_BUILDER_LIMIT,
        )
        ts = int(time.time() * 1000) if timestamp is None else timestamp
        builder.append(
            0,
            timestamp=ts,
            key=_CONTROL_KEY.pack(0, control_type),
            value=_CONTROL_VALUE.pack(0, coordinator_epoch),
            headers=[],
        )
        header = self._append(bytearray(builder.build()), 1, 0, control=True)
        st = self._producers.setdefault(producer_id, _ProducerState(producer_epoch))
        first = st.current_txn_first_offset
        st.producer_epoch = producer_epoch
        st.coordinator_epoch = coordinator_epoch
        st.timestamp = header.max_timestamp
        st.current_txn_first_offset = -1
        if control_type == CONTROL_ABORT and first >= 0:
            # Kafka's lastStableOffset after completing this txn: the first offset of the
            # earliest other open txn, else the offset after the marker.
            others = [
                p.current_txn_first_offset
                for p in self._producers.values()
                if p.current_txn_first_offset >= 0
            ]
            lso = min(others) if others else header.last_offset + 1
            self._txn_index.append(AbortedTxn(producer_id, first, header.last_offset, lso))
        return header

    # -- internals -------------------------------------------------------------------

    def _append(
        self, buf: bytearray, record_count: int, max_delta: int, *, control: bool
    ) -> RecordBatchHeader:
        """Write one built batch; ``max_delta`` is the offset delta of its max timestamp."""
        if self._closed:
            raise ValueError(f"writer for {self.path} is closed")
        seg = self._active
        too_big = seg.size > 0 and seg.size + len(buf) > self.segment_bytes
        too_many = (
            self.segment_records is not None
            and seg.records > 0
            and seg.records + record_count > self.segment_records
        )
        if too_big or too_many:
            self._roll()
            seg = self._active
        if not self._epochs or self._epochs[-1].epoch != self.leader_epoch:
            if self._epochs and self._epochs[-1].start_offset == self.log_end_offset:
                self._epochs.pop()  # an epoch that wrote nothing (Kafka's cache drops it too)
            self._epochs.append(EpochEntry(self.leader_epoch, self.log_end_offset))
        # Fields the broker assigns: base offset, leader epoch, control flag; then the CRC.
        struct.pack_into(">q", buf, 0, self.log_end_offset)
        struct.pack_into(">i", buf, 12, self.leader_epoch)
        if control:
            (attributes,) = struct.unpack_from(">h", buf, V2_ATTRIBUTES_OFFSET)
            struct.pack_into(">h", buf, V2_ATTRIBUTES_OFFSET, attributes | CONTROL_FLAG_MASK)
        struct.pack_into(
            ">I", buf, V2_CRC_OFFSET, crc32c.crc32c(memoryview(buf)[V2_ATTRIBUTES_OFFSET:])
        )
        header = parse_batch_header(buf, 0, seg.size, str(self.path))
        assert header is not None and header.size_in_bytes == len(buf)
        # Kafka's LogSegment.append: track the max timestamp (and the first record
        # offset holding it), then index this batch if enough bytes went by since the last.
        if header.max_timestamp > seg.max_timestamp:
            seg.max_timestamp = header.max_timestamp
            seg.offset_of_max_timestamp = header.base_offset + max_delta
        if seg.bytes_since_index > self.index_interval_bytes:
            self._offset_index.append(OffsetIndexEntry(header.last_offset, seg.size))
            self._maybe_append_time_index(seg)
            seg.bytes_since_index = 0
        seg.bytes_since_index += len(buf)
        seg.file.write(buf)  # type: ignore[attr-defined]
        seg.size += len(buf)
        seg.records += record_count
        self.log_end_offset = header.last_offset + 1
        return header

    def _maybe_append_time_index(self, seg: _ActiveSegment) -> None:
        if seg.max_timestamp < 0:
            return
        if not self._time_index or seg.max_timestamp > self._time_index[-1].timestamp:
            self._time_index.append(TimeIndexEntry(seg.max_timestamp, seg.offset_of_max_timestamp))

    def _open_segment(self, base_offset: int) -> _ActiveSegment:
        f = open(self.path / offset_file_name(base_offset, LOG_SUFFIX), "xb")  # noqa: SIM115
        return _ActiveSegment(base_offset, f)

    def _roll(self) -> None:
        seg = self._active
        self._maybe_append_time_index(seg)  # Kafka's onBecomeInactiveSegment
        self._write_indexes(seg)
        seg.file.close()  # type: ignore[attr-defined]
        self._write_snapshot(self.log_end_offset)
        self._write_checkpoint()
        self._offset_index, self._time_index, self._txn_index = [], [], []
        self._active = self._open_segment(self.log_end_offset)

    def _write_indexes(self, seg: _ActiveSegment) -> None:
        base = seg.base_offset
        seg.file.flush()  # type: ignore[attr-defined]
        (self.path / offset_file_name(base, OFFSET_INDEX_SUFFIX)).write_bytes(
            encode_offset_index(self._offset_index, base)
        )
        (self.path / offset_file_name(base, TIME_INDEX_SUFFIX)).write_bytes(
            encode_time_index(self._time_index, base)
        )
        if self._txn_index:  # Kafka creates the .txnindex only on the first abort
            (self.path / offset_file_name(base, TXN_INDEX_SUFFIX)).write_bytes(
                encode_txn_index(self._txn_index)
            )

    def _write_snapshot(self, offset: int) -> None:
        entries = [
            ProducerStateEntry(
                pid,
                st.producer_epoch,
                st.last_sequence,
                st.last_offset,
                st.offset_delta,
                st.timestamp,
                st.coordinator_epoch,
                st.current_txn_first_offset,
            )
            for pid, st in sorted(self._producers.items())
        ]
        (self.path / offset_file_name(offset, SNAPSHOT_SUFFIX)).write_bytes(
            encode_producer_snapshot(entries)
        )

    def _write_checkpoint(self) -> None:
        tmp = self.path / (LEADER_EPOCH_CHECKPOINT + ".tmp")
        tmp.write_bytes(encode_leader_epoch_checkpoint(self._epochs))
        os.replace(tmp, self.path / LEADER_EPOCH_CHECKPOINT)


__all__ = ["CODECS", "PartitionDirWriter", "ProducerRecord", "available_codecs", "generate_records"]
