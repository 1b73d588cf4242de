"""A copy left COPY_SEGMENT_STARTED by a stopped ``rlmm serve`` (Kafka's cleanup of the
failed copy went through the same dead process) is cleaned by the next serve of that
broker, as Kafka's cleanup would have: its objects deleted, DELETE_SEGMENT_FINISHED.
Copies of this process, and segments another broker added, are left alone."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

import pytest

from rlmm.model import RemoteLogSegmentMetadata, RemoteLogSegmentState
from rlmm.plugin import dangling_copies
from rlmm.plugin.server import PluginServer
from tests.remote.conftest import make_metadata, write_segment
from tests.rlmm.plugin.bridge_client import BridgeClient, unwire, wire, wire_tp
from tests.rlmm.plugin.test_server import BROKER_PROPS, started, until_ready, write_config


async def _connect(server: PluginServer) -> BridgeClient:
    client = await BridgeClient.connect(server.socket_path)
    await client.hello("rlmm")
    await client.call("configure", role="rsm", props=dict(BROKER_PROPS))
    await client.call("configure", role="rlmm", props=dict(BROKER_PROPS))
    return client


async def _add_and_copy(client: BridgeClient, md: RemoteLogSegmentMetadata, tmp_path: Path) -> None:
    await client.call("rlmm.add_remote_log_segment_metadata", metadata=wire(md))
    data = write_segment(tmp_path / f"seg-{md.start_offset}", log_size=1000).data
    await client.call(
        "rsm.copy_log_segment_data",
        metadata=wire(md),
        log_segment=str(data.log_segment),
        offset_index=str(data.offset_index),
        time_index=str(data.time_index),
        transaction_index=None,
        producer_snapshot_index=str(data.producer_snapshot_index),
        leader_epoch_index=data.leader_epoch_index,
    )


async def _states(client: BridgeClient, tp: dict[str, object]) -> dict[int, str]:
    listed = await client.call(
        "rlmm.list_remote_log_segments", topic_id_partition=tp, leader_epoch=None
    )
    segments = [unwire(m) for m in listed["segments"]]
    return {m.start_offset: m.state.name for m in segments}  # type: ignore[union-attr]


async def test_a_stopped_serves_half_done_copy_is_cleaned_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_config(tmp_path)
    dangling = make_metadata(start_offset=0, size=1000)
    foreign = dataclasses.replace(make_metadata(start_offset=100, size=1000), broker_id=2)
    tp = wire_tp(dangling.topic_id_partition)

    first = PluginServer(config, tmp_path / "serve.sock")
    task = await started(first)
    client = await _connect(first)
    await client.call("rlmm.on_partition_leadership_changes", leaders=[tp], followers=[])
    await until_ready(client, tp)
    store_root = tmp_path / "data" / "remote"

    def stored() -> set[Path]:
        return {p for p in store_root.rglob("*") if p.is_file()}

    await _add_and_copy(client, dangling, tmp_path)  # then the process "dies" mid-copy
    of_dangling = stored()
    await _add_and_copy(client, foreign, tmp_path)
    of_foreign = stored() - of_dangling
    assert of_dangling and of_foreign, "the copies stored nothing"
    await client.close()
    first.stop()
    await asyncio.wait_for(task, 30)

    monkeypatch.setattr(dangling_copies, "GRACE_S", 0.5)
    second = PluginServer(config, tmp_path / "serve.sock")
    task = await started(second)
    try:
        client = await _connect(second)
        await client.call("rlmm.on_partition_leadership_changes", leaders=[tp], followers=[])
        await until_ready(client, tp)
        ours = make_metadata(start_offset=200, size=1000)  # this process's copy, running
        await client.call("rlmm.add_remote_log_segment_metadata", metadata=wire(ours))
        deadline = time.monotonic() + 30
        # DELETE_SEGMENT_FINISHED: gone from the listings, as from Kafka's own RLMM's
        while 0 in (states := await _states(client, tp)):
            assert time.monotonic() < deadline, f"never cleaned: {states}"
            await asyncio.sleep(0.1)
        assert states == {
            100: "COPY_SEGMENT_STARTED",  # another broker's
            200: "COPY_SEGMENT_STARTED",  # this process's
        }
        left = stored()
        assert not left & of_dangling and of_foreign <= left, sorted(map(str, left))
        await client.close()
    finally:
        second.stop()
        await asyncio.wait_for(task, 30)


def test_only_this_brokers_copies_of_led_partitions_that_are_not_this_processes_qualify() -> None:
    """``dangling``'s rule alone, on a manager's answers."""

    class Manager:
        def is_ready(self, tp: object) -> bool:
            return True

        def walk_remote_log_segments(self, tp: object, states: object) -> list[object]:
            assert states == frozenset({RemoteLogSegmentState.COPY_SEGMENT_STARTED})
            return [mine, theirs, running]

    mine = make_metadata(start_offset=0)
    theirs = dataclasses.replace(make_metadata(start_offset=100), broker_id=7)
    running = make_metadata(start_offset=200)
    found = dangling_copies.dangling(
        Manager(),  # type: ignore[arg-type]
        [mine.topic_id_partition],
        1,
        lambda segment: segment == running.remote_log_segment_id.id,
    )
    assert found == [mine]
