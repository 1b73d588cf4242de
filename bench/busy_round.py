"""Benchmark: the CPU of one busy offload round of a partition, by how many segments
its remote tier keeps.

A partition whose archive keeps ``--kept`` FINISHED segments (signed ids, a manifest
each, as the sidecar writes them) in a ``TopicBasedRemoteLogMetadataManager`` over the
embedded event log; its local log (a real partition dir, written by the segment
writer) ends before the archive does, so a round finds nothing to copy or delete and
does only what it does to every kept segment each time the metadata changed: the hole
check, expiry's totals and walk, the epoch-lineage check and the check for segments
rlmm did not write (``copy_round``, ``expire_round``, ``foreign_segments``). Each
figure is the best of ``--repeat`` runs of ``--rounds`` rounds (process CPU time).
The baseline, in the same run: one listing of the same archive
(``list_remote_log_segments``: an object per kept segment), which rounds used to make
about five times over. No target: the figures say what an archive that keeps growing
costs a sidecar per busy round. Prints ONE JSON document.

Usage: python bench/busy_round.py [--kept 500,2000,8000] [--rounds 4] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._archive import copy_manifest  # noqa: E402
from bench._machine import machine  # noqa: E402
from remote.local import LocalRemoteStorageManager  # noqa: E402
from remote.segments import PartitionDir, PartitionDirWriter  # noqa: E402
from remote.segments.writer import generate_records  # noqa: E402
from rlmm.config import load_config  # noqa: E402
from rlmm.factory import create_manager, open_event_log  # noqa: E402
from rlmm.model import (  # noqa: E402
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    new_rlmm_segment_id,
)
from rlmm.offload import LogDirSource, RemoteLogManager, RetentionSettings  # noqa: E402

S = RemoteLogSegmentState
SPAN = 100  # offsets per archived segment


def _cpu(fn: Any, rounds: int, repeat: int) -> float:
    """Best CPU seconds of one call of ``fn`` (awaited), over ``repeat`` runs of ``rounds``."""
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        for _ in range(rounds):
            fn()
        best = min(best, (time.process_time() - t) / rounds)
    return best


async def _measure(kept: int, rounds: int, repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="rlmm-busy-round-") as work:
        config = load_config(
            ROOT / "config" / "embedded.toml", env={}, overrides={"data_dir": work}
        )
        manager = create_manager(config, open_event_log(config))
        store = LocalRemoteStorageManager(Path(work) / "remote", fsync=False)
        await manager.start()
        rlm = None
        try:
            logs = Path(work) / "logs"
            with PartitionDirWriter(logs, "orders", 0, segment_bytes=16 * 1024) as writer:
                writer.append_records(generate_records(300), batch_records=10)
            pdir = PartitionDir(logs / "orders-0")
            source = LogDirSource(pdir, RetentionSettings(retention_ms=-1, retention_bytes=-1))
            tp = source.topic_id_partition
            await manager.on_partition_leadership_changes([tp], [])
            await manager.wait_until_ready([tp], 30)
            for i in range(kept):  # the archive reaches past the local log: nothing to copy
                m = RemoteLogSegmentMetadata(
                    new_rlmm_segment_id(tp), i * SPAN, i * SPAN + SPAN - 1,
                    max_timestamp_ms=1_700_000_000_000 + i, broker_id=0,
                    event_timestamp_ms=1_700_000_000_000 + i, segment_size_in_bytes=1 << 20,
                    segment_leader_epochs={0: i * SPAN}, state=S.COPY_SEGMENT_STARTED,
                )  # fmt: skip
                await manager.add_remote_log_segment_metadata(m)
                done = RemoteLogSegmentMetadataUpdate(
                    m.remote_log_segment_id, 1_700_000_000_001 + i, copy_manifest(i),
                    S.COPY_SEGMENT_FINISHED, 0,
                )  # fmt: skip
                await manager.update_remote_log_segment_metadata(done)
            rlm = RemoteLogManager(manager, store, retry_backoff_s=0.0)
            await rlm.on_leadership_changes([source], start_tasks=False)

            async def busy_round() -> None:
                rlm._leftovers.no_foreign.clear()  # the metadata changed: the sidecar asks again
                await rlm.copy_round(tp)
                await rlm.expire_round(tp)
                await rlm.foreign_segments(tp)

            await busy_round()  # warm
            best = float("inf")
            for _ in range(repeat):
                t = time.process_time()
                for _ in range(rounds):
                    await busy_round()
                best = min(best, (time.process_time() - t) / rounds)
            listing = _cpu(lambda: manager.list_remote_log_segments(tp), rounds, repeat)
            return {
                "kept": kept,
                "round_ms": round(best * 1000, 2),
                "round_us_per_kept_segment": round(best * 1e6 / kept, 2),
                "listing_ms": round(listing * 1000, 2),
                "round_in_listings": round(best / listing, 2),
            }
        finally:
            if rlm is not None:
                await rlm.close()
            store.close()
            await manager.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kept", default="500,2000,8000", help="archive sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(k) for k in args.kept.split(",")]
    runs = [asyncio.run(_measure(k, args.rounds, args.repeat)) for k in sizes]
    print(json.dumps({"bench": "busy_round", "machine": machine(), "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
