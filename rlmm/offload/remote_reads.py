"""Remote reads: a byte range of a remote segment, as a broker's fetch asks it.

Invariant: every read is counted in the fetch metrics of its topic (Kafka's
RemoteFetchRequests/Bytes/Errors): a request before the read, its bytes after it, an
error for any read that raises (a cancellation too, then re-raised); the RSM call runs
in a worker thread bounded by the RSM slots the copies and deletes share.
"""

from __future__ import annotations

import asyncio

from remote import RemoteStorageManager
from rlmm.model import RemoteLogSegmentMetadata
from rlmm.offload.blocking import run_blocking
from rlmm.offload.metrics import OffloadMetrics


def _read_range(
    rsm: RemoteStorageManager, metadata: RemoteLogSegmentMetadata, start: int, end: int | None
) -> bytes:
    with rsm.fetch_log_segment(metadata, start, end) as stream:
        return stream.read()


async def read_range(
    rsm: RemoteStorageManager,
    io_slots: asyncio.Semaphore,
    metrics: OffloadMetrics,
    metadata: RemoteLogSegmentMetadata,
    start_position: int,
    end_position: int | None,
) -> bytes:
    """Bytes ``start_position..end_position`` (inclusive) of a remote segment, counted."""
    topic = metadata.topic_id_partition.topic
    metrics.fetch_requests.labels(topic).inc()
    try:
        data = await run_blocking(
            io_slots, _read_range, rsm, metadata, start_position, end_position
        )
    except BaseException:
        metrics.fetch_errors.labels(topic).inc()
        raise
    metrics.fetch_bytes.labels(topic).inc(len(data))
    return data


__all__ = ["read_range"]
