"""rlmm reads a Kafka cluster's own remote tier (Kafka's LocalTieredStorage), as it is.

The session's Apache Kafka 4.1.1 broker tiers with Kafka's own RemoteLogManager,
TopicBasedRemoteLogMetadataManager and LocalTieredStorage. A topic gets records in
every codec, with keys (some null) and headers, a committed and an aborted
transaction; each codec's records land in their own segment (``segment.ms``). Kafka
tiers the rolled segments and deletes the local copies (``local.retention.ms``), so
those records live only in ``rsm.config.dir``.

Invariants checked: Spark's own ``format("kafka")`` (the broker serves the remote tier)
equals ``format("kafka-archive")`` reading LocalTieredStorage's files directly, row for
row, under read_uncommitted and read_committed; ``rlmm verify --deep`` is clean;
``rlmm segments show`` lists every file of a segment; a deleted index file and a stray
file are both found, and ``rlmm gc --apply`` removes the stray file only, leaving every
byte Kafka wrote in place.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from uuid import uuid4

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.fixtures.apache_kafka import (
    METADATA_PARTITIONS,
    ApacheKafkaBroker,
)
from tests.integration.test_spark_kafka_vs_archive import (
    headers_for,
    kafka_source_jars,
    read_with_spark,
)

pytestmark = [pytest.mark.kafka, pytest.mark.apache_kafka, pytest.mark.spark, pytest.mark.slow]

PARTITIONS = 2
SEGMENT_MS = 1500
CODECS = [None, "gzip", "snappy", "lz4", "zstd"]
ISOLATION = ["read_uncommitted", "read_committed"]
PER_CODEC = 40


async def create_topic(bootstrap: str, topic: str, **extra: str) -> None:
    """A tiered topic of PARTITIONS partitions, rolled by SEGMENT_MS, its local copies
    deleted after a second; ``extra`` topic configs with ``_`` for ``.``
    (``segment_bytes="1048576"``)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        configs = {
            "remote.storage.enable": "true",
            "segment.ms": str(SEGMENT_MS),
            "local.retention.ms": "1000",
            "retention.ms": "-1",
            **{k.replace("_", "."): v for k, v in extra.items()},
        }
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1, topic_configs=configs)])
    finally:
        await admin.close()


# Kafka rolls by time when a new batch's timestamp is segment.ms past the first one of
# the active segment: each group's timestamps start GROUP_MS after the previous group's.
GROUP_MS = SEGMENT_MS + 500


async def produce(bootstrap: str, topic: str) -> dict[int, int]:
    """Each codec's records, then a committed and an aborted transaction, each group in
    segments of its own; returns per partition the offset of the record that rolls the
    last of them."""
    base_ts = int(time.time() * 1000) - 120_000
    n = 0
    for g, codec in enumerate(CODECS):
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, acks="all", compression_type=codec, linger_ms=20
        )
        await producer.start()
        try:
            pending = []
            for _ in range(PER_CODEC):
                key = None if n % 5 == 0 else f"key-{n % 7}".encode()
                value = f"{codec}-{n}-".encode() + os.urandom(n % 50).hex().encode()
                pending.append(
                    await producer.send(
                        topic, value, key=key, partition=n % PARTITIONS,
                        timestamp_ms=base_ts + g * GROUP_MS + n, headers=headers_for(n),
                    )
                )  # fmt: skip
                n += 1
            await asyncio.gather(*pending)
        finally:
            await producer.stop()
    txn = AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=f"rlmm-lts-{topic}", enable_idempotence=True
    )
    await txn.start()
    try:
        async with txn.transaction():
            for i in range(10):
                await txn.send(topic, f"committed-{i}".encode(), key=b"c", partition=i % 2,
                               timestamp_ms=base_ts + 6 * GROUP_MS + i,
                               headers=[("txn", b"commit")])  # fmt: skip
        await txn.begin_transaction()
        for i in range(10):
            await txn.send(topic, f"aborted-{i}".encode(), key=b"a", partition=i % 2,
                           timestamp_ms=base_ts + 7 * GROUP_MS + i,
                           headers=[("txn", b"abort")])  # fmt: skip
        await txn.abort_transaction()
    finally:
        await txn.stop()
    # The markers carry the broker's clock; the roll record comes segment.ms later (and
    # after the abort markers, which the coordinator writes after abort returns).
    await asyncio.sleep(SEGMENT_MS / 1000 + 0.5)
    plain = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await plain.start()
    try:
        ends = {}
        for p in range(PARTITIONS):
            ends[p] = (await plain.send_and_wait(topic, b"roll", partition=p)).offset
        return ends
    finally:
        await plain.stop()


def local_bases(broker: ApacheKafkaBroker, topic: str, p: int) -> list[int]:
    return sorted(int(f.stem) for f in (broker.data_dir / f"{topic}-{p}").glob("*.log"))


def rlmm(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlmm.cli", *args, "--config", str(config)],
        capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def digest(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


async def test_cli_and_spark_read_kafkas_local_tiered_storage(
    apache_kafka_broker: ApacheKafkaBroker, tmp_path: Path
) -> None:
    jars = await kafka_source_jars()
    broker = apache_kafka_broker
    topic = f"lts-{uuid4().hex[:8]}"
    await create_topic(broker.bootstrap, topic)
    rolls = await produce(broker.bootstrap, topic)

    # Kafka tiers every rolled segment and then deletes its local copy: only the active
    # segment (from the roll record on) stays on the broker's disk.
    # Everything before the one local segment left is tiered; it starts at the roll
    # record, or later if a marker written after it rolled again.
    deadline = time.monotonic() + 150
    while True:
        local = {p: local_bases(broker, topic, p) for p in rolls}
        if all(len(bases) == 1 and bases[0] >= rolls[p] for p, bases in local.items()):
            break
        if time.monotonic() > deadline:
            tiered = sorted(f.name for f in broker.remote_dir.rglob(f"{topic}-*/*.log"))
            pytest.fail(f"not tiered in 150 s: rolls {rolls}, local {local}, tiered {tiered}")
        await asyncio.sleep(0.5)
    ends = {p: bases[0] for p, bases in local.items()}

    config = tmp_path / "rlmm.toml"
    config.write_text(
        f"""
data_dir = "{tmp_path / "rlmm"}"
[eventlog]
type = "kafka"
bootstrap_servers = "{broker.bootstrap}"
partitions = {METADATA_PARTITIONS}
[remote]
type = "local-tiered-storage"
dir = "{broker.remote_dir}"
"""
    )
    # The metadata of every tiered segment is in (Kafka writes it before deleting). A
    # marker after the roll record may have rolled once more: Kafka can still be copying
    # that segment (COPY_SEGMENT_STARTED), which verify below would call stuck; wait for it.
    deadline = time.monotonic() + 60
    while True:
        listed = rlmm(config, "segments", "list", "--json", "--topic", topic)
        assert listed.returncode == 0, listed.stderr
        segments = json.loads(listed.stdout)["segments"]
        states = {s["state"] for s in segments}
        if states == {"COPY_SEGMENT_FINISHED"}:
            break
        assert time.monotonic() < deadline, f"copies not finished in 60 s: {segments}"
        await asyncio.sleep(0.5)
    for p, end in ends.items():
        mine = sorted((s for s in segments if s["partition"] == p), key=lambda s: s["start_offset"])
        assert len(mine) >= len(CODECS) + 1, mine  # a segment per codec group, at least
        # at least up to the local segment seen above (Kafka may have rolled and tiered
        # once more since, when a transaction marker landed after the roll record)
        assert mine[0]["start_offset"] == 0 and mine[-1]["end_offset"] >= end - 1

    result = await asyncio.to_thread(
        read_with_spark,
        {
            "bootstrap": broker.bootstrap,
            "topic": topic,
            "ending": ends,
            "isolation": ISOLATION,
            "jars": [str(j) for j in jars],
            "rlmm_config": str(config),
            "output": str(tmp_path / "rows.json"),
        },
        tmp_path,
    )
    for isolation in ISOLATION:
        live, archived = result[f"kafka/{isolation}"], result[f"kafka-archive/{isolation}"]
        assert archived == live, f"{isolation}: kafka-archive differs from Spark's Kafka source"
    uncommitted, committed = result["kafka/read_uncommitted"], result["kafka/read_committed"]
    values = [bytes.fromhex(str(r["value"])) for r in uncommitted]
    assert sum(v.startswith(b"aborted-") for v in values) == 10
    produced = [r for r in committed if bytes.fromhex(str(r["value"])) != b"roll"]
    assert len(produced) == len(CODECS) * PER_CODEC + 10
    assert {bytes.fromhex(str(r["value"])).split(b"-")[0] for r in produced} == {
        b"None",
        b"gzip",
        b"snappy",
        b"lz4",
        b"zstd",
        b"committed",
    }
    assert any(r["headers"] for r in committed) and any(r["key"] is None for r in committed)

    # verify --deep: every file of every segment, every batch's CRC.
    deep = rlmm(config, "verify", "--json", "--deep", "--topic", topic, "--safety-window", "0s")
    assert deep.returncode == 0, deep.stdout + deep.stderr
    report = json.loads(deep.stdout)
    # Kafka may tier more by now (its active segment rolls by segment.ms): at least these.
    assert report["ok"] and report["segments_checked"] >= len(segments)
    assert report["objects_checked"] >= 5 * len(segments)

    first = segments[0]
    shown = rlmm(config, "segments", "show", first["segment_id"], "--json")
    assert shown.returncode == 0, shown.stderr
    kinds = {o["kind"]: o for o in json.loads(shown.stdout)["objects"]}
    assert {"log segment", "OFFSET index", "TIMESTAMP index", "PRODUCER_SNAPSHOT index",
            "LEADER_EPOCH index"} <= set(kinds)  # fmt: skip
    assert kinds["log segment"]["stored_size"] == first["segment_size_in_bytes"]

    # Break it on purpose: delete one index file, add a stray segment file.
    root = broker.remote_dir / "kafka-tiered-storage"
    index_name = kinds["OFFSET index"]["name"]
    (root / index_name).rename(tmp_path / "saved.index")
    log_name = kinds["log segment"]["name"]
    stray_name = log_name.replace(first["segment_id"], "AAAAAAAAAAAAAAAAAAAAAA")
    shutil.copyfile(root / log_name, root / stray_name)
    try:
        before = digest(root)
        found = rlmm(config, "verify", "--json", "--topic", topic, "--safety-window", "0s")
        assert found.returncode == 1, found.stdout + found.stderr
        problems = {(p["kind"], p.get("object_name")) for p in json.loads(found.stdout)["problems"]}
        assert problems == {("missing_object", index_name), ("orphan_object", stray_name)}

        gc = rlmm(config, "gc", "--json", "--apply", "--topic", topic, "--safety-window", "0s")
        assert gc.returncode == 1, gc.stdout + gc.stderr  # the missing index needs an operator
        after = digest(root)
        assert set(before) - set(after) == {stray_name}
        assert all(after[name] == before[name] for name in set(after) & set(before))
    finally:
        (tmp_path / "saved.index").rename(root / index_name)
    again = rlmm(config, "verify", "--json", "--deep", "--topic", topic, "--safety-window", "0s")
    assert again.returncode == 0, again.stdout
