"""Benchmark: the metadata manager's memory per archived segment, with its event log.

A ``TopicBasedRemoteLogMetadataManager`` over the embedded file event log (the
sidecar's default, ``config/embedded.toml``) leads ``--partitions`` user partitions
and records ``--segments`` segments (each an add then a COPY_SEGMENT_FINISHED update
carrying a manifest as its custom metadata, as a copy does). The resident memory
after a full collection, before and after, gives the bytes per segment the process
keeps (the cache, the event log's in-memory tail, the allocator's share), and the
interpreter's allocated blocks the small objects it keeps per segment (each one kept
for good pins a small-object pool among a round's transient objects); a second pass
of the same work under tracemalloc gives the Python heap's share and its top sites.
No target: the figure says what a sidecar's RSS grows by per segment it archives and
keeps, which is what a topic kept forever costs it. Prints ONE JSON document.

Usage: python bench/metadata_memory.py [--segments 8000] [--partitions 7]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import tempfile
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._archive import copy_manifest  # noqa: E402
from bench._machine import machine  # noqa: E402
from rlmm.config import load_config  # noqa: E402
from rlmm.factory import create_manager, open_event_log  # noqa: E402
from rlmm.model import (  # noqa: E402
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)

MIB = 1 << 20


def _rss() -> int:
    gc.collect()
    return int(psutil.Process().memory_info().rss)


async def _record(segments: int, partitions: int, traced: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rlmm-metadata-memory-") as work:
        config = load_config(
            ROOT / "config" / "embedded.toml", env={}, overrides={"data_dir": work}
        )
        manager = create_manager(config, open_event_log(config))
        await manager.start()
        try:
            topic_id = uuid.uuid4()
            tps = [TopicIdPartition(topic_id, "bench", p) for p in range(partitions)]
            await manager.on_partition_leadership_changes(tps, [])
            await manager.wait_until_ready(tps, 30)
            if traced:
                tracemalloc.start(10)
            before, heap_before = _rss(), tracemalloc.get_traced_memory()[0]
            blocks = sys.getallocatedblocks()
            first = tracemalloc.take_snapshot() if traced else None
            for i in range(segments):
                tp, start = tps[i % partitions], (i // partitions) * 1000
                m = RemoteLogSegmentMetadata(
                    RemoteLogSegmentId.generate_new(tp), start, start + 999,
                    max_timestamp_ms=1_700_000_000_000 + i, broker_id=0,
                    event_timestamp_ms=1_700_000_000_000 + i, segment_size_in_bytes=1 << 20,
                    segment_leader_epochs={0: start},
                    state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
                )  # fmt: skip
                await manager.add_remote_log_segment_metadata(m)
                done = RemoteLogSegmentMetadataUpdate(
                    m.remote_log_segment_id, 1_700_000_000_001 + i, copy_manifest(i),
                    RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 0,
                )  # fmt: skip
                await manager.update_remote_log_segment_metadata(done)
            after, heap_after = _rss(), tracemalloc.get_traced_memory()[0]
            out: dict[str, Any] = {
                "rss_bytes_per_segment": round((after - before) / segments),
                "small_objects_per_segment": round(
                    (sys.getallocatedblocks() - blocks) / segments, 2
                ),
            }
            if traced and first is not None:
                top = tracemalloc.take_snapshot().compare_to(first, "lineno")[:8]
                out = {
                    "heap_bytes_per_segment": round((heap_after - heap_before) / segments),
                    "top_sites": [
                        {
                            "site": str(s.traceback[0]),
                            "bytes_per_segment": round(s.size_diff / segments),
                        }
                        for s in top
                    ],
                }
                tracemalloc.stop()
            return out
        finally:
            await manager.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--segments", type=int, default=8000)
    parser.add_argument("--partitions", type=int, default=7)
    args = parser.parse_args()
    untraced = asyncio.run(_record(args.segments, args.partitions, traced=False))
    traced = asyncio.run(_record(args.segments, args.partitions, traced=True))
    print(json.dumps({
        "bench": "metadata_memory", "machine": machine(), "segments": args.segments,
        "partitions": args.partitions, **untraced, **traced,
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
