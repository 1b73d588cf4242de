"""Child process for the view's cross-process test (run as a script, not collected).

``python -m tests.rlmm.archive._writer_child DATA_DIR``: runs a manager on the file
event log under DATA_DIR (holding its writer LOCK) and keeps adding and finishing
segment metadata for topic "live" partition 0, one 100-offset segment after another;
prints "ready" once the first 20 segments are applied, then continues until stdin
closes, then prints the number of segments finished and exits.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

from rlmm.factory import create_manager, open_event_log
from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tests.rlmm.archive.archive_data import make_config

TP = TopicIdPartition(uuid.UUID(int=7), "live", 0)


async def run(data_dir: Path) -> None:
    config = make_config(data_dir)
    stop = asyncio.ensure_future(asyncio.to_thread(sys.stdin.read))
    count = 0
    async with create_manager(config, open_event_log(config)) as manager:
        await manager.on_partition_leadership_changes([TP], [])
        await manager.wait_until_ready([TP], 30)
        while not stop.done():
            start = count * 100
            sid = RemoteLogSegmentId.generate_new(TP)
            m = RemoteLogSegmentMetadata(sid, start, start + 99, start, 0, 1, 1000, {0: start})
            await manager.add_remote_log_segment_metadata(m)
            await manager.update_remote_log_segment_metadata(
                RemoteLogSegmentMetadataUpdate(
                    m.remote_log_segment_id, 2, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 0
                )
            )
            count += 1
            if count == 20:
                print("ready", flush=True)
            await asyncio.sleep(0.001)
    print(count, flush=True)


if __name__ == "__main__":
    asyncio.run(run(Path(sys.argv[1])))
