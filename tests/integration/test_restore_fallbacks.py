"""`rlmm restore` of batches that cannot pass through, into Apache Kafka 4.1.1: compacted
batches (offset deltas with gaps, which Kafka refuses from a producer) and LogAppendTime
batches, among batches that pass through, in rlmm's own layout.

Invariants checked: a read_committed consumer of the target holds exactly the archive's
committed records, per partition and in order, with keys, values, headers and
timestamps (a LogAppendTime record's is its batch's time, now as CreateTime); the
report counts each batch re-encoded with its reason and the rest as passed through;
without passthrough (every record re-encoded), and into a target whose
max.message.bytes is below most archived batches, the target holds the same records;
in each, every source offset translated through the offset map lands a consumer on the
record a source consumer at that offset would read first.
"""

from __future__ import annotations

import asyncio
import bisect
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from remote.segments import PartitionDir, PartitionDirWriter, ProducerRecord, generate_records
from rlmm.restore import RestoreOptions, RestoreSelection, read_offset_map, restore
from rlmm.restore.target import TargetCluster
from tests.fixtures.apache_kafka import ApacheKafkaBroker
from tests.integration.test_restore_apache_kafka import consume, consume_with_offsets
from tests.rlmm.archive.archive_data import make_config, offload
from tests.rlmm.archive.test_read_edges import _log_append_time

pytestmark = [pytest.mark.kafka, pytest.mark.apache_kafka, pytest.mark.slow]

Row = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int, int]
TXN = {"producer_epoch": 0, "transactional": True}


def write(logs: Path, topic: str) -> tuple[dict[int, list[Row]], dict[int, list[int]]]:
    """Partition 0 (lz4): plain batches, two compacted ones, a committed and an aborted
    transaction; partition 1: LogAppendTime batches. The committed records archived,
    and their source offsets."""
    topic_id = uuid.uuid4()
    kept: list[tuple[int, ProducerRecord]] = []  # partition 0's committed, with offsets

    def dense(records: list[ProducerRecord], **options: Any) -> None:
        headers = w.append_records(records, **options)
        offsets = [o for h in headers for o in range(h.base_offset, h.last_offset + 1)]
        kept.extend(zip(offsets, records, strict=True))

    def compacted(records: list[ProducerRecord], deltas: list[int]) -> None:
        base = w.append_batch(records, offset_deltas=deltas).base_offset
        kept.extend((base + d, r) for d, r in zip(deltas, records, strict=True))

    with PartitionDirWriter(
        logs, topic, 0, topic_id=topic_id, segment_records=50, compression="lz4"
    ) as w:
        dense(generate_records(30, value_size=30), batch_records=6)
        compacted(generate_records(5, start=30), [0, 3, 4, 8, 11])
        dense(generate_records(8, start=35), batch_records=4, producer_id=3, **TXN)
        w.commit_transaction(3, 0, timestamp=1_700_000_000_043)
        w.append_records(generate_records(6, start=43), batch_records=3, producer_id=4, **TXN)
        w.abort_transaction(4, 0, timestamp=1_700_000_000_049)
        compacted(generate_records(3, start=49), [0, 1, 5])
        dense(generate_records(60, start=52), batch_records=10)
    # Everything but the active segment is archived.
    active = PartitionDir(logs / f"{topic}-0").segments()[-1].base_offset
    want = {0: [(r.key, r.value, r.headers, r.timestamp or 0, 0) for o, r in kept if o < active]}
    offsets = {0: [o for o, _ in kept if o < active]}
    with PartitionDirWriter(logs, topic, 1, topic_id=topic_id, segment_records=30) as w:
        stamped = generate_records(70, start=200)
        w.append_records(stamped, batch_records=7)
    pdir = PartitionDir(logs / f"{topic}-1")
    for seg in pdir.segments():
        _log_append_time(seg.log_path)
    # A LogAppendTime record's time is its batch's: the last (largest) of each 7.
    times = [stamped[i // 7 * 7 + 6].timestamp or 0 for i in range(len(stamped))]
    archived = pdir.segments()[-1].base_offset
    rows = [(r.key, r.value, r.headers, t, 0) for r, t in zip(stamped, times, strict=True)]
    want[1] = rows[:archived]
    offsets[1] = list(range(archived))
    return want, offsets


@pytest.mark.timeout(300)
def test_compacted_and_log_append_time_batches_are_reencoded_exactly(
    apache_kafka_broker: ApacheKafkaBroker, tmp_path: Path
) -> None:
    topic = f"fb-{uuid.uuid4().hex[:6]}"
    want, offsets = write(tmp_path / "logs", topic)
    config = make_config(tmp_path / "rlmm")
    dirs = [PartitionDir(d) for d in sorted((tmp_path / "logs").iterdir())]
    asyncio.run(offload(config, dirs))
    client = {"bootstrap_servers": apache_kafka_broker.bootstrap}
    reports: dict[str, Any] = {}
    # A target whose max.message.bytes is below most archived batches: those re-encoded
    # (the restore reads the limit from the topic's configs).
    for how, passthrough, limit in (("raw", True, None), ("records", False, None),
                                    ("small", True, 150)):  # fmt: skip
        target = f"{topic}-{how}"
        asyncio.run(_create(apache_kafka_broker.bootstrap, target, limit))
        if limit is not None:
            assert asyncio.run(_max_message_bytes(client, target)) == limit
        report = restore(
            config,
            RestoreSelection(topic, target_topic=target),
            client,
            options=RestoreOptions(transaction_records=20, passthrough=passthrough),
        )
        assert all(r.done for r in report.results)
        got = asyncio.run(consume(apache_kafka_broker.bootstrap, target))
        assert got == want, how
        reports[how] = report
        _lands_on_the_same_records(client, target, want, offsets, how)
    raw, records = reports["raw"], reports["records"]
    small = reports["small"].reencoded
    assert small["too large"] >= 5 and small["offset gaps"] == 2
    assert reports["small"].batches_passed_through < raw.batches_passed_through
    by_partition = {r.partition: r for r in raw.results}
    assert by_partition[0].reencoded == {"offset gaps": 2}
    assert by_partition[0].batches_passed_through >= 5
    assert by_partition[1].reencoded == {"LogAppendTime": by_partition[1].batches_reencoded}
    assert by_partition[1].batches_passed_through == 0
    assert by_partition[1].log_append_time_records == len(want[1])
    assert records.batches_passed_through == 0
    assert raw.records == records.records == sum(map(len, want.values()))
    shown = raw.to_dict()
    assert shown["batches_passed_through"] == raw.batches_passed_through
    assert shown["reencoded"] == {"LogAppendTime": by_partition[1].batches_reencoded,
                                  "offset gaps": 2}  # fmt: skip


def _lands_on_the_same_records(
    client: dict[str, Any],
    target: str,
    want: dict[int, list[Row]],
    offsets: dict[int, list[int]],
    how: str,
) -> None:
    """Every source offset, through the offset map, is where a consumer reads the record
    a source consumer at that offset would read first (re-encoded batches included: the
    compacted ones' holes, the transaction's markers, LogAppendTime batches)."""
    mapped = asyncio.run(read_offset_map(client, target))
    placed = asyncio.run(consume_with_offsets(client["bootstrap_servers"], target))
    for p, rows in want.items():
        for offset in range(offsets[p][-1] + 1):
            moved = mapped.translate(p, offset)
            i = bisect.bisect_left(offsets[p], offset)
            first = next((row for o, row in placed[p] if o >= (moved.target_offset or 0)), None)
            assert moved.exact and first == rows[i], (how, p, offset, moved)


async def _create(bootstrap: str, topic: str, max_message_bytes: int | None) -> None:
    """Two partitions; no retention (the archive's timestamps are from 2023)."""
    configs = {"retention.ms": "-1"}
    if max_message_bytes is not None:
        configs["max.message.bytes"] = str(max_message_bytes)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 2, 1, topic_configs=configs)])
    finally:
        await admin.close()


async def _max_message_bytes(client: dict[str, Any], topic: str) -> int:
    async with TargetCluster(client) as cluster:
        return await cluster.max_message_bytes(topic)
