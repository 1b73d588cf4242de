"""What `rlmm restore` changes, on Apache Kafka 4.1.1: the topic's configs come back,
and the offsets that shift are mapped so that a consumer group moves to the same record.

A three-node cluster that does not tier itself; a topic with configs of its own
(min.insync.replicas, segment.bytes, cleanup.policy, retention.ms, max.message.bytes,
and local.retention.ms, a tiering one) holding plain records, committed and aborted
transactions; a consumer group that committed source offsets (one of them at an
aborted record). `rlmm offload` (in this process, over node 1's log dir) archives it
into rlmm's layout and keeps the topic's configs in the store; the restore writes the
topic back into the same cluster under another name.

Invariants checked: the store's object holds the topic's own configs and follows a
change made with kafka-configs; --dry-run and the summary name the configs applied and
those not copied; the restored topic has the source's configs (and not the tiering
one); its offsets differ from the source's, and every source offset translated through
the map lands a read_committed consumer on the record a source consumer at that offset
would read first (key and value equal); `rlmm restore-offsets --group` writes the CSV
that Kafka's own kafka-consumer-groups --reset-offsets --from-file takes, after which a
consumer of the group reads, on the restored topic, the record it would have read next
on the source.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from remote.topic_configs import TopicConfigStore
from rlmm.archive import open_metadata_view
from rlmm.archive.errors import ArchiveError
from rlmm.config import load_config
from rlmm.offload.display import Display
from rlmm.offload.sidecar import Sidecar
from rlmm.restore import read_offset_map
from tests.fixtures.apache_kafka import run_java
from tests.fixtures.apache_kafka_cluster import ApacheKafkaCluster
from tests.integration.replicated_offload import ROOT, config_text
from tests.integration.test_restore_apache_kafka import consume_records

pytestmark = [pytest.mark.kafka, pytest.mark.apache_kafka, pytest.mark.slow,
              pytest.mark.timeout(420)]  # fmt: skip

NODE = 1
PARTITIONS = 2
SOURCE_CONFIGS = {
    "min.insync.replicas": "2",
    "segment.bytes": "1048576",
    "cleanup.policy": "delete",
    "retention.ms": "-1",
    "max.message.bytes": "500000",
    "segment.ms": "1000",
    "local.retention.ms": "1000",  # tiering: not copied
}
GROUP_FORMAT = "cfg-group-{}"
Record = tuple[int, bytes | None, bytes | None]  # offset, key, value


async def produce(bootstrap: str, topic: str, waves: int) -> None:
    """Waves (each in a segment of its own: segment.ms passes between them) of plain
    keyed records, a committed and an aborted transaction on both partitions; then a
    record per partition that rolls the last wave's segment."""
    plain = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    txn = AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=f"src-{topic}", enable_idempotence=True
    )
    await plain.start()
    await txn.start()
    try:
        for w in range(waves):
            sent = [
                await plain.send(
                    topic,
                    f"w{w}-{i}".encode() * 4,
                    key=f"k{i % 13}".encode(),
                    partition=i % PARTITIONS,
                )
                for i in range(120)
            ]
            await asyncio.gather(*sent)
            async with txn.transaction():
                for i in range(6):
                    await txn.send(topic, f"c{w}-{i}".encode(), key=b"c", partition=i % 2)
            await txn.begin_transaction()
            for i in range(6):
                await txn.send(topic, f"a{w}-{i}".encode(), key=b"a", partition=i % 2)
            await txn.abort_transaction()
            await asyncio.sleep(1.3)  # segment.ms: the next write rolls
        for p in range(PARTITIONS):
            await plain.send_and_wait(topic, b"roll", key=b"roll", partition=p)
    finally:
        await txn.stop()
        await plain.stop()


def archived_ends(config: Path, topic: str) -> dict[int, int]:
    """Each partition's archived end offset (exclusive), finished copies only."""
    with open_metadata_view(load_config(config, env={})) as view:
        out = {}
        for tp in view.topic_partitions():
            if tp.topic == topic:
                ranges = view.lineage_ranges(tp)
                if ranges and ranges[0].first_offset == 0:
                    out[tp.partition] = ranges[-1].last_offset + 1
        return out


async def wait_for(what: str, check: Any, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(ArchiveError):
            found = await asyncio.to_thread(check)
            if found:
                return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout}s: {what}")
        await asyncio.sleep(0.5)


async def topic_configs(bootstrap: str, topic: str) -> dict[str, tuple[str, int]]:
    """name -> (value, config source) as Kafka describes ``topic``."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (response,) = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic)]
        )
    finally:
        await admin.close()
    (resource,) = response.resources
    return {entry[0]: (entry[1], entry[3]) for entry in resource[4]}


async def commit_group(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False)  # fmt: skip
    await consumer.start()
    try:
        tps = {TopicPartition(topic, p): o for p, o in offsets.items()}
        consumer.assign(list(tps))
        await consumer.commit(tps)
    finally:
        await consumer.stop()


async def first_in_group(bootstrap: str, group: str, topic: str, partition: int) -> Record:
    """The first committed record a consumer of ``group`` reads from ``partition``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False, isolation_level="read_committed",
                                auto_offset_reset="none")  # fmt: skip
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        record = await asyncio.wait_for(consumer.getone(tp), 30)
        return record.offset, record.key, record.value
    finally:
        await consumer.stop()


def rlmm(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlmm.cli", *args, "--config", str(config)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def first_at_or_after(records: list[Record], offset: int) -> Record | None:
    return next((r for r in records if r[0] >= offset), None)


async def test_configs_come_back_and_a_group_moves_to_the_same_record(
    kafka_cluster: ApacheKafkaCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = kafka_cluster
    topic = f"cfgmap-{uuid4().hex[:6]}"
    target = f"{topic}-restored"
    group = GROUP_FORMAT.format(topic)
    cluster.create_topic(topic, configs=SOURCE_CONFIGS,
                         assignments={0: [NODE, 2, 3], 1: [NODE, 3, 2]})  # fmt: skip
    cluster.created.append(target)  # deleted after the test, as the source
    await produce(cluster.bootstrap, topic, waves=3)

    config = tmp_path / "sidecar.toml"
    config.write_text(config_text(tmp_path, tmp_path / "sidecar", cluster.bootstrap,
                                  '"topic.configs.refresh.ms" = 1000\n'))  # fmt: skip
    reader = tmp_path / "reader.toml"
    reader.write_text(config_text(tmp_path, tmp_path / "reader", cluster.bootstrap))
    store = TopicConfigStore(tmp_path / "remote")
    sidecar = Sidecar(load_config(config, env={}), [cluster.log_dir(NODE)],
                      display=Display(rich=False))  # fmt: skip
    caplog.set_level(logging.INFO, logger="rlmm.offload")
    running = asyncio.create_task(sidecar.run())
    try:
        # Every wave's segment archived (the roll records' segments stay local).
        # 68 offsets a wave and partition: 60 records, 3 committed, 3 aborted, 2 markers.
        ends = await wait_for("the waves archived", lambda: (
            (e := archived_ends(reader, topic)) and len(e) == PARTITIONS
            and all(end >= 3 * 68 for end in e.values()) and e))  # fmt: skip
        found = await wait_for("the topic's configs kept", lambda: next(
            (c for c in _kept(store, topic)), None))  # fmt: skip
        assert found.configs == SOURCE_CONFIGS
        # A change made with Kafka's own tool is kept within the refresh.
        cluster.alter_topic_configs(topic, {"segment.bytes": "2097152"})
        changed = await wait_for("the change kept", lambda: next(
            (c for c in _kept(store, topic) if c.configs.get("segment.bytes") == "2097152"),
            None))  # fmt: skip
        assert changed.updated_ms > found.updated_ms
    finally:
        sidecar.stop()
        await asyncio.wait_for(running, 60)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
    assert any("its configs (" in r.getMessage() and "kept in" in r.getMessage()
               for r in caplog.records)  # fmt: skip

    # What a read_committed consumer of the source reads, with offsets.
    source = {
        p: [(r.offset, r.key, r.value) for r in rs]
        for p, rs in (await consume_records(cluster.bootstrap, topic)).items()
    }
    # The group committed offsets: partition 0 at the second wave's commit marker (not
    # data: the next record read is the third wave's first), partition 1 at a record
    # after two waves of markers and aborted records.
    data_0 = {r[0] for r in source[0]}
    marker = next(o for o in range(80, ends[0]) if o not in data_0)
    committed = {0: marker, 1: source[1][len(source[1]) * 2 // 3][0]}
    await commit_group(cluster.bootstrap, group, topic, committed)

    dry = rlmm(reader, "restore", "--topic", topic, "--target-topic", target,
               "--bootstrap-server", cluster.bootstrap, "--dry-run")  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert f"configs: {target} to be created with cleanup.policy=delete," in dry.stdout
    assert "min.insync.replicas=2" in dry.stdout and "segment.bytes=2097152" in dry.stdout
    assert "configs not copied (tiering" in dry.stdout and "local.retention.ms=1000" in dry.stdout
    assert "offsets: the target's differ" in dry.stdout
    # Small transactions: the restore's own commit markers shift the offsets too.
    done = rlmm(reader, "restore", "--topic", topic, "--target-topic", target,
                "--bootstrap-server", cluster.bootstrap, "--transaction-records", "50",
                "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["done"] and summary["created_target"]
    applied = {k: v for k, v in SOURCE_CONFIGS.items() if k != "local.retention.ms"}
    applied["segment.bytes"] = "2097152"
    assert summary["topic_configs"]["applied"] == dict(sorted(applied.items()))
    assert summary["topic_configs"]["not_copied"] == {
        "local.retention.ms": "tiering: the target cluster decides whether it tiers the topic"
    }
    assert summary["offsets_topic"] == "__rlmm_restore_offsets"

    # The restored topic's configs: the source's own, set on the topic (source 1).
    described = await topic_configs(cluster.bootstrap, target)
    for name, value in applied.items():
        assert described[name] == (value, 1), name
    assert described["local.retention.ms"][1] != 1  # not set on the target

    # Every archived source offset, through the map, lands on the same record.
    restored = {
        p: [(r.offset, r.key, r.value) for r in rs]
        for p, rs in (await consume_records(cluster.bootstrap, target)).items()
    }
    ends_restored = {p["partition"]: p["end_offset"] for p in summary["plan"]["partitions"]}
    mapped = await read_offset_map({"bootstrap_servers": cluster.bootstrap}, target)
    assert mapped.source_topic == topic
    shifted = 0
    for p in range(PARTITIONS):
        archived = [r for r in source[p] if r[0] < ends_restored[p]]
        assert [r[1:] for r in restored[p]] == [r[1:] for r in archived]
        # A few runs per transaction, not one per batch or record.
        assert len(mapped.runs[p]) <= 3 * summary["partitions"][p]["transactions"] + 6
        for offset in range(ends_restored[p]):
            moved = mapped.translate(p, offset)
            assert moved.exact and moved.target_offset is not None, moved
            want = first_at_or_after(archived, offset)
            got = first_at_or_after(restored[p], moved.target_offset)
            assert (got and got[1:]) == (want and want[1:]), (p, offset, moved)
            shifted += moved.target_offset != offset
    assert shifted > 0  # the offsets did move

    # The group, moved with Kafka's own tool from the CSV rlmm writes.
    csv = tmp_path / "reset.csv"
    moved_text = rlmm(reader, "restore-offsets", "--bootstrap-server", cluster.bootstrap,
                      "--target-topic", target, "--group", group, "--csv", str(csv))  # fmt: skip
    assert moved_text.returncode == 0, moved_text.stderr
    assert f"group {group}'s committed offsets of {topic}" in moved_text.stdout
    assert "--reset-offsets --from-file FILE --execute" in moved_text.stdout
    lines = csv.read_text().splitlines()
    assert [line.split(",")[:2] for line in lines] == [[target, "0"], [target, "1"]]
    reset = run_java(
        cluster._libs, "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        "--bootstrap-server", cluster.bootstrap, "--group", group, "--reset-offsets",
        "--from-file", str(csv), "--execute",
    )  # fmt: skip
    assert reset.returncode == 0, reset.stdout + reset.stderr
    # The same offsets from Kafka's own export (after the reset: take the source's).
    exported = run_java(
        cluster._libs, "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        "--bootstrap-server", cluster.bootstrap, "--group", group, "--reset-offsets",
        "--topic", topic, "--to-current", "--export", "--dry-run",
    )  # fmt: skip
    assert exported.returncode == 0, exported.stdout + exported.stderr
    old_csv = tmp_path / "old.csv"
    old_csv.write_text(exported.stdout)
    from_file = rlmm(reader, "restore-offsets", "--bootstrap-server", cluster.bootstrap,
                     "--target-topic", target, "--from-file", str(old_csv), "--json")  # fmt: skip
    assert from_file.returncode == 0, from_file.stderr
    assert json.loads(from_file.stdout)["csv"] == csv.read_text()
    for p, offset in committed.items():
        want = first_at_or_after(source[p], offset)
        got = await first_in_group(cluster.bootstrap, group, target, p)
        assert want is not None and got[1:] == want[1:], (p, offset, got, want)
        assert got[0] != want[0]  # at another offset: the map moved it


def _kept(store: TopicConfigStore, topic: str) -> list[Any]:
    """The configs kept for ``topic`` (whatever its id), from the store's directory."""
    out = []
    for path in (Path(store.location) / "__topic_configs").glob(f"{topic}-*.json"):
        found = store.read(topic, path.stem[len(topic) + 1 :])
        if found is not None:
            out.append(found)
    return out
