"""RawBatch: an archived record batch handed to aiokafka's producer as it is.

Why this module reaches into aiokafka: aiokafka 0.14 has no public way to send a
record batch it did not build. ``AIOKafkaProducer.send_batch`` queues any object with
its ``BatchBuilder``'s interface; when the sender takes the batch, the accumulator
stamps the transactional producer's id, epoch and the partition's next sequence
through ``_set_producer_state`` (and counts ``record_count()`` into that sequence),
then asks ``_build()`` for the bytes it puts in the produce request. RawBatch is
such an object over bytes we already have. Everything that depends on those private
names is here; ``tests/rlmm/restore/test_raw_batch.py`` fails if aiokafka changes them.

Invariant: the bytes sent are the archived batch's but for the fields a producer
owns: base offset 0, partition leader epoch -1, the transactional attribute bit set,
the producer id, epoch and base sequence aiokafka assigns, and the CRC-32C
recomputed over the result. Records, their offset deltas and timestamps, headers,
the batch's timestamps and its compression stay byte for byte. The batch is closed
from the start: aiokafka can never append a record to it.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import crc32c

from remote.segments.batch import (
    TRANSACTIONAL_FLAG_MASK,
    V2_HEADER_SIZE,
    RecordBatchHeader,
)

# Kafka's DefaultRecordBatch layout (magic 2).
_BASE_OFFSET = struct.Struct(">q")  # at 0
_LEADER_EPOCH = struct.Struct(">i")  # at 12
_CRC = struct.Struct(">I")  # at 17
_ATTRIBUTES = struct.Struct(">h")  # at 21
_PRODUCER = struct.Struct(">qhi")  # id, epoch, base sequence at 43
_LEADER_EPOCH_AT, _CRC_AT, _ATTRIBUTES_AT, _PRODUCER_AT = 12, 17, 21, 43
_NO_PARTITION_LEADER_EPOCH = -1


class RawBatch:
    """One archived magic-2 batch, re-stamped for a transactional producer."""

    def __init__(self, header: RecordBatchHeader, data: bytes | memoryview) -> None:
        if header.magic != 2 or len(data) != header.size_in_bytes or len(data) < V2_HEADER_SIZE:
            raise ValueError(f"not a whole magic 2 record batch: {header}")
        buf = bytearray(data)
        _BASE_OFFSET.pack_into(buf, 0, 0)
        _LEADER_EPOCH.pack_into(buf, _LEADER_EPOCH_AT, _NO_PARTITION_LEADER_EPOCH)
        (attributes,) = _ATTRIBUTES.unpack_from(buf, _ATTRIBUTES_AT)
        _ATTRIBUTES.pack_into(buf, _ATTRIBUTES_AT, attributes | TRANSACTIONAL_FLAG_MASK)
        self._buffer = buf
        self._records = header.record_count
        self._stamped = False

    # ---- what aiokafka's MessageAccumulator, MessageBatch and sender call -------------

    def append(
        self,
        *,
        timestamp: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] = (),
    ) -> None:
        """Full: the accumulator opens a batch of its own for further records."""
        return None

    def close(self) -> None:
        """Already closed (aiokafka closes every queued batch before a commit)."""

    def closed(self) -> bool:
        # Closed: the sender takes it at once instead of lingering for more records.
        return True

    def record_count(self) -> int:
        return self._records

    def size(self) -> int:
        return len(self._buffer)

    def _set_producer_state(
        self, producer_id: int, producer_epoch: int, base_sequence: int
    ) -> None:
        _PRODUCER.pack_into(self._buffer, _PRODUCER_AT, producer_id, producer_epoch, base_sequence)
        self._stamp()

    def _build(self) -> bytearray:
        if not self._stamped:
            self._stamp()  # the CRC of the bytes as they are, should nothing stamp them
        return self._buffer

    def _stamp(self) -> None:
        crc = crc32c.crc32c(memoryview(self._buffer)[_ATTRIBUTES_AT:])
        _CRC.pack_into(self._buffer, _CRC_AT, crc)
        self._stamped = True


__all__ = ["RawBatch"]
