"""A sidecar whose event log is slow to say its end offsets still follows leadership.

A three-node Apache Kafka 4.1.1 cluster; one sidecar, in this process, over node 2's
log dir and the cluster's ``__remote_log_metadata``. The sidecar asks the event log
for its end offsets around each round, for the metadata lag gauges, bounded by
``EVENT_LOG_LAG_TIMEOUT_S``: a broker that leads a metadata partition and died or
hangs makes the question take that whole bound. Here the event log's answer is held
back for as long as the test says (the bound raised to 30 s, so the windows are wide).

Invariant checked: while the lag is being waited for, the leadership poll goes on, so a
partition the broker gains then is copied within seconds of the change, by the gain's
own round, and neither the round nor the copy waits for the gauges. (The poll used to
stop from a round's end to the next round's start, lag included: in a three-broker
soak, a restarted sidecar learned a broker SIGKILL's change late by the 5 s the lag
took on the dead broker.)
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

from eventlog import EventLog
from rlmm.config import load_config
from rlmm.offload import round_loop, sidecar
from rlmm.offload.display import Display
from rlmm.offload.sidecar import Sidecar
from tests.fixtures.apache_kafka_cluster import ApacheKafkaCluster
from tests.integration.replicated_offload import (
    TOPIC_CONFIGS,
    Sidecars,
    produce_waves,
    segments,
    wait_archived,
)
from tests.integration.test_offload_replicated import moved, served
from tests.integration.test_offload_topic_configs import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.apache_kafka, pytest.mark.slow,
              pytest.mark.timeout(300)]  # fmt: skip

OLD, NEW = 1, 2
HELD_S = 30.0  # the lag's bound here: each held answer lasts this long at most


class HeldEndOffsets:
    """Holds the event log's end offsets back once ``hold()`` was called, until
    ``release()``; ``entered`` is set when a held question began."""

    def __init__(self) -> None:
        self.holding = False
        self.entered = asyncio.Event()
        self.released = asyncio.Event()

    def wrap(self, event_log: EventLog) -> EventLog:
        real = event_log.end_offsets

        async def end_offsets(*args: Any, **kwargs: Any) -> dict[int, int]:
            if self.holding and not self.released.is_set():
                self.entered.set()
                await self.released.wait()
            return await real(*args, **kwargs)

        event_log.end_offsets = end_offsets  # type: ignore[method-assign]
        return event_log


async def test_a_gain_is_copied_at_once_while_the_metadata_lag_waits_on_a_slow_broker(
    kafka_cluster: ApacheKafkaCluster,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = kafka_cluster
    topic = f"held-{uuid4().hex[:6]}"
    cluster.create_topic(topic, configs=TOPIC_CONFIGS, assignments={0: [OLD, NEW, 3]})
    await produce_waves(cluster, topic, 3, tag="h")
    _, ends = await served(cluster, topic)
    produced = time.time()

    held = HeldEndOffsets()
    opened = sidecar.open_event_log
    monkeypatch.setattr(sidecar, "open_event_log", lambda config: held.wrap(opened(config)))
    monkeypatch.setattr(round_loop, "EVENT_LOG_LAG_TIMEOUT_S", HELD_S)
    group = Sidecars(cluster, tmp_path)
    caplog.set_level(logging.INFO, logger="rlmm.offload")
    node = Sidecar(load_config(group.config(NEW), env={}), [cluster.log_dir(NEW)],
                   display=Display(rich=False))  # fmt: skip
    running = asyncio.create_task(node.run())
    try:
        await wait_for(
            "round 1 over",
            lambda: any("round 1 over" in r.getMessage() for r in caplog.records),
            timeout=90,
        )
        held.holding = True
        await asyncio.wait_for(held.entered.wait(), 30)  # the loop now waits for the lag
        # node 2's high-watermark checkpoint (every 5 s) covers the rolled segments then
        await asyncio.sleep(max(0.0, produced + 6 - time.time()))
        changed_at = await moved(cluster, topic, OLD, NEW)
        await wait_archived(group, topic, ends, timeout=90)
        copies = segments(group.observer, topic)[0]
        assert {m.broker_id for m in copies} == {NEW}
        first_copy = min(m.event_timestamp_ms for m in copies) / 1000
        # learned by the poll (500 ms) and copied at once, while the lag is still held
        # (before the fix: only once the held question ended, up to HELD_S later)
        assert first_copy - changed_at < HELD_S / 2, first_copy - changed_at
        assert not held.released.is_set()
    finally:
        held.released.set()
        node.stop()
        await asyncio.wait_for(running, 60)
    # the sidecar's own lines (aiokafka says the stopped node refused connections)
    errors = [r.getMessage() for r in caplog.records
              if r.levelno >= logging.ERROR and r.name.startswith("rlmm")]  # fmt: skip
    assert errors == []
