"""Three brokers, replication factor 3: Apache Kafka 4.1.1 tiers through rlmm's plugin
on every node of a cluster, and Kafka's leadership decides who copies.

A three-node KRaft cluster, each node loading rlmm's RemoteStorageManager and
RemoteLogMetadataManager (the JVM bridge over ``rlmm serve``) with a TOML of its own
(its own ``data_dir``: its snapshots) over ONE shared local store (the tier belongs to
the cluster, as a bucket would), and the cluster's ``__remote_log_metadata`` (3
replicas, created by rlmm from the broker's settings) as the event log. A topic of 2
partitions, 3 replicas, min.insync.replicas 2, produced continuously with acks=all by
an idempotent producer; once partition 0's leader has copied a segment, its JVM (only
it) is SIGKILLed; producing goes on through the failover until the new leader has
copied too; the node comes back and catches up; Kafka tiers and deletes the local
segments on the leaders.

Invariants checked:
- a consumer from offset 0 (read_committed, no group) reads every acknowledged record
  exactly once, at the offset its ack named, in order per partition;
- the tier has no gap: per partition the COPY_SEGMENT_FINISHED segments cover every
  offset from 0 up to where the leader's local log begins (``rlmm segments list``),
  and ``rlmm verify --deep`` is clean;
- partition 0's segments were copied by the old leader before the kill and by the new
  one after it (the metadata's broker_id): Kafka's leadership did the copying;
- no ``rlmm serve`` outlives its broker: the killed broker's stop by themselves (they
  watch its pid), and none outlives the cluster;
- no broker's log holds an ERROR of the bridge or of a serve.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from aiokafka import AIOKafkaProducer

from tests.fixtures.apache_kafka import KAFKA_VERSION, METADATA_PARTITIONS, METADATA_TOPIC
from tests.fixtures.apache_kafka_cluster import (
    PORT_ATTEMPTS,
    PORT_TAKEN,
    ApacheKafkaCluster,
    new_cluster,
)
from tests.fixtures.kafka import BrokerStartError
from tests.fixtures.kafka_plugin import (
    alive,
    plugin_config,
    plugin_jar,
    plugin_overrides,
    reader_config,
    serve_pids,
    wait_for_serve,
)
from tests.integration.test_restore_apache_kafka import consume_records

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.apache_kafka,
    pytest.mark.slow,
    # Beside the session cluster's tests on one worker: never two busy clusters at once.
    pytest.mark.xdist_group("apache-kafka-cluster"),
    pytest.mark.timeout(480),
]

PARTITIONS = 2
SEGMENT_MS = 2000
TOPIC_CONFIGS = {
    "remote.storage.enable": "true",
    "local.retention.ms": "1000",
    "segment.bytes": str(1 << 20),
    "segment.ms": str(SEGMENT_MS),
    "retention.ms": "-1",
    "min.insync.replicas": "2",
}
VALUE_BYTES = 1000
BATCH = 100  # records per round of the producer (half per partition), ~100 kB
Row = tuple[int, bytes, bytes]  # (offset, key, value)


def node_settings() -> dict[str, str]:
    """What every node sets beside rlmm's classes (some are the fixture's defaults
    already; said here since the test depends on them)."""
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.metadata.manager.listener.name": "PLAINTEXT",
        "remote.log.manager.task.interval.ms": "500",
        "log.retention.check.interval.ms": "1000",
        "rlmm.config.remote.log.metadata.topic.replication.factor": "3",
        "rlmm.config.remote.log.metadata.topic.num.partitions": str(METADATA_PARTITIONS),
    }


# rlmm serve's line once its RLMM runs over the cluster's metadata topic (it starts in
# the background, after the bridge's hello, and retries while fewer than the topic's
# replication factor of brokers are registered).
RLMM_STARTED = "remote log metadata manager started over 'kafka'"


def wait_rlmm_started(cluster: ApacheKafkaCluster, node: int, count: int = 1) -> None:
    """Until the node's log says its RLMM started ``count`` times (once per run)."""
    deadline = time.monotonic() + 60
    while cluster.node(node)._log_text().count(RLMM_STARTED) < count:
        if time.monotonic() > deadline:
            pytest.fail(
                f"node {node}'s rlmm metadata manager did not start in 60 s:\n"
                f"{cluster.log_tails([node], 40)}"
            )
        time.sleep(0.2)


def all_serve_pids(cluster: ApacheKafkaCluster) -> dict[int, list[int]]:
    return {i: serve_pids(cluster.node(i)) for i in cluster.ids}


@pytest.fixture
def plugin_cluster(tmp_path: Path) -> Iterator[ApacheKafkaCluster]:
    """Three nodes loading rlmm's plugin: one shared store, a TOML (and data_dir) each."""
    jar = plugin_jar()
    for attempt in range(1, PORT_ATTEMPTS + 1):
        root = tmp_path / f"cluster-{attempt}"
        tier = root / "tier"
        tomls = {i: plugin_config(root / f"node-{i}", tier=tier) for i in (1, 2, 3)}
        common = plugin_overrides(jar, tomls[1], **node_settings())
        own = {i: {"rsm.config.file": str(t), "rlmm.config.file": str(t)} for i, t in tomls.items()}
        cluster = new_cluster(root, overrides=common, node_overrides=own, kafka_tiering=True)
        try:
            cluster.start()
            break
        except BrokerStartError as e:
            cluster.close()
            # Ports are picked free and bound seconds later: another worker may take one
            # meanwhile (as for the session cluster). New ports are a new cluster.
            if PORT_TAKEN not in str(e) or attempt == PORT_ATTEMPTS:
                pytest.fail(
                    f"Apache Kafka {KAFKA_VERSION} cluster with rlmm's plugin: {e}", pytrace=False
                )
    try:
        for i in cluster.ids:
            wait_for_serve(cluster.node(i), count=2)  # both classes of every node answered
            wait_rlmm_started(cluster, i)
        yield cluster
    finally:
        pids = [p for ps in all_serve_pids(cluster).values() for p in ps]
        cluster.close()
        deadline = time.monotonic() + 30
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [p for p in pids if alive(p)]
        for p in left:
            os.kill(p, signal.SIGKILL)
        assert not left, f"rlmm serve {left} outlived the cluster"


async def kill_broker_alone(cluster: ApacheKafkaCluster, node: int, serves: list[int]) -> float:
    """SIGKILL the node's JVM, and only it (as the OOM killer would): cluster.kill
    SIGKILLs the node's process group, which holds the rlmm serve processes the bridge
    started too. They watch the broker's pid and must stop by themselves; returns the
    seconds they took."""
    process = cluster.node(node).process
    assert process is not None
    os.kill(process.pid, signal.SIGKILL)
    await asyncio.to_thread(process.wait, 30)  # reaped: a zombie's pid still answers kill -0
    began = time.monotonic()
    deadline = began + 15
    while left := [p for p in set(serves) if alive(p)]:
        if time.monotonic() > deadline:
            pytest.fail(
                f"rlmm serve {left} still running 15 s after node {node}'s broker died:\n"
                f"{cluster.log_tails([node], 20)}"
            )
        await asyncio.sleep(0.1)
    cluster.kill(node)  # the fixture's bookkeeping; nothing of the group is left to kill
    return time.monotonic() - began


@dataclass
class Produced:
    """What the producer was told: acked rows per partition, and the values whose send
    failed (not acknowledged: each may or may not be in the log, at most once)."""

    acked: dict[int, list[Row]] = field(default_factory=lambda: {p: [] for p in range(PARTITIONS)})
    failed: dict[bytes, str] = field(default_factory=dict)
    rounds: int = 0


async def produce_until(bootstrap: str, topic: str, stop: asyncio.Event, out: Produced) -> None:
    """Keyed records, round after round (each awaited: acks=all, idempotent, retried
    through a failover), until ``stop`` is set."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=20,
        request_timeout_ms=30_000, retry_backoff_ms=200,
    )  # fmt: skip
    await producer.start()
    n = 0
    try:
        while not stop.is_set():
            sent = []
            for _ in range(BATCH):
                p, key = n % PARTITIONS, f"key-{n % 13}".encode()
                value = f"v-{n}-".encode() + os.urandom(VALUE_BYTES // 2).hex().encode()
                sent.append(
                    (p, key, value, await producer.send(topic, value, key=key, partition=p))
                )
                n += 1
            results = await asyncio.gather(*(f for *_, f in sent), return_exceptions=True)
            for (p, key, value, _f), result in zip(sent, results, strict=True):
                if isinstance(result, BaseException):
                    out.failed[value] = repr(result)
                else:
                    assert result.partition == p
                    out.acked[p].append((result.offset, key, value))
            out.rounds += 1
            await asyncio.sleep(0.05)
    finally:
        await producer.stop()


async def produce_rolls(bootstrap: str, topic: str, out: Produced) -> dict[int, int]:
    """After segment.ms, one record per partition: the segment before it rolls."""
    await asyncio.sleep(SEGMENT_MS / 1000 + 0.5)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    rolls = {}
    try:
        for p in range(PARTITIONS):
            key, value = b"roll", f"roll-{p}".encode()
            meta = await producer.send_and_wait(topic, value, key=key, partition=p)
            out.acked[p].append((meta.offset, key, value))
            rolls[p] = meta.offset
    finally:
        await producer.stop()
    return rolls


def copied_lines(
    cluster: ApacheKafkaCluster, node: int, topic: str, p: int, since: int = 0
) -> list[str]:
    """Kafka's RemoteLogManager's "Copied <segment> to remote storage" lines for the
    partition in the node's log (logged once the RLMM took COPY_SEGMENT_FINISHED)."""
    tag = f":{topic}-{p}]"  # [RemoteLogManager=<id> partition=<topic id>:<topic>-<p>]
    return [
        line
        for line in cluster.node(node)._log_text(since=since).splitlines()
        if tag in line and "Copied " in line
    ]


async def wait_copied(
    cluster: ApacheKafkaCluster, node: int, topic: str, p: int, since: int = 0, timeout: float = 60
) -> None:
    deadline = time.monotonic() + timeout
    while not copied_lines(cluster, node, topic, p, since):
        if time.monotonic() > deadline:
            pytest.fail(
                f"node {node} copied no segment of {topic}-{p} in {timeout} s:\n"
                f"{cluster.log_tails([node], 40)}"
            )
        await asyncio.sleep(0.25)


def tier_logs(tier: Path, topic: str, p: int) -> list[Path]:
    # rlmm's layout: <topic>-<topic id>/<partition>/<start offset>-<segment id>.log
    return sorted(tier.glob(f"{topic}-*/{p}/*.log"))


def local_bases(cluster: ApacheKafkaCluster, node: int, topic: str, p: int) -> list[int]:
    return sorted(int(f.stem) for f in (cluster.log_dir(node) / f"{topic}-{p}").glob("*.log"))


async def wait_tiered_and_deleted(
    cluster: ApacheKafkaCluster, tier: Path, topic: str, rolls: dict[int, int], timeout: float = 120
) -> dict[int, int]:
    """Until, on each partition's leader, the first local segment starts at or after the
    roll record (everything before it is only in the tier); {partition: that base}."""
    deadline = time.monotonic() + timeout
    while True:
        state = cluster.describe(topic)
        local = {p: local_bases(cluster, state[p].leader, topic, p) for p in rolls}
        if all(bases and bases[0] >= rolls[p] for p, bases in local.items()) and all(
            tier_logs(tier, topic, p) for p in rolls
        ):
            return {p: bases[0] for p, bases in local.items()}
        if time.monotonic() > deadline:
            pytest.fail(
                f"not tiered and deleted in {timeout} s: rolls {rolls}, leaders' local bases "
                f"{local}, state {state}\n{cluster.log_tails(lines=40)}"
            )
        await asyncio.sleep(0.5)


# An ERROR of the bridge, or one the serve logged (the bridge logs each of its lines at
# the line's level, a traceback's lines at the level of the line that began it).
RLMM_ERROR = re.compile(r"\] ERROR .*\(io\.rlmm\.kafka\.|rlmm serve: Traceback")


def rlmm_errors(cluster: ApacheKafkaCluster) -> dict[int, list[str]]:
    """Each node's rlmm ERROR lines, over all its runs."""
    return {
        i: [line for line in cluster.node(i)._log_text().splitlines() if RLMM_ERROR.search(line)]
        for i in cluster.ids
    }


def rlmm_cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlmm.cli", *args, "--config", str(config)],
        capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def check_read_once(consumed: dict[int, list[Any]], produced: Produced) -> None:
    """Every acked record once, at its acked offset, in order; an unacked one at most once."""
    for p, acked in produced.acked.items():
        rows = [(r.offset, r.key, r.value) for r in consumed[p]]
        values = [v for _o, _k, v in rows]
        assert len(values) == len(set(values)), f"partition {p}: a record read twice"
        kept = [r for r in rows if r[2] not in produced.failed]
        if kept != acked:
            differ = next(
                (i for i, (a, b) in enumerate(zip(kept, acked, strict=False)) if a != b),
                min(len(kept), len(acked)),
            )
            pytest.fail(
                f"partition {p}: read {len(kept)} acked records, acked {len(acked)}; first "
                f"difference at #{differ}: read {kept[differ : differ + 1]}, acked "
                f"{acked[differ : differ + 1]}"
            )


def check_no_gap(
    segments: list[dict[str, Any]], local_start: dict[int, int]
) -> dict[int, list[tuple[int, int, int]]]:
    """Per partition, the finished segments from offset 0 on, each starting right after
    the one before, up to where the leader's local log begins; returns them as
    (start, end, broker_id).

    One exception, Kafka's: a new leader copies its own local segment holding the first
    offset not yet copied, from that segment's base offset, and a follower's segments
    need not roll where the leader's did. So where the copying broker changes, the new
    one's segment may overlap the one before (never leave a gap); the lineage then
    serves each offset from one of them, and the offsets the ops CLI says each segment
    serves are contiguous from 0 without exception."""
    out: dict[int, list[tuple[int, int, int]]] = {}
    for p, first_local in local_start.items():
        mine = [
            s for s in segments if s["partition"] == p and s["state"] == "COPY_SEGMENT_FINISHED"
        ]
        finished = sorted((s["start_offset"], s["end_offset"], s["broker_id"]) for s in mine)
        assert finished, f"partition {p}: no finished segment"
        assert finished[0][0] == 0, f"partition {p}: the tier starts at {finished[0][0]}"
        for before, after in itertools.pairwise(finished):
            contiguous = after[0] == before[1] + 1
            overlap_at_handover = after[2] != before[2] and before[0] < after[0] <= before[1]
            assert contiguous or overlap_at_handover, (
                f"partition {p}: (start, end, broker) {before} then {after}; all: {finished}"
            )
        assert finished[-1][1] >= first_local - 1, (
            f"partition {p}: the tier ends at {finished[-1][1]}, local data begins at {first_local}"
        )
        served = sorted(
            (s["serves"]["first_offset"], s["serves"]["last_offset"]) for s in mine if s["serves"]
        )
        assert served[0][0] == 0 and served[-1][1] == finished[-1][1], (p, served, finished)
        for before_s, after_s in itertools.pairwise(served):
            assert after_s[0] == before_s[1] + 1, f"partition {p}: served {served}"
        out[p] = finished
    return out


def verify_deep(reader: Path, topic: str, dead: int, segments: list[dict[str, Any]]) -> int:
    """``rlmm verify --deep --safety-window 0s`` clean; returns how many dangling copies
    of the killed leader ``rlmm gc`` had to remove first (0 unless the kill landed
    inside a copy).

    A leader SIGKILLed between COPY_SEGMENT_STARTED and COPY_SEGMENT_FINISHED leaves
    that segment STARTED for good: Kafka's RLMExpirationTask retries dangling
    DELETE_SEGMENT_STARTED segments only, and a STARTED copy goes with retention
    (-1 here). verify rightly names it (stuck_copy_started); that, for a segment the
    killed broker started and the lineage does not serve, is the one problem allowed,
    and gc, the remedy verify names, must clear it."""
    args = ("--json", "--deep", "--topic", topic, "--safety-window", "0s")
    deep = rlmm_cli(reader, "verify", *args)
    if deep.returncode == 0:
        return 0
    problems = json.loads(deep.stdout)["problems"]
    dangling = {
        s["segment_id"]
        for s in segments
        if s["state"] == "COPY_SEGMENT_STARTED" and s["broker_id"] == dead and not s["serves"]
    }
    assert problems and all(
        p["kind"] == "stuck_copy_started" and p["segment_id"] in dangling for p in problems
    ), deep.stdout + deep.stderr
    gc = rlmm_cli(reader, "gc", "--apply", "--topic", topic, "--safety-window", "0s")
    assert gc.returncode == 0, gc.stdout + gc.stderr
    again = rlmm_cli(reader, "verify", *args)
    assert again.returncode == 0, again.stdout + again.stderr
    return len(problems)


async def test_three_brokers_replication_factor_3_leader_killed_while_producing(
    plugin_cluster: ApacheKafkaCluster,
) -> None:
    cluster = plugin_cluster
    tier = cluster.root / "tier"
    topic = f"plugin-rf3-{uuid4().hex[:8]}"
    created = cluster.create_topic(topic, PARTITIONS, 3, configs=TOPIC_CONFIGS)
    for p in range(METADATA_PARTITIONS):  # rlmm created it with the broker's settings
        assert len(cluster.describe(METADATA_TOPIC)[p].replicas) == 3
    dead = created[0].leader
    marks = {i: cluster.node(i)._log_size() for i in cluster.ids}

    stop, produced = asyncio.Event(), Produced()
    producing = asyncio.create_task(produce_until(cluster.bootstrap, topic, stop, produced))
    try:
        # The first leader copies before it dies (its "Copied" line: FINISHED is in).
        await wait_copied(cluster, dead, topic, 0, since=marks[dead])
        assert not producing.done(), producing
        killed_serves = serve_pids(cluster.node(dead))
        acked_before = len(produced.acked[0])
        serves_gone_s = await kill_broker_alone(cluster, dead, killed_serves)
        moved = await asyncio.to_thread(
            cluster.wait_for_leader, topic, 0, not_in={dead}, timeout=30
        )
        # Producing goes on through the failover until the new leader has copied too.
        # (a follower copies nothing: its lines for partition 0 are all after the kill)
        await wait_copied(cluster, moved.leader, topic, 0, since=marks[moved.leader])
    finally:
        stop.set()
        await asyncio.wait_for(producing, 90)
    assert len(produced.acked[0]) > acked_before, "nothing acked after the kill"

    await asyncio.to_thread(cluster.start_node, dead)
    wait_for_serve(cluster.node(dead), count=len(killed_serves) + 2)
    wait_rlmm_started(cluster, dead, count=2)
    for p in range(PARTITIONS):
        await asyncio.to_thread(cluster.wait_isr, topic, p, 3, 90)
    rolls = await produce_rolls(cluster.bootstrap, topic, produced)
    local_start = await wait_tiered_and_deleted(cluster, tier, topic, rolls)
    assert all(start > 0 for start in local_start.values())

    # 1. every acknowledged record once, in order, through the brokers
    consumed = await consume_records(cluster.bootstrap, topic, isolation_level="read_committed")
    check_read_once(consumed, produced)

    # 2. the tier has no gap, and the ops CLI's deep verify is clean
    reader = reader_config(
        cluster.node(1), cluster.root / "node-1" / "rlmm.toml", cluster.bootstrap
    )
    listed = rlmm_cli(reader, "segments", "list", "--json", "--topic", topic)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    segments = json.loads(listed.stdout)["segments"]
    finished = check_no_gap(segments, local_start)
    collected = verify_deep(reader, topic, dead, segments)

    # 3. partition 0: the old leader copied before the kill, the new one after
    copiers = {b for _s, _e, b in finished[0]}
    assert {dead, moved.leader} <= copiers, (dead, moved, finished[0])
    assert rlmm_errors(cluster) == {i: [] for i in cluster.ids}
    print(  # shown with -rP: what this run did
        f"killed node {dead} (its rlmm serve gone {serves_gone_s:.1f} s later), partition 0 "
        f"moved to {moved.leader}; acked "
        f"{ {p: len(rows) for p, rows in produced.acked.items()} } in {produced.rounds} rounds, "
        f"{len(produced.failed)} sends failed; finished segments (start, end, broker) "
        f"{finished}; dangling copies of the killed leader collected: {collected}"
    )
