"""The manager across a broker crash: the broker is SIGKILLed mid-workload.

Brokers: Tansu on s3:// (moto), and Apache Kafka restarted on its ports and log dirs.

Invariants checked, on one manager instance that is never restarted:
- no acknowledged write is lost: its bytes are on the topic and its effect is in the
  final state (exactly; a write whose acknowledgement was lost may have landed too);
- a write during the outage either succeeds after the log's retries or fails with a
  clear typed error; writes after the broker is back succeed;
- the apply loop resumes by itself and the final state equals a sequential replay
  of the topic read by an independent raw consumer.
Tolerated, as documented by KafkaEventLog: holes at never-acknowledged offsets
(Tansu's s3 engine) and at-least-once duplicates of a retried append, which the
apply loop rejects and counts in ``stats.skipped_invalid``.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from uuid import uuid4

import pytest

from eventlog.errors import EventLogError, EventLogTransportError
from eventlog.kafka import KafkaEventLog, KafkaLogSettings
from rlmm.codec import encode
from rlmm.errors import (
    InvalidStateTransitionError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageTimeoutError,
)
from rlmm.manager import TopicBasedRemoteLogMetadataManager
from rlmm.model import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tests.fixtures.kafka import RestartableBroker
from tests.integration.kafka_replay import digest, read_topic, replay, unmet_acknowledged
from tests.rlmm.factories import S, segment, tp, update

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

N = 3
WRITES_AFTER_RESTART = 30  # per writer


def segment_states(
    manager: TopicBasedRemoteLogMetadataManager, tps: list[TopicIdPartition]
) -> dict[RemoteLogSegmentId, RemoteLogSegmentState]:
    return {
        s.remote_log_segment_id: s.state for t in tps for s in manager.list_remote_log_segments(t)
    }


async def test_manager_recovers_from_broker_sigkill_without_restarting(
    crashable_kafka: RestartableBroker,
) -> None:
    topic = f"rlmm-crash-{uuid4().hex[:8]}"
    log = KafkaEventLog(
        crashable_kafka.bootstrap,
        N,
        KafkaLogSettings(
            topic=topic,
            replication_factor=1,
            request_timeout_ms=2_000,
            delivery_timeout_ms=20_000,
            retry_backoff_max_ms=300,
            consumer_config={"fetch_max_wait_ms": 20},
        ),
    )
    manager = TopicBasedRemoteLogMetadataManager(log, write_timeout_s=30, close_event_log=True)
    tps = [tp(i) for i in range(4)]
    acked: list[RemoteLogMetadata] = []
    failures: list[Exception] = []
    restarted = asyncio.Event()

    async def writer(t: TopicIdPartition, seed: int) -> None:
        rng = random.Random(seed)
        after = 0
        i = 0
        while after < WRITES_AFTER_RESTART:
            m = segment(t, i * 100, i * 100 + 99, {i // 10: i * 100}, size=rng.randrange(1, 99))
            i += 1
            events: list[RemoteLogMetadata] = [m, update(m, S.COPY_SEGMENT_FINISHED)]
            if rng.random() < 0.3:
                events += [
                    update(m, S.DELETE_SEGMENT_STARTED),
                    update(m, S.DELETE_SEGMENT_FINISHED),
                ]
            for event in events:
                try:
                    if event is m:
                        await manager.add_remote_log_segment_metadata(m)
                    else:
                        await manager.update_remote_log_segment_metadata(event)  # type: ignore[arg-type]
                except (EventLogError, RemoteStorageError) as e:
                    # The segment's state is now unknown (the write may have landed):
                    # like a real copy task, give it up and start a new one.
                    failures.append(e)
                    break
                acked.append(event)
                if restarted.is_set():
                    after += 1
            await asyncio.sleep(0.002)

    async with manager:
        await manager.on_partition_leadership_changes(tps, [])
        await manager.wait_until_ready(tps, 30)
        writers = [asyncio.create_task(writer(t, k)) for k, t in enumerate(tps)]
        async with asyncio.timeout(30):
            while len(acked) < 80:
                await asyncio.sleep(0.01)
        crashable_kafka.kill()
        acked_at_kill = len(acked)
        await asyncio.sleep(1.0)
        await asyncio.to_thread(crashable_kafka.start)
        restarted.set()
        await asyncio.wait_for(asyncio.gather(*writers), timeout=90)

        # Writes after the restart went through on the same manager instance.
        assert len(acked) >= acked_at_kill + len(tps) * WRITES_AFTER_RESTART
        for e in failures:
            # Only clear, typed failures: the log gave up retrying, the apply loop did not
            # see the write in time, or a retried append landed twice and the copy the
            # writer was acknowledged for was rejected as a duplicate.
            assert isinstance(
                e,
                EventLogTransportError
                | RemoteStorageTimeoutError
                | InvalidStateTransitionError
                | RemoteResourceNotFoundError,
            ), repr(e)
            assert not isinstance(e, EventLogTransportError) or e.retriable
        assert len(failures) <= 2 * len(tps), failures

        records = await read_topic(crashable_kafka.bootstrap, topic, N)
        last = {p: rs[-1].offset for p, rs in records.items() if rs}
        # The apply loop resumed by itself and caught up with everything on the topic.
        async with asyncio.timeout(30):
            while any(manager.applied_offsets.get(p, -1) < o for p, o in last.items()):
                await asyncio.sleep(0.02)

        values = Counter(r.value for rs in records.values() for r in rs)
        lost = [e for e in acked if encode(e) not in values]
        assert not lost, f"acknowledged events missing from the topic: {lost[:3]}"
        assert unmet_acknowledged(acked, segment_states(manager, tps)) == []
        assert digest(manager.fingerprint(tps)) == digest(replay(records).fingerprint(tps))
        # Rejected events are at-least-once duplicates and nothing else.
        duplicates = sum(c - 1 for c in values.values())
        assert manager.stats.skipped_undecodable == 0
        assert manager.stats.skipped_invalid <= duplicates
        # Still a working manager: read-your-writes.
        m = segment(tps[0], 10**9, 10**9 + 9, {10**6: 10**9})
        await manager.add_remote_log_segment_metadata(m)
        assert m.remote_log_segment_id in segment_states(manager, tps[:1])
