"""Child process for the multi-process Kafka tests: one manager, its own user partitions.

Run as ``python -m tests.integration.manager_worker '<json spec>'`` from the repo
root. The spec names the broker, topic, metadata partition count, the user
partitions this process leads (and writes) and follows (only reads), how many
segment lifecycles to write per led partition, and optionally a snapshot dir.

Protocol on stdout (one line each, flushed), driven by lines on stdin:
- ``READY`` once every assigned partition is ready; then waits for ``GO``;
- ``ACK <hex of the encoded event>`` after every acknowledged write (so a parent
  that SIGKILLs this process knows exactly which writes must survive);
- ``DONE <acked count>`` when all writers finished; then waits for ``STATE``;
- ``STATE <json>``: after catching up to the log end of every metadata partition it
  consumes, the digest of its fingerprint for its partitions, applied offsets and
  stats; then it closes the manager and exits 0. A failed write prints ``ERR`` and
  exits 1.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from eventlog.kafka import KafkaEventLog, KafkaLogSettings
from rlmm.codec import encode
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.model import RemoteLogMetadata, RemoteLogSegmentState, TopicIdPartition
from rlmm.partitioning import metadata_partition_for
from rlmm.snapshotting import SnapshotPolicy
from tests.integration.kafka_replay import digest, dumps, tp_from_json
from tests.rlmm.factories import segment, update

S = RemoteLogSegmentState


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def read_command() -> str:
    return (await asyncio.to_thread(sys.stdin.readline)).strip()


async def write_lifecycles(
    manager: TopicBasedRemoteLogMetadataManager, tp: TopicIdPartition, count: int, seed: int
) -> int:
    """``count`` segment lifecycles on ``tp``: STARTED, FINISHED, sometimes deleted."""
    rng = random.Random(seed)
    acked = 0
    for i in range(count):
        m = segment(tp, i * 100, i * 100 + 99, {i // 10: i * 100}, size=rng.randrange(1, 999))
        events: list[RemoteLogMetadata] = [m, update(m, S.COPY_SEGMENT_FINISHED)]
        if rng.random() < 0.3:
            events += [update(m, S.DELETE_SEGMENT_STARTED), update(m, S.DELETE_SEGMENT_FINISHED)]
        for event in events:
            if event is m:
                await manager.add_remote_log_segment_metadata(m)
            else:
                await manager.update_remote_log_segment_metadata(event)  # type: ignore[arg-type]
            say(f"ACK {encode(event).hex()}")
            acked += 1
    return acked


async def catch_up(
    manager: TopicBasedRemoteLogMetadataManager, log: KafkaEventLog, timeout_s: float
) -> None:
    """Wait until every consumed metadata partition is applied up to its log end."""
    partitions = sorted(manager.applied_offsets)
    ends = await log.end_offsets(partitions)
    deadline = time.monotonic() + timeout_s
    while any(manager.applied_offsets.get(p, -1) < ends[p] - 1 for p in partitions):
        if time.monotonic() > deadline:
            raise TimeoutError(f"not caught up: applied {manager.applied_offsets}, ends {ends}")
        # A test process: polling here is simpler than reaching into the apply loop.
        await asyncio.sleep(0.02)


async def main(spec: dict[str, Any]) -> int:
    leaders = [tp_from_json(t) for t in spec["leaders"]]
    followers = [tp_from_json(t) for t in spec["followers"]]
    log = KafkaEventLog(
        spec["bootstrap"],
        spec["partitions"],
        KafkaLogSettings(
            topic=spec["topic"],
            replication_factor=1,
            consumer_config={"fetch_max_wait_ms": spec.get("fetch_max_wait_ms", 20)},
        ),
    )
    policy = None
    if spec.get("snapshot_dir"):
        policy = SnapshotPolicy(
            Path(spec["snapshot_dir"]), every_events=spec["every_events"], interval_s=3600
        )
    manager = TopicBasedRemoteLogMetadataManager(log, snapshot_policy=policy, close_event_log=True)
    await manager.start()
    try:
        await manager.on_partition_leadership_changes(leaders, followers)
        await manager.wait_until_ready([*leaders, *followers], 30)
        say("READY")
        if await read_command() != "GO":
            return 2
        try:
            counts = await asyncio.gather(
                *(
                    write_lifecycles(manager, tp, spec["lifecycles"], spec["seed"] * 1000 + i)
                    for i, tp in enumerate(leaders)
                )
            )
        except Exception as e:
            say(f"ERR {e!r}")
            return 1
        say(f"DONE {sum(counts)}")
        if await read_command() != "STATE":
            return 2
        await catch_up(manager, log, 30)
        mine = [*leaders, *followers]
        state = {
            "digest": digest(manager.fingerprint(mine)),
            "segments": sum(len(manager.list_remote_log_segments(tp)) for tp in mine),
            "metadata_partitions": sorted(
                {metadata_partition_for(tp, log.partition_count) for tp in mine}
            ),
            "applied": manager.applied_offsets,
            "applied_events": manager.stats.applied_events,
            "skipped_invalid": manager.stats.skipped_invalid,
            "skipped_undecodable": manager.stats.skipped_undecodable,
            "restored_from_snapshot": manager.stats.restored_from_snapshot,
        }
        say(f"STATE {dumps(state)}")
        return 0
    finally:
        await manager.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(json.loads(sys.argv[1]))))
