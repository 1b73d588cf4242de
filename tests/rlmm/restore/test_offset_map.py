"""The offset map's runs: built from what a restore's writer sends (archived batches
whole, records appended to batches of its own), merged where neither side has a gap,
and translating every committed source offset to the target offset of the first
restored record at or after it, checked against a brute-force walk of random restores
(source gaps: markers, aborted records, compacted holes; target gaps: commit markers).
With a real broker: tests/integration/test_restore_topic_configs.py."""

from __future__ import annotations

import asyncio
import bisect
import random

import pytest
from aiokafka.structs import RecordMetadata, TopicPartition

from rlmm.restore.errors import RestoreError
from rlmm.restore.offset_map import (
    MAX_RUNS_PER_BATCH,
    MapBuilder,
    MapRecord,
    OffsetMap,
    Run,
    coalesce,
    parse_offsets_csv,
    reset_csv,
)

TOPIC_ID = "M4HtdF9vRx6hcoUD_QN_cA"


def acked(loop: asyncio.AbstractEventLoop, base: int) -> asyncio.Future[RecordMetadata]:
    """A send's future as aiokafka resolves it: the batch's base offset."""
    future: asyncio.Future[RecordMetadata] = loop.create_future()
    future.set_result(RecordMetadata("t", 0, TopicPartition("t", 0), base, -1, 0, 0))
    return future


def restore(seed: int, reencode: float) -> tuple[list[tuple[int, int]], list[MapRecord]]:
    """A random restore of one partition: (source offset, target offset) of every record
    restored, and the map records its transactions wrote."""
    rng = random.Random(seed)
    loop = asyncio.new_event_loop()
    builder = MapBuilder("t", "s", TOPIC_ID)
    placed: list[tuple[int, int]] = []
    records: list[MapRecord] = []
    source, target = rng.randrange(0, 50), 0
    try:
        for _txn in range(rng.randrange(1, 6)):
            for _batch in range(rng.randrange(1, 8)):
                size = rng.randrange(1, 40)
                if rng.random() < reencode:  # records appended to a batch of the writer's
                    offsets = []
                    for _ in range(size):
                        offsets.append(source)
                        source += 1 + (rng.randrange(1, 4) if rng.random() < 0.3 else 0)
                    for o in offsets:
                        builder.row(0, o)
                    builder.sent(0, acked(loop, target))
                    placed += [(o, target + i) for i, o in enumerate(offsets)]
                else:  # an archived batch, whole
                    builder.batch(0, acked(loop, target), source, source + size - 1, size)
                    placed += [(source + i, target + i) for i in range(size)]
                    source += size
                target += size
                source += rng.choice([0, 0, 1, 3])  # a marker, aborted records
            records += list(builder.records())
            target += 1  # the restore's own commit marker
    finally:
        loop.close()
    return placed, records


@pytest.mark.parametrize("seed", range(40))
def test_every_source_offset_translates_to_the_first_record_at_or_after_it(seed: int) -> None:
    placed, records = restore(seed, reencode=0.4 if seed % 2 else 0.0)
    found = OffsetMap.from_records("t", [MapRecord.decode(r.key, r.value()) for r in records])
    sources = [s for s, _ in placed]
    for offset in range(0, sources[-1] + 3):
        got = found.translate(0, offset, done=True)
        i = bisect.bisect_left(sources, offset)
        want = placed[i][1] if i < len(placed) else placed[-1][1] + 1
        if got.exact:
            assert got.target_offset == want, (offset, got)
        else:  # a sparse run: never past the record, at most the run read again
            assert got.target_offset is not None and got.target_offset <= want, (offset, got)
    if seed % 2 == 0:  # all passed through: one run per transaction at most
        runs = found.runs[0]
        assert all(r.dense for r in runs) and len(runs) <= len(records) * 8


def test_batches_passed_through_merge_into_one_run_per_transaction() -> None:
    loop = asyncio.new_event_loop()
    try:
        builder = MapBuilder("t", "s", TOPIC_ID)
        builder.batch(0, acked(loop, 7), 100, 109, 10)
        builder.batch(0, acked(loop, 17), 110, 119, 10)
        builder.batch(0, acked(loop, 27), 122, 125, 4)  # a marker and an aborted record before
        builder.batch(1, acked(loop, 0), 0, 4, 5)
        (zero, one) = builder.records()
        assert zero.runs == (Run(100, 119, 7, 20), Run(122, 125, 27, 4))
        assert one.runs == (Run(0, 4, 0, 5),) and one.key == b"t:1:0"
        assert list(builder.records()) == []  # emptied
    finally:
        loop.close()


def test_a_batch_with_many_gaps_ends_in_one_sparse_run() -> None:
    loop = asyncio.new_event_loop()
    try:
        builder = MapBuilder("t", "s", TOPIC_ID)
        offsets = list(range(0, 4 * (MAX_RUNS_PER_BATCH + 10), 2))  # a gap after each
        for o in offsets:
            builder.row(0, o)
        builder.sent(0, acked(loop, 1000))
        (record,) = builder.records()
    finally:
        loop.close()
    assert len(record.runs) == MAX_RUNS_PER_BATCH
    last = record.runs[-1]
    assert not last.dense and last.last_source == offsets[-1]
    assert sum(r.records for r in record.runs) == len(offsets)
    found = OffsetMap.from_records("t", [record])
    inside = found.translate(0, offsets[-1])
    assert inside.target_offset == last.first_target and not inside.exact
    assert "read again" in inside.note


def test_offsets_outside_the_restored_range_say_so() -> None:
    found = OffsetMap("t", "s", TOPIC_ID, {0: coalesce([Run(100, 199, 0, 100)])})
    before = found.translate(0, 40, first_offset=100, end_offset=200)
    assert before.target_offset == 0 and not before.exact and "before the restored" in before.note
    at_end = found.translate(0, 200, first_offset=100, end_offset=200)
    assert at_end.target_offset == 100 and at_end.exact
    after = found.translate(0, 250, first_offset=100, end_offset=200)
    assert after.target_offset == 100 and not after.exact and "ended at 200" in after.note
    running = found.translate(0, 250, done=False)
    assert running.target_offset is None and "run it to the end" in running.note
    assert found.translate(1, 5).target_offset is None  # no record of partition 1


def test_records_round_trip_and_a_bad_one_is_refused() -> None:
    record = MapRecord("t", "s", TOPIC_ID, 3, 3, (Run(5, 9, 0, 5), Run(12, 20, 6, 4)))
    assert MapRecord.decode(record.key, record.value()) == record
    assert record.key == b"t:3:5"
    for bad, says in (
        (b"{", "unreadable"),
        (record.value().replace(b'"version":1', b'"version":2'), "version 2"),
        (record.value().replace(b'"runs":[[5,9,0,5],[12,20,6,4]]', b'"runs":[]'), "no run"),
    ):
        with pytest.raises(RestoreError, match=says):
            MapRecord.decode(record.key, bad)
    other = MapRecord("t", "x", TOPIC_ID, 0, 0, (Run(0, 1, 0, 2),))
    with pytest.raises(RestoreError, match="several sources"):
        OffsetMap.from_records("t", [record, other])
    overlap = MapRecord("t", "s", TOPIC_ID, 3, 3, (Run(8, 30, 20, 5),))
    with pytest.raises(RestoreError, match="overlapping"):
        OffsetMap.from_records("t", [record, overlap])


def test_kafka_s_offsets_csv_in_and_out() -> None:
    text = "orders,0,3000\norders,1,17\nother,0,5\n\ng1,orders,2,44\n"
    assert parse_offsets_csv(text, "orders", "old.csv") == [(0, 3000), (1, 17), (2, 44)]
    with pytest.raises(RestoreError, match=r"old\.csv line 1: .* is not topic,partition,offset"):
        parse_offsets_csv("orders;0;3000\n", "orders", "old.csv")
    with pytest.raises(RestoreError, match="line 2: partition 'x'"):
        parse_offsets_csv("orders,0,1\norders,x,2\n", "orders", "old.csv")
    found = OffsetMap("restored", "orders", TOPIC_ID, {0: [Run(0, 99, 0, 100)]})
    translations = [found.translate(0, 40), found.translate(1, 3)]
    assert reset_csv(translations) == "restored,0,40\n"  # the untranslated left out
