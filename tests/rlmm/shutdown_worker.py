"""Child process for the shutdown tests: managers that are (or are not) closed.

``python -m tests.rlmm.shutdown_worker BACKEND WHERE MODE``: BACKEND is memory, file
or kafka; WHERE is a directory (file) or a bootstrap address (kafka); MODE is
``close`` (two managers write, both are closed) or ``unclosed`` (two managers, writes
still in flight, nothing closed). The coroutine given to ``asyncio.run`` then returns;
the process prints ``RETURNED`` once ``asyncio.run`` is back.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

from eventlog import EventLog
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.model import RemoteLogSegmentState
from tests.rlmm.factories import segment, tp, update

PARTITIONS = 3


def open_log(backend: str, where: str, topic: str, index: int) -> EventLog:
    if backend == "memory":
        from eventlog.memory import MemoryEventLog

        return MemoryEventLog(PARTITIONS)
    if backend == "file":
        from eventlog.file import FileEventLog

        # One writer per directory (LOCK): each manager its own log.
        return FileEventLog(Path(where) / f"log-{index}", PARTITIONS)
    from eventlog.kafka import KafkaEventLog, KafkaLogSettings

    return KafkaEventLog(
        where,
        PARTITIONS,
        KafkaLogSettings(
            topic=topic, replication_factor=1, consumer_config={"fetch_max_wait_ms": 20}
        ),
    )


async def main(backend: str, where: str, mode: str) -> None:
    topic = f"rlmm-shutdown-{uuid.uuid4().hex[:8]}"
    managers = [
        TopicBasedRemoteLogMetadataManager(open_log(backend, where, topic, i)) for i in range(2)
    ]
    t = tp(0)
    for manager in managers:
        await manager.start()
        await manager.on_partition_leadership_changes([t], [])
        await manager.wait_until_ready([t], 30)
    first = segment(t, 0, 99, {0: 0})
    await managers[0].add_remote_log_segment_metadata(first)
    await managers[0].update_remote_log_segment_metadata(
        update(first, RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
    )
    if mode == "close":
        for manager in managers:
            await manager.close()
        return
    # Writes in flight on both managers; nobody closes anything.
    in_flight = []
    for i, manager in enumerate(managers):
        start = 100 * (i + 1) * 1000
        for j in range(20):
            m = segment(t, start + 100 * j, start + 100 * j + 99, {0: 0})
            in_flight.append(asyncio.ensure_future(manager.add_remote_log_segment_metadata(m)))
    await asyncio.sleep(0)
    assert not all(f.done() for f in in_flight)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
    print("RETURNED", flush=True)
