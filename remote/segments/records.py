"""Decode the records of Kafka record batches, one batch slice at a time.

Job: turn a batch found by :mod:`remote.segments.batch` into :class:`Record` values
(offset, timestamp, key, value, headers and the batch's producer and transaction
flags). The record bodies are decoded by aiokafka's record module: v2 batches by
``DefaultRecordBatch``, magic 0/1 message sets by ``LegacyRecordBatch``.

Invariant: aiokafka only ever sees the exact bytes of one batch whose framing (and by
default CRC) we have already checked, never a mixed buffer (aiokafka misreads a
compressed legacy wrapper followed by a v2 batch in one buffer), and never a batch
whose records decompress past their bound (remote.segments.compressed). Whatever
aiokafka raises on bad bytes is translated into SegmentFormatError naming the file and
the batch position; a missing codec library gives UnsupportedCompressionError.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

from aiokafka.errors import UnsupportedCodecError
from aiokafka.record.default_records import DefaultRecordBatch
from aiokafka.record.legacy_records import LegacyRecordBatch

from remote.errors import SegmentFormatError, UnsupportedCompressionError
from remote.segments.batch import RecordBatchHeader, RecordBatchReader, Source
from remote.segments.compressed import bounded_batch

CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")
_CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


@dataclass(frozen=True, slots=True)
class Record:
    """One record with the batch fields a reader needs (Kafka's names, snake_case).

    ``timestamp`` is -1 and ``timestamp_type`` -1 for magic 0 records (no timestamp).
    """

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    producer_id: int
    producer_epoch: int
    is_transactional: bool
    is_control: bool
    partition_leader_epoch: int

    @property
    def control_type(self) -> int | None:
        """0 abort / 1 commit for a control record (its key), None for a data record."""
        if not self.is_control or self.key is None or len(self.key) < _CONTROL_KEY.size:
            return None
        return int(_CONTROL_KEY.unpack_from(self.key)[1])


def _decode_error(
    header: RecordBatchHeader, name: str, what: str, cause: BaseException
) -> SegmentFormatError:
    return SegmentFormatError(
        f"{name}: cannot decode magic {header.magic} batch at base offset "
        f"{header.base_offset}: {what}: {type(cause).__name__}: {cause} "
        f"at byte position {header.position}",
        name,
        header.position,
    )


def decode_batch(
    header: RecordBatchHeader,
    data: memoryview | bytes,
    *,
    name: str = "<buffer>",
) -> list[Record]:
    """Decode the records of one batch; ``data`` is exactly that batch's bytes."""
    if len(data) != header.size_in_bytes:
        raise SegmentFormatError(
            f"{name}: batch slice of {len(data)} bytes for a batch of {header.size_in_bytes}"
            f" at byte position {header.position}",
            name,
            header.position,
        )
    try:
        data = bounded_batch(header, data, name)
        if header.magic >= 2:
            return _decode_v2(header, data, name)
        return _decode_legacy(header, data, name)
    except SegmentFormatError:
        raise
    except UnsupportedCodecError as e:
        codec = _CODEC_NAMES.get(header.compression_type, str(header.compression_type))
        raise UnsupportedCompressionError(
            f"{name}: batch at byte position {header.position} (base offset "
            f"{header.base_offset}) uses {codec} compression and its library is missing "
            f"(aiokafka needs cramjam: pip install 'aiokafka[{codec}]'): {e}",
            name,
            header.position,
        ) from e
    except Exception as e:  # aiokafka raises assorted types on bad bytes
        raise _decode_error(header, name, "corrupt records", e) from e


def _decode_v2(header: RecordBatchHeader, data: memoryview | bytes, name: str) -> list[Record]:
    if header.compression_type > 4:
        raise UnsupportedCompressionError(
            f"{name}: batch at byte position {header.position} has unknown compression "
            f"codec id {header.compression_type}",
            name,
            header.position,
        )
    batch = DefaultRecordBatch(bytes(data))
    log_append = header.timestamp_type == 1
    out: list[Record] = []
    pid, pepoch = header.producer_id, header.producer_epoch
    txn, ctl, epoch = header.is_transactional, header.is_control, header.partition_leader_epoch
    for r in batch:
        # With LogAppendTime the broker's time is the batch max timestamp (Kafka rule).
        ts = header.max_timestamp if log_append else r.timestamp
        out.append(
            Record(
                r.offset,
                ts,
                header.timestamp_type,
                r.key,
                r.value,
                tuple(r.headers),
                pid,
                pepoch,
                txn,
                ctl,
                epoch,
            )
        )
    if len(out) != header.record_count:
        raise SegmentFormatError(
            f"{name}: batch at base offset {header.base_offset} declares "
            f"{header.record_count} records but holds {len(out)} at byte position "
            f"{header.position}",
            name,
            header.position,
        )
    if out and (out[0].offset < header.base_offset or out[-1].offset > header.last_offset):
        raise SegmentFormatError(
            f"{name}: batch [{header.base_offset}, {header.last_offset}] holds record offsets "
            f"{out[0].offset}..{out[-1].offset} at byte position {header.position}",
            name,
            header.position,
        )
    return out


def _decode_legacy(header: RecordBatchHeader, data: memoryview | bytes, name: str) -> list[Record]:
    if header.compression_type > 3:
        raise UnsupportedCompressionError(
            f"{name}: magic {header.magic} message at byte position {header.position} has "
            f"codec id {header.compression_type}, not valid for legacy messages",
            name,
            header.position,
        )
    batch = LegacyRecordBatch(bytes(data), header.magic)
    out: list[Record] = []
    for r in batch:
        ts = -1 if r.timestamp is None else r.timestamp
        tst = -1 if r.timestamp_type is None else r.timestamp_type
        out.append(Record(r.offset, ts, tst, r.key, r.value, (), -1, -1, False, False, -1))
    if out and out[-1].offset != header.last_offset:
        raise SegmentFormatError(
            f"{name}: magic {header.magic} wrapper at offset {header.last_offset} ends at "
            f"inner offset {out[-1].offset} at byte position {header.position}",
            name,
            header.position,
        )
    return out


def iter_records(
    source: Source,
    *,
    name: str | None = None,
    verify_crc: bool = True,
    strict: bool = True,
    allow_truncated_tail: bool = True,
    start_position: int = 0,
    include_control: bool = True,
) -> Iterator[Record]:
    """Every record of a segment file or buffer, batch by batch (CRC checked by default)."""
    reader = RecordBatchReader(
        source,
        name=name,
        verify_crc=verify_crc,
        strict=strict,
        allow_truncated_tail=allow_truncated_tail,
        start_position=start_position,
    )
    for header, data in reader.batches():
        if header.is_control and not include_control:
            continue
        yield from decode_batch(header, data, name=reader.name)


__all__ = ["CONTROL_ABORT", "CONTROL_COMMIT", "Record", "decode_batch", "iter_records"]
