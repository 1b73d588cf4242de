"""Builders for the archive tests: real partition dirs, offloaded through the manager.

Segments are written by remote.PartitionDirWriter and copied the way Kafka's
RemoteLogManager (and rlmm/cli/demo.py) does: COPY_SEGMENT_STARTED, RSM copy,
COPY_SEGMENT_FINISHED, all through a real TopicBasedRemoteLogMetadataManager.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from remote import RemoteStorageManager
from remote.segment_data import log_segment_data
from remote.segments import PartitionDir, PartitionDirWriter, ProducerRecord, generate_records
from rlmm.config import RlmmConfig, load_config
from rlmm.factory import create_manager, open_event_log, open_remote_storage
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)

PARTITIONS = 4


def make_config(data_dir: Path, **overrides: Any) -> RlmmConfig:
    """Embedded defaults under ``data_dir`` with a small event log."""
    settings: dict[str, Any] = {"data_dir": str(data_dir), "eventlog.partitions": PARTITIONS}
    settings.update(overrides)
    return load_config(None, overrides=settings, env={})


def segment_metadata(
    tp: TopicIdPartition, seg: Any, broker_id: int = 0
) -> tuple[RemoteLogSegmentMetadata, Any]:
    summary = seg.summary()
    metadata = RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(tp),
        summary.base_offset,
        summary.end_offset,
        summary.max_timestamp_ms,
        broker_id,
        int(time.time() * 1000),
        summary.size_in_bytes,
        summary.segment_leader_epochs,
        txn_index_empty=summary.txn_index_empty,
    )
    return metadata, summary


async def copy_segment(
    manager: TopicBasedRemoteLogMetadataManager,
    rsm: RemoteStorageManager,
    tp: TopicIdPartition,
    seg: Any,
    *,
    finish: bool = True,
    epochs: Mapping[int, int] | None = None,
) -> RemoteLogSegmentMetadata:
    """STARTED -> RSM copy -> FINISHED (unless ``finish`` is false) of one rolled segment."""
    metadata, summary = segment_metadata(tp, seg)
    if epochs is not None:
        metadata = RemoteLogSegmentMetadata(
            metadata.remote_log_segment_id,
            metadata.start_offset,
            metadata.end_offset,
            metadata.max_timestamp_ms,
            metadata.broker_id,
            metadata.event_timestamp_ms,
            metadata.segment_size_in_bytes,
            epochs,
            txn_index_empty=metadata.txn_index_empty,
        )
    await manager.add_remote_log_segment_metadata(metadata)
    custom = await asyncio.to_thread(
        rsm.copy_log_segment_data, metadata, log_segment_data(seg, summary)
    )
    if not finish:
        return metadata
    update = RemoteLogSegmentMetadataUpdate(
        metadata.remote_log_segment_id,
        int(time.time() * 1000),
        custom,
        RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        0,
    )
    await manager.update_remote_log_segment_metadata(update)
    return metadata.create_with_updates(update)


async def offload(
    config: RlmmConfig, pdirs: Iterable[PartitionDir], *, skip_active: bool = True
) -> dict[TopicIdPartition, list[RemoteLogSegmentMetadata]]:
    """Copy every rolled segment of each partition dir; the metadata of each copy."""
    pdirs = list(pdirs)
    tps = [p.topic_id_partition() for p in pdirs]
    rsm = open_remote_storage(config)
    out: dict[TopicIdPartition, list[RemoteLogSegmentMetadata]] = {}
    try:
        async with create_manager(config, open_event_log(config)) as manager:
            await manager.on_partition_leadership_changes(tps, [])
            await manager.wait_until_ready(tps, 30)
            for tp, pdir in zip(tps, pdirs, strict=True):
                segments = pdir.segments()
                if skip_active:
                    segments = segments[:-1]
                out[tp] = [await copy_segment(manager, rsm, tp, seg) for seg in segments]
    finally:
        rsm.close()
    return out


# ---- a partition history with every feature the reader must handle ------------------

BASE_TS = 1_700_000_000_000


class Expected(NamedTuple):
    """One data record as written (``aborted``: part of an aborted transaction)."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int
    aborted: bool


def write_history(
    parent: Path,
    topic: str,
    partition: int,
    codec: str = "none",
    *,
    topic_id: uuid.UUID | None = None,
    segment_records: int = 100,
) -> tuple[PartitionDir, list[Expected]]:
    """Two leader epochs, committed and aborted transactions (one interleaved with plain
    records), null keys and values, headers; every record after the last segment roll
    is in the active segment (not archived)."""
    expected: list[Expected] = []
    with PartitionDirWriter(
        parent,
        topic,
        partition,
        topic_id=topic_id,
        segment_records=segment_records,
        index_interval_bytes=512,
        compression=codec,
    ) as w:

        def add(records: list[ProducerRecord], aborted: bool = False, **options: Any) -> None:
            headers = w.append_records(records, batch_records=10, **options)
            offsets = [o for h in headers for o in range(h.base_offset, h.last_offset + 1)]
            for offset, r in zip(offsets, records, strict=True):
                assert r.timestamp is not None
                expected.append(Expected(offset, r.key, r.value, r.headers, r.timestamp, aborted))

        txn = {"producer_epoch": 0, "transactional": True}
        add(generate_records(200, value_size=40))
        add([ProducerRecord(None, b"no key", (), BASE_TS + 200)])
        add([ProducerRecord(b"no value", None, (("h", None),), BASE_TS + 201)])
        add(generate_records(20, start=202), producer_id=5, **txn)
        w.commit_transaction(5, 0, timestamp=BASE_TS + 221)
        add(generate_records(10, start=222), aborted=True, producer_id=6, **txn)
        add(generate_records(10, start=232))
        add(generate_records(5, start=242), aborted=True, producer_id=6, **txn)
        w.abort_transaction(6, 0, timestamp=BASE_TS + 246)
        w.set_leader_epoch(2)
        add(generate_records(200, start=247, value_size=40))
        add(generate_records(12, start=447), aborted=True, producer_id=7, **txn)
        w.abort_transaction(7, 0, timestamp=BASE_TS + 458)
        add(generate_records(150, start=459, value_size=40))
    pdir = PartitionDir(parent / f"{topic}-{partition}")
    return pdir, expected


def archived(pdir: PartitionDir, expected: list[Expected]) -> list[Expected]:
    """What offload() copies: everything before the active segment."""
    active = pdir.segments()[-1].base_offset
    return [e for e in expected if e.offset < active]


def rows(batches: Iterable[pa.RecordBatch]) -> list[tuple[Any, ...]]:
    """(offset, key, value, headers, timestamp ms, timestampType) of every row read."""
    out: list[tuple[Any, ...]] = []
    for batch in batches:
        millis = pc.divide(batch.column("timestamp").cast(pa.int64()), 1000).to_pylist()
        has_headers = "headers" in batch.schema.names
        headers = batch.column("headers").to_pylist() if has_headers else [None] * batch.num_rows
        for offset, key, value, h, ts, tst in zip(
            batch.column("offset").to_pylist(),
            batch.column("key").to_pylist(),
            batch.column("value").to_pylist(),
            headers,
            millis,
            batch.column("timestampType").to_pylist(),
            strict=True,
        ):
            hs = None if h is None else tuple((x["key"], x["value"]) for x in h)
            out.append((offset, key, value, hs, ts, tst))
    return out


def expected_rows(expected: Iterable[Expected], headers: bool = True) -> list[tuple[Any, ...]]:
    return [
        (e.offset, e.key, e.value, tuple(e.headers) if headers else None, e.timestamp, 0)
        for e in expected
    ]
