"""RawBatch against aiokafka's own accumulator: an archived batch comes out re-stamped
(base offset 0, no leader epoch, the transactional bit, the producer's id, epoch and
sequence, a valid CRC-32C) with its records byte for byte; and the private interface
rlmm.restore.raw_batch relies on is still aiokafka's (these fail if aiokafka changes it)."""

from __future__ import annotations

import asyncio
import inspect

import aiokafka
import crc32c
import pytest
from aiokafka import TopicPartition
from aiokafka.producer.message_accumulator import BatchBuilder, MessageAccumulator, MessageBatch
from aiokafka.producer.transaction_manager import TransactionManager
from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from remote.segments.batch import V2_HEADER_SIZE, RecordBatchHeader, parse_batch_header
from rlmm.restore.raw_batch import RawBatch

GZIP = 1
RECORDS = [
    (b"k0", b"v0", [("h", b"1")], 1_700_000_000_000),
    (None, b"v1", [], 1_700_000_000_005),
    (b"k2", None, [("a", None), ("b", b"x")], 1_700_000_000_003),
]


def archived(codec: int = GZIP) -> tuple[RecordBatchHeader, bytes]:
    """A batch as a broker stored it: offsets from 1234, leader epoch 7, an idempotent
    producer's id, epoch and sequence."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=0,
        producer_id=99,
        producer_epoch=1,
        base_sequence=17,
        batch_size=1 << 20,
    )
    for delta, (key, value, headers, ts) in enumerate(RECORDS):
        builder.append(delta, timestamp=ts, key=key, value=value, headers=headers)
    buf = bytearray(builder.build())
    buf[0:8] = (1234).to_bytes(8, "big")
    buf[12:16] = (7).to_bytes(4, "big")
    buf[17:21] = crc32c.crc32c(bytes(buf[21:])).to_bytes(4, "big")
    header = parse_batch_header(buf, 0, 0, "archived", verify_crc=True)
    assert header is not None
    return header, bytes(buf)


def records(data: bytes) -> list[tuple[object, ...]]:
    """Offset delta, key, value, headers, timestamp of each record."""
    batch = DefaultRecordBatch(data)
    return [(r.offset - batch.base_offset, r.key, r.value, r.headers, r.timestamp) for r in batch]


def test_aiokafkas_accumulator_stamps_it_and_sends_the_records_unchanged() -> None:
    header, data = archived()
    tp = TopicPartition("t", 0)

    async def through_the_accumulator() -> tuple[bytes, int]:
        txn = TransactionManager("rlmm-test", 60_000)
        txn.set_pid_and_epoch(5000, 3)
        txn.begin_transaction()
        txn.increment_sequence_number(tp, 42)  # batches sent before this one
        accumulator = MessageAccumulator(None, 16384, 0, 30, txn_manager=txn)
        await accumulator.add_batch(RawBatch(header, data), tp, timeout=5)
        batch = accumulator._pop_batch(tp)  # what the sender does before a produce request
        sent = bytes(batch.get_data_buffer())
        batch.done_noack()
        return sent, txn.sequence_number(tp)

    sent, next_sequence = asyncio.run(through_the_accumulator())
    assert next_sequence == 42 + len(RECORDS)
    stamped = parse_batch_header(sent, 0, 0, "sent", verify_crc=True)  # CRC-32C checked
    assert stamped is not None
    assert (stamped.base_offset, stamped.partition_leader_epoch) == (0, -1)
    assert (stamped.producer_id, stamped.producer_epoch, stamped.base_sequence) == (5000, 3, 42)
    assert stamped.is_transactional and not stamped.is_control
    assert stamped.compression_type == GZIP
    assert stamped.record_count == len(RECORDS) and stamped.last_offset == len(RECORDS) - 1
    assert (stamped.base_timestamp, stamped.max_timestamp) == (
        header.base_timestamp,
        header.max_timestamp,
    )
    # The compressed records are the archived bytes, untouched.
    assert sent[V2_HEADER_SIZE:] == data[V2_HEADER_SIZE:]
    assert records(sent) == records(data)
    batch = DefaultRecordBatch(sent)
    assert batch.validate_crc() and batch.is_transactional


def test_it_takes_no_record_and_is_never_left_lingering() -> None:
    header, data = archived(codec=0)
    raw = RawBatch(header, data)

    async def in_a_message_batch() -> None:  # aiokafka's batches need a running loop
        batch = MessageBatch(TopicPartition("t", 0), raw, 30, 5)
        assert batch.append(b"k", b"v", None) is None  # full: send() opens its own batch
        assert batch.remaining_linger() is None  # closed: the sender takes it at once
        assert batch.record_count == len(RECORDS) and not batch.is_empty()
        batch.done_noack()

    asyncio.run(in_a_message_batch())
    assert raw.size() == len(data)
    with pytest.raises(ValueError, match="not a whole magic 2"):
        RawBatch(header, data[:-1])


def test_aiokafkas_private_interface_is_the_one_raw_batch_implements() -> None:
    """If one of these fails, aiokafka changed what it asks of a batch builder: check
    rlmm/restore/raw_batch.py against the new version before changing the test."""
    assert aiokafka.__version__.startswith("0.14."), aiokafka.__version__
    builder_methods = {
        name
        for name, value in vars(BatchBuilder).items()
        if callable(value) and not name.startswith("__") and name != "_serialize"
    }
    assert builder_methods == {
        "append",
        "close",
        "_set_producer_state",
        "_build",
        "size",
        "record_count",
        "closed",
    }
    assert all(callable(getattr(RawBatch, name, None)) for name in builder_methods)
    pop = inspect.getsource(MessageAccumulator._pop_batch)
    assert "increment_sequence_number(batch.tp, batch.record_count)" in pop
    assert "batch.set_producer_state(" in pop
    assert "self._builder._set_producer_state(" in inspect.getsource(
        MessageBatch.set_producer_state
    )
    assert "self._builder._build()" in inspect.getsource(MessageBatch.get_data_buffer)
