"""`rlmm offload` beside every broker of a replicated cluster: only the leader copies,
failover and failback lose nothing, every offset is held once.

A three-node Apache Kafka 4.1.1 cluster; topics of 3 partitions with 3 replicas and
``min.insync.replicas=2``, produced with acks=all; one sidecar process per broker over
its log dir, all on the cluster's ``__remote_log_metadata`` and one store.

Invariants checked after every scenario (``check_archive``): the archive serves every
rolled offset from 0, each once, equal to what a consumer reads; ``rlmm verify
--deep`` is clean; the bytes in remote storage are at most 1.1x one replica's log for
the same offsets; no sidecar logged an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from uuid import uuid4

import pytest

from rlmm.archive.errors import ArchiveError
from tests.fixtures.apache_kafka_cluster import ApacheKafkaCluster
from tests.integration.replicated_offload import (
    TOPIC_CONFIGS,
    Sidecars,
    check_archive,
    produce_waves,
    segments,
    sidecars,
    wait_archived,
)

pytestmark = [pytest.mark.kafka, pytest.mark.apache_kafka, pytest.mark.slow,
              pytest.mark.timeout(600)]  # fmt: skip


async def served(cluster: ApacheKafkaCluster, topic: str) -> tuple[dict, dict[int, int]]:  # type: ignore[type-arg]
    """What a consumer reads, and per partition the last offset before the roll record."""
    records = await cluster.aconsume_all(topic)
    return records, {p: rs[-1][0] - 1 for p, rs in records.items()}


async def test_steady_state_failover_and_failback(
    kafka_cluster: ApacheKafkaCluster, tmp_path: Path
) -> None:
    cluster = kafka_cluster
    topic = f"repl-{uuid4().hex[:6]}"
    created = cluster.create_topic(topic, 3, configs=TOPIC_CONFIGS)
    with sidecars(cluster, tmp_path) as group:
        # steady state: each rolled segment copied once, by its partition's leader
        await produce_waves(cluster, topic, 3, tag="a")
        records, ends = await served(cluster, topic)
        await wait_archived(group, topic, ends)
        check_archive(group, topic, records, ends)
        for p, ms in segments(group.observer, topic).items():
            assert {m.broker_id for m in ms} == {created[p].leader}, p
            assert len(ms) == len({(m.start_offset, m.end_offset) for m in ms})

        # failover: partition 0's leader is SIGKILLed; its sidecar keeps running over the
        # frozen log dir; the new leaders' sidecars continue with no gap
        dead = cluster.describe(topic)[0].leader
        cluster.kill(dead)
        killed_at = time.time() * 1000
        moved = cluster.wait_for_leader(topic, 0, not_in={dead}, timeout=30)
        await produce_waves(cluster, topic, 3, tag="b")
        records, ends = await served(cluster, topic)
        await wait_archived(group, topic, ends)
        check_archive(group, topic, records, ends)
        assert group.alive()[dead]
        # the dead broker's sidecar copies nothing once the cluster moved leadership
        # (until it is fenced, 6 s, the cluster still names it leader)
        late = [m for ms in segments(group.observer, topic).values() for m in ms
                if m.broker_id == dead and m.event_timestamp_ms > killed_at + 8000]  # fmt: skip
        assert late == []
        assert any(m.broker_id == moved.leader for m in segments(group.observer, topic)[0])

        # failback: the broker returns and catches up, a preferred election hands its
        # partitions back, and its sidecar continues
        cluster.start_node(dead)
        for p in range(3):
            cluster.wait_isr(topic, p, 3, timeout=60)
        cluster.elect_preferred(topic)
        back = cluster.wait_for_leader(topic, 0, expect=dead, timeout=30)
        await produce_waves(cluster, topic, 2, tag="c")
        records, ends = await served(cluster, topic)
        await wait_archived(group, topic, ends)
        figures = check_archive(group, topic, records, ends)
        newest = max(segments(group.observer, topic)[0], key=lambda m: m.end_offset)
        assert newest.broker_id == back.leader == dead
        assert max(figures["bytes_ratio"].values()) <= 1.1
        assert group.errors() == {n: [] for n in cluster.ids}


async def test_controlled_shutdown_and_a_sidecar_killed_during_a_leadership_change(
    kafka_cluster: ApacheKafkaCluster, tmp_path: Path
) -> None:
    cluster = kafka_cluster
    topic = f"repl-{uuid4().hex[:6]}"
    cluster.create_topic(topic, 3, configs=TOPIC_CONFIGS)
    with sidecars(cluster, tmp_path) as group:
        await produce_waves(cluster, topic, 2, tag="a")
        records, ends = await served(cluster, topic)
        await wait_archived(group, topic, ends)

        # A controlled shutdown moves partition 1's leadership; while it moves, the new
        # leader's sidecar is SIGKILLed, then started again.
        old = cluster.describe(topic)[1].leader
        writes = asyncio.create_task(produce_waves(cluster, topic, 3, tag="b"))
        await asyncio.sleep(1.5)
        await asyncio.to_thread(cluster.stop, old)
        new = cluster.wait_for_leader(topic, 1, not_in={old}, timeout=30).leader
        group.kill(new)
        await asyncio.sleep(2)
        group.start(new)
        await writes
        records, ends = await served(cluster, topic)
        await wait_archived(group, topic, ends)
        check_archive(group, topic, records, ends)
        # the stopped broker's sidecar: no copy after its broker handed leadership over
        stopped_at = time.time() * 1000
        await produce_waves(cluster, topic, 1, tag="c")
        records, ends = await served(cluster, topic)
        await wait_archived(group, topic, ends)
        check_archive(group, topic, records, ends)
        late = [m for ms in segments(group.observer, topic).values() for m in ms
                if m.broker_id == old and m.event_timestamp_ms > stopped_at]  # fmt: skip
        assert late == []
        errors = group.errors()
        # the killed sidecar's own crash leaves no error line in the others' logs
        assert {n: e for n, e in errors.items() if n != new} == {
            n: [] for n in cluster.ids if n != new
        }


async def test_unclean_election_the_archive_equals_what_the_cluster_serves(
    kafka_cluster: ApacheKafkaCluster, tmp_path: Path
) -> None:
    """Replicas on nodes 1 and 2; node 2 stalls out of the ISR, node 1 takes records
    alone (min.insync.replicas=1) and its sidecar archives them; node 1 dies, node 2
    is elected uncleanly. The archive then equals what the cluster serves: node 1's
    lost records are deleted from remote storage and never read."""
    cluster, leader, stale = kafka_cluster, 1, 2
    topic = f"unclean-{uuid4().hex[:6]}"
    cluster.create_topic(
        topic,
        configs={**TOPIC_CONFIGS, "unclean.leader.election.enable": "true",
                 "min.insync.replicas": "1"},
        assignments={0: [leader, stale]},
    )  # fmt: skip
    with sidecars(cluster, tmp_path) as group:
        await produce_waves(cluster, topic, 2, tag="acked")
        records, ends = await served(cluster, topic)
        await wait_archived(group, topic, ends)

        cluster.pause(stale)
        cluster.wait_isr(topic, 0, 1, timeout=30)
        await produce_waves(cluster, topic, 2, tag="lost")
        lost_records, lost_ends = await served(cluster, topic)
        # node 1's sidecar archives them. A hung node 2 (SIGSTOP: its sockets stay open,
        # it answers nothing) costs node 1's sidecar request timeouts where node 2 leads
        # a metadata partition (docs/deploy.md, "A hung broker"): a longer bound.
        await wait_archived(group, topic, lost_ends, timeout=240)
        lost_offsets = {o for o, _k, _v in lost_records[0]} - {o for o, _k, _v in records[0]}

        cluster.kill(leader)
        cluster.resume(stale)
        cluster.wait_for_leader(topic, 0, expect=stale, timeout=60)
        await produce_waves(cluster, topic, 2, tag="after")
        records, ends = await served(cluster, topic)
        await wait_archived(group, topic, ends, timeout=240)
        check_archive(group, topic, records, ends)
        # what the archive serves at the lost offsets is the new leader's records
        values = {o: v for o, _k, v in records[0]}
        assert all(b"lost" not in (values.get(o) or b"") for o in lost_offsets)
        errors = group.errors()
        # the stalled broker's sidecar could not ask its own broker meanwhile: that, and
        # only that, is an error line (leadership unknown until it answered again)
        assert all("leadership unknown" in line for line in errors[stale]), errors[stale]
        assert errors[3] == []


async def test_a_partition_gained_mid_round_is_copied_before_that_round_ends(
    kafka_cluster: ApacheKafkaCluster, tmp_path: Path
) -> None:
    """Node 1's sidecar is in a long round (a backlog, throttled by a small copy quota)
    when node 1 gains a partition whose rolled segments nobody copied yet (node 2, its
    leader, runs no sidecar). The gained partition is copied at once, beside the round,
    not after it."""
    cluster, a, b = kafka_cluster, 1, 2
    busy, moved = f"busy-{uuid4().hex[:6]}", f"moved-{uuid4().hex[:6]}"
    cluster.create_topic(busy, configs=TOPIC_CONFIGS, assignments={0: [a, b, 3]})
    cluster.create_topic(moved, configs=TOPIC_CONFIGS, assignments={0: [b, a, 3]})
    await asyncio.gather(produce_waves(cluster, busy, 16, tag="busy"),
                         produce_waves(cluster, moved, 2, tag="moved"))  # fmt: skip
    _, busy_ends = await served(cluster, busy)
    _, moved_ends = await served(cluster, moved)
    # about 1.7 kB per segment at 1 kB/s: node 1's first round lasts about 25 s (a
    # controlled shutdown under load takes seconds of it)
    quota = ('"remote.log.manager.copy.max.bytes.per.second" = 1000\n'
             '"remote.log.manager.copy.quota.window.num" = 2\n')  # fmt: skip
    group = Sidecars(cluster, tmp_path, offload=quota)
    try:
        group.start(a)
        deadline = time.monotonic() + 120
        while True:  # until node 1 is well into its round
            with contextlib.suppress(ArchiveError):  # no metadata topic yet
                if len(segments(group.observer, busy).get(0, [])) >= 3:
                    break
            assert time.monotonic() < deadline, group.text(a)[-3000:]
            await asyncio.sleep(0.5)
        await asyncio.to_thread(cluster.stop, b)  # controlled: node 1 leads `moved` now
        cluster.wait_for_leader(moved, 0, expect=a, timeout=30)
        await wait_archived(group, moved, moved_ends)
        # Before the fix the gained partition waited for the round: the busy backlog was
        # all copied first. Now its round is still copying when `moved` is whole.
        busy_now = segments(group.observer, busy).get(0, [])
        assert max(m.end_offset for m in busy_now) < busy_ends[0], (len(busy_now), busy_ends)
        copies = segments(group.observer, moved)[0]
        assert {m.broker_id for m in copies} == {a}
    finally:
        group.close()
    assert group.errors()[a] == []


async def test_a_partition_gained_between_rounds_is_copied_at_once_in_a_round_of_its_own(
    kafka_cluster: ApacheKafkaCluster, tmp_path: Path
) -> None:
    """Kafka schedules a new leader's copy task at once. Node 2's sidecar runs a round
    every 20 s; between two, node 2 gains a partition whose rolled segments nobody
    copied (node 1, its leader, runs no sidecar). They are copied within seconds of the
    change, by a round of that partition alone: the sidecar's next round still comes an
    interval after the last one (a gain once woke a round of every partition)."""
    cluster, old, new = kafka_cluster, 1, 2
    topic = f"gained-{uuid4().hex[:6]}"
    cluster.create_topic(topic, configs=TOPIC_CONFIGS, assignments={0: [old, new, 3]})
    await produce_waves(cluster, topic, 3, tag="g")
    _, ends = await served(cluster, topic)
    produced = time.time()
    group = Sidecars(cluster, tmp_path, task_interval_ms=INTERVAL_MS)
    try:
        group.start(new)
        first_round = await logged(group, new, "round 1 over")
        # node 2's high-watermark checkpoint (every 5 s) covers the rolled segments then
        await asyncio.sleep(max(0.0, produced + 6 - time.time()))
        changed_at = await moved(cluster, topic, old, new)
        await wait_archived(group, topic, ends, timeout=60)
        copies = segments(group.observer, topic)[0]
        assert {m.broker_id for m in copies} == {new}
        first_copy = min(m.event_timestamp_ms for m in copies) / 1000
        # learned by the poll (500 ms), then copied at once: not at the next round
        assert first_copy - changed_at <= 8, (first_copy - changed_at, group.text(new)[-3000:])
        # by the sidecar's own log times, so a slow machine cannot hide an early round
        # (the test once also asserted it was still inside the interval, and a loaded
        # CI machine failed that guard, not the sidecar)
        second_round = await logged(group, new, "round 2 over", timeout=INTERVAL_MS / 1000 + 30)
        assert second_round - first_round >= INTERVAL_MS / 1000 - 1, group.text(new)[-3000:]
    finally:
        group.close()
    assert group.errors()[new] == []


INTERVAL_MS = 20_000


async def logged(group: Sidecars, node: int, needle: str, timeout: float = 60) -> float:
    """When the sidecar of ``node`` logged the first line holding ``needle`` (epoch s)."""
    deadline = time.monotonic() + timeout
    while True:
        for line in group.text(node).splitlines():
            if needle in line:
                stamp = time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")
                return time.mktime(stamp) + int(line[20:23]) / 1000
        assert time.monotonic() < deadline, f"{needle!r} not logged: {group.text(node)[-3000:]}"
        await asyncio.sleep(0.2)


async def moved(cluster: ApacheKafkaCluster, topic: str, old: int, new: int) -> float:
    """Stop node ``old`` (a controlled shutdown moves its leadership); when node ``new``
    first said it leads ``topic``-0 (epoch s)."""

    def watch() -> float:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, LookupError):
                if cluster.describe(topic, via=new)[0].leader == new:
                    return time.time()
            time.sleep(0.05)
        raise TimeoutError(f"node {new} did not lead {topic}-0 within 60 s")

    watching = asyncio.create_task(asyncio.to_thread(watch))
    await asyncio.to_thread(cluster.stop, old)
    return await watching


def test_a_file_event_log_on_a_replicated_cluster_stops_the_sidecar(
    kafka_cluster: ApacheKafkaCluster, tmp_path: Path
) -> None:
    """One host's metadata log cannot carry a replicated partition for three brokers:
    the sidecar stops in one line saying what to configure, copying nothing."""
    import subprocess
    import sys

    topic = f"filelog-{uuid4().hex[:6]}"
    kafka_cluster.create_topic(topic, 1, configs=TOPIC_CONFIGS)
    kafka_cluster.produce(topic, 5)
    config = tmp_path / "file.toml"
    config.write_text(f"""
data_dir = "{tmp_path / "rlmm"}"
[offload]
"bootstrap.servers" = "{kafka_cluster.live_bootstrap()}"
""")
    done = subprocess.run(
        [sys.executable, "-m", "rlmm.cli", "offload", "--once", "--config", str(config),
         "--log-dir", str(kafka_cluster.log_dir(1))],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if " error: " in ln]  # after the time
    assert "replicas" in line and 'type = "kafka"' in line, line
    assert not list((tmp_path / "rlmm" / "remote").glob("**/*.log"))
