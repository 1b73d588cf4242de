"""Builders for the archive tests: real partition dirs, offloaded through the manager.

Segments are written by remote.PartitionDirWriter and copied the way Kafka's
RemoteLogManager (and rlmm/demo.py) does: COPY_SEGMENT_STARTED, RSM copy,
COPY_SEGMENT_FINISHED, all through a real TopicBasedRemoteLogMetadataManager.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from remote import PartitionDir, RemoteStorageManager
from remote.segment_data import log_segment_data
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
