"""Quickstart: the RLMM on the embedded defaults (file event log, local snapshots).

Run: ``python examples/quickstart.py [DATA_DIR]``. Publishes one segment's lifecycle
(COPY_SEGMENT_STARTED -> COPY_SEGMENT_FINISHED), looks it up, restarts from the
snapshot and looks it up again. Everything it starts is closed: it runs clean with
``python -W error``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
import uuid

from rlmm import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from rlmm.config import load_config
from rlmm.factory import create_manager, open_event_log


async def main(data_dir: str) -> None:
    config = load_config("config/embedded.toml", overrides={"data_dir": data_dir})
    tp = TopicIdPartition(uuid.uuid4(), "orders", 0)
    now_ms = int(time.time() * 1000)

    # The manager owns the event log it starts: close() closes it (and snapshots).
    async with create_manager(config, open_event_log(config)) as manager:
        await manager.on_partition_leadership_changes([tp], [])
        await manager.wait_until_ready([tp], 60)
        segment = RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate_new(tp),
            start_offset=0,
            end_offset=999,
            max_timestamp_ms=now_ms,
            broker_id=config.broker_id,
            event_timestamp_ms=now_ms,
            segment_size_in_bytes=1 << 20,
            segment_leader_epochs={0: 0},
        )
        await manager.add_remote_log_segment_metadata(segment)  # returns once applied
        await manager.update_remote_log_segment_metadata(
            RemoteLogSegmentMetadataUpdate(
                segment.remote_log_segment_id,
                event_timestamp_ms=now_ms,
                custom_metadata=None,
                state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                broker_id=config.broker_id,
            )
        )
        found = manager.remote_log_segment_metadata(tp, 0, 500)  # plain cache read
        print("offset 500 is in", found.remote_log_segment_id if found else None)

    # A restart loads the snapshot written by close() and replays only the tail.
    async with create_manager(config, open_event_log(config)) as manager:
        await manager.on_partition_leadership_changes([tp], [])
        await manager.wait_until_ready([tp], 60)
        found = manager.remote_log_segment_metadata(tp, 0, 500)
        print("after restart:", found.state.name if found else None)
        print("restored from snapshot:", manager.stats.restored_from_snapshot)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        asyncio.run(main(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(main(tmp))
