"""Independent view of an RLMM topic for the integration tests: a raw aiokafka reader.

Job: read every record of a metadata topic with a plain ``AIOKafkaConsumer`` (manual
assignment, no consumer group, nothing of ``eventlog``), replay the decoded events
into a fresh ``RemotePartitionMetadataStore`` one partition at a time, and turn a
store's or a manager's fingerprint into a digest that can cross process boundaries.

Invariant: the replay applies events in offset order per partition and skips an
illegal event exactly as the manager's apply loop does, so a manager that applied
the same records holds the same fingerprint. The end of each partition is the high
watermark of a fetch response (Tansu's ListOffsets(latest) is wrong, its fetch
high watermark is right), and offsets missing below it (holes left by a broker
crash on Tansu's s3 storage) are simply not delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from rlmm.cache import RemotePartitionMetadataStore
from rlmm.codec import decode
from rlmm.errors import RemoteStorageError
from rlmm.model import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)


@dataclass(frozen=True)
class RawRecord:
    """One record as the raw consumer saw it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes


async def read_topic(
    bootstrap: str, topic: str, partitions: int, timeout_s: float = 30.0
) -> dict[int, list[RawRecord]]:
    """Every record of ``topic`` up to each partition's high watermark, per partition."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        client_id="rlmm-test-raw-reader",
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        for t in tps:
            consumer.seek(t, 0)
        out: dict[int, list[RawRecord]] = {p: [] for p in range(partitions)}
        pending = set(tps)
        async with asyncio.timeout(timeout_s):
            while pending:
                fetched = await consumer.getmany(*pending, timeout_ms=200)
                for t, records in fetched.items():
                    out[t.partition].extend(
                        RawRecord(t.partition, r.offset, r.key, r.value or b"") for r in records
                    )
                for t in list(pending):
                    high = consumer.highwater(t)
                    if high is not None and await consumer.position(t) >= high:
                        pending.discard(t)
        return out
    finally:
        await consumer.stop()


def decode_records(records: Iterable[RawRecord]) -> list[RemoteLogMetadata]:
    return [decode(r.value) for r in records]


def replay(records: dict[int, list[RawRecord]]) -> RemotePartitionMetadataStore:
    """A fresh store fed every record, partition by partition, in offset order."""
    store = RemotePartitionMetadataStore()
    for p in sorted(records):
        for record in sorted(records[p], key=lambda r: r.offset):
            # skipped when illegal (e.g. an at-least-once duplicate of an add), exactly
            # as the manager's apply loop skips it
            with contextlib.suppress(RemoteStorageError):
                store.apply(decode(record.value))
    return store


def digest(fingerprint: Any) -> str:
    """sha256 of the fingerprint's repr: stable across processes (uuids, ints, bytes)."""
    return hashlib.sha256(repr(fingerprint).encode()).hexdigest()


def segment_count(store: RemotePartitionMetadataStore, tps: Iterable[TopicIdPartition]) -> int:
    wanted = set(tps)
    return sum(len(c.segments) for tp, c in store.caches.items() if tp in wanted)


def tp_to_json(tp: TopicIdPartition) -> list[Any]:
    return [tp.topic_id.hex, tp.topic, tp.partition]


def tp_from_json(data: list[Any]) -> TopicIdPartition:
    return TopicIdPartition(uuid.UUID(hex=data[0]), str(data[1]), int(data[2]))


def dumps(data: Any) -> str:
    return json.dumps(data, sort_keys=True)


_ORDER = {
    RemoteLogSegmentState.COPY_SEGMENT_STARTED: 0,
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED: 1,
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED: 2,
    RemoteLogSegmentState.DELETE_SEGMENT_FINISHED: 3,  # also: gone from the cache
}


def unmet_acknowledged(
    acked: Iterable[RemoteLogMetadata],
    current: dict[RemoteLogSegmentId, RemoteLogSegmentState],
) -> list[str]:
    """Acknowledged segment writes whose effect is missing from ``current``.

    ``current`` maps each live segment to its state; a segment that is absent is gone
    (DELETE_SEGMENT_FINISHED). A writer issues one write per segment at a time, so the
    final state is the last acknowledged one or, if a write whose acknowledgement was
    lost (a crash, a failed retry) did land, exactly one step further.
    """
    last: dict[RemoteLogSegmentId, int] = {}
    for event in acked:
        if isinstance(event, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate):
            sid = event.remote_log_segment_id
            last[sid] = max(last.get(sid, 0), _ORDER[event.state])
    problems = []
    for sid, acked_step in last.items():
        state = current.get(sid)
        step = 3 if state is None else _ORDER[state]
        if not acked_step <= step <= acked_step + 1:
            problems.append(
                f"{sid}: acknowledged up to step {acked_step}, found "
                f"{'nothing' if state is None else state.name}"
            )
    return problems
