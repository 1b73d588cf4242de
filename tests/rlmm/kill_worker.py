"""Child process for the SIGKILL tests: random RLMM traffic on FileEventLog + snapshots.

``python -m tests.rlmm.kill_worker DIR SEED [retention]``: with ``retention`` the log
has small segments and the manager registers retention claims, so segments are
deleted while it runs. Prints ``ACK <hex of the encoded event>`` (flushed) after every
acknowledged write, so the parent knows exactly what must survive the kill.
"""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path

from eventlog.file import FileEventLog
from rlmm.codec import encode
from rlmm.errors import RemoteStorageError
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.model import RemoteLogMetadata, RemoteLogSegmentState
from rlmm.snapshotting import SnapshotPolicy
from tests.rlmm.factories import segment, tp, update

PARTITIONS = 4
TPS = [tp(i) for i in range(6)]
S = RemoteLogSegmentState


def open_manager(
    directory: Path, every_events: int, retention: bool = False
) -> TopicBasedRemoteLogMetadataManager:
    segment_bytes = 4096 if retention else 64 * 1024
    log = FileEventLog(directory / "log", PARTITIONS, segment_bytes=segment_bytes)
    policy = SnapshotPolicy(
        directory / "snapshots", every_events=every_events, interval_s=3600, retention=retention
    )
    return TopicBasedRemoteLogMetadataManager(log, snapshot_policy=policy, close_event_log=True)


async def writer(manager: TopicBasedRemoteLogMetadataManager, seed: int) -> None:
    rng = random.Random(seed)
    offset = seed * 10_000_000
    while True:
        t = rng.choice(TPS)
        m = segment(t, offset, offset + 99, {offset // 1000: offset}, size=rng.randrange(1, 999))
        offset += 100
        events: list[RemoteLogMetadata] = [m, update(m, S.COPY_SEGMENT_FINISHED)]
        if rng.random() < 0.3:
            events += [update(m, S.DELETE_SEGMENT_STARTED), update(m, S.DELETE_SEGMENT_FINISHED)]
        for event in events:
            try:
                if event is m:
                    await manager.add_remote_log_segment_metadata(m)
                else:
                    await manager.update_remote_log_segment_metadata(event)  # type: ignore[arg-type]
            except RemoteStorageError as e:
                print(f"ERR {e}", flush=True)
                return
            sys.stdout.write(f"ACK {encode(event).hex()}\n")
            sys.stdout.flush()


async def main(directory: Path, seed: int, retention: bool) -> None:
    rng = random.Random(seed)
    manager = open_manager(directory, every_events=rng.randrange(3, 40), retention=retention)
    await manager.start()
    await manager.on_partition_leadership_changes(TPS, [])
    await manager.wait_until_ready(TPS, 30)
    print("READY", flush=True)
    await asyncio.gather(*(writer(manager, seed * 100 + i) for i in range(8)))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:] == ["retention"]))
