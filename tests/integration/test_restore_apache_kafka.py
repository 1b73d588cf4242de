"""`rlmm restore` on Apache Kafka 4.1.1: disaster recovery from the remote dir alone,
SIGKILLs and resumes, and every bad input refused with nothing written.

A source broker of its own tiers two topics through Kafka's LocalTieredStorage (every
codec, keys (some null), headers, a committed and an aborted transaction); Kafka deletes
the local copies. A read_committed consumer captures what was tiered. The plans built
from ``__remote_log_metadata`` and from the store alone are compared; then the source
broker is stopped and its log dirs deleted (``__remote_log_metadata`` with them): only
the remote dir is left. A second, fresh broker is the target.

Invariants checked: a read_committed consumer of the target equals the capture,
partition by partition and in order, with keys, values, headers and CreateTime
timestamps, after a straight restore (every archived batch passed through as it was,
re-stamped), after offset and timestamp ranges that cut batches (those re-encoded)
and after a restore SIGKILLed five times and resumed (two partitions in flight, so
transactions hold both), and for two topics restored in one run (each into a target of
its own, each resumable on its own: killed twice inside the second topic and resumed,
both targets hold every record once); each bad input exits 2 with one line and writes
nothing, for a bad second topic of a run nothing for the first either.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from remote.segments import RecordBatchReader
from rlmm.restore import murmur2_partition, read_progress
from tests.fixtures.apache_kafka import (
    METADATA_PARTITIONS,
    ApacheKafkaBroker,
    new_broker,
    run_java,
    start_or_fail,
)
from tests.integration.test_spark_kafka_vs_archive import headers_for

pytestmark = [pytest.mark.kafka, pytest.mark.apache_kafka, pytest.mark.slow]

PARTITIONS = 2
SEGMENT_MS = 1500
CODECS = [None, "gzip", "snappy", "lz4", "zstd"]
TOPIC, OTHER = "dr", "dr-other"
Row = tuple[bytes | None, bytes | None, tuple[tuple[str, bytes], ...], int, int]


async def create_topic(bootstrap: str, topic: str, partitions: int, tiered: bool) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        configs = (
            {
                "remote.storage.enable": "true",
                "segment.ms": str(SEGMENT_MS),
                "local.retention.ms": "1000",
                "retention.ms": "-1",
            }
            if tiered
            else {}
        )
        await admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs)])
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, per_codec: int) -> dict[int, int]:
    """Each codec's records (timestamps 1 ms apart: Kafka rolls a segment every
    segment.ms of them), a committed and an aborted transaction, then one record per
    partition that rolls the last segment; returns those records' offsets."""
    base_ts = int(time.time() * 1000) - 3_600_000
    n = 0
    for codec in CODECS:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, acks="all", compression_type=codec, linger_ms=20
        )
        await producer.start()
        try:
            pending = []
            for _ in range(per_codec):
                key = None if n % 5 == 0 else f"key-{n % 7}".encode()
                value = f"{codec}-{n}-".encode() + os.urandom(n % 50).hex().encode()
                pending.append(
                    await producer.send(
                        topic,
                        value,
                        key=key,
                        partition=n % PARTITIONS,
                        timestamp_ms=base_ts + n,
                        headers=headers_for(n),
                    )
                )
                n += 1
            await asyncio.gather(*pending)
        finally:
            await producer.stop()
    txn = AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=f"src-{topic}", enable_idempotence=True
    )
    await txn.start()
    try:
        async with txn.transaction():
            for i in range(10):
                await txn.send(
                    topic,
                    f"committed-{i}".encode(),
                    key=b"c",
                    partition=i % 2,
                    timestamp_ms=base_ts + n + i,
                    headers=[("txn", b"commit")],
                )
        await txn.begin_transaction()
        for i in range(10):
            await txn.send(
                topic,
                f"aborted-{i}".encode(),
                key=b"a",
                partition=i % 2,
                timestamp_ms=base_ts + n + 10 + i,
                headers=[("txn", b"abort")],
            )
        await txn.abort_transaction()
    finally:
        await txn.stop()
    await asyncio.sleep(SEGMENT_MS / 1000 + 0.5)  # the markers carry the broker's clock
    plain = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await plain.start()
    try:
        return {
            p: (await plain.send_and_wait(topic, b"roll", partition=p)).offset
            for p in range(PARTITIONS)
        }
    finally:
        await plain.stop()


async def consume(
    bootstrap: str, topic: str, ends: dict[int, int] | None = None
) -> dict[int, list[Row]]:
    """Every committed record below ``ends`` (default: the last stable offsets)."""
    records = await consume_records(bootstrap, topic, ends)
    return {p: [_row(r) for r in got] for p, got in records.items()}


async def consume_with_offsets(
    bootstrap: str, topic: str, ends: dict[int, int] | None = None
) -> dict[int, list[tuple[int, Row]]]:
    """Every committed record below ``ends`` (default: the last stable offsets), with
    its offset."""
    records = await consume_records(bootstrap, topic, ends)
    return {p: [(r.offset, _row(r)) for r in got] for p, got in records.items()}


def _row(r: ConsumerRecord[bytes, bytes]) -> Row:
    return (r.key, r.value, tuple(r.headers), r.timestamp, r.timestamp_type)


async def consume_records(
    bootstrap: str, topic: str, ends: Mapping[int, int] | None = None,
    isolation_level: str = "read_committed",
) -> dict[int, list[ConsumerRecord[bytes, bytes]]]:  # fmt: skip
    """Every record a consumer at ``isolation_level`` is served below ``ends`` (default:
    the end offsets at that level), per partition in the order served."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation_level,
        # No group, no committed offset: each assigned partition starts at its log start.
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        tps = [
            TopicPartition(topic, p)
            for p in sorted(
                consumer.partitions_for_topic(topic) or await _partitions(consumer, topic)
            )
        ]
        consumer.assign(tps)
        last = await _decided_ends(consumer, bootstrap, tps, isolation_level)
        stop = {tp: last[tp] if ends is None else min(last[tp], ends[tp.partition]) for tp in tps}
        out: dict[int, list[ConsumerRecord[bytes, bytes]]] = {tp.partition: [] for tp in tps}
        deadline = time.monotonic() + 120
        while behind := [tp for tp in tps if await consumer.position(tp) < stop[tp]]:
            assert time.monotonic() < deadline, "consumer did not reach the end in 120 s"
            for tp, records in (await consumer.getmany(*behind, timeout_ms=500)).items():
                out[tp.partition] += [r for r in records if r.offset < stop[tp]]
        return out
    finally:
        await consumer.stop()


async def _decided_ends(
    consumer: AIOKafkaConsumer, bootstrap: str, tps: list[TopicPartition], isolation_level: str
) -> dict[TopicPartition, int]:
    """``consumer``'s end offsets; at read_committed, once the last stable offsets
    reach the high watermarks (within 30 s): a commit returns when the coordinator
    has logged it, and its markers, which move the LSO, may still be on their way."""
    if isolation_level != "read_committed":
        return await consumer.end_offsets(tps)
    probe = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await probe.start()
    try:
        deadline = time.monotonic() + 30
        while True:
            stable, high = await consumer.end_offsets(tps), await probe.end_offsets(tps)
            if stable == high or time.monotonic() > deadline:
                return stable
            await asyncio.sleep(0.2)
    finally:
        await probe.stop()


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> set[int]:
    for _ in range(50):
        await consumer._client.force_metadata_update()
        found = consumer.partitions_for_topic(topic)
        if found:
            return found
        await asyncio.sleep(0.2)
    raise AssertionError(f"topic {topic} has no partitions")


async def topics(bootstrap: str) -> dict[str, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return {t["topic"]: len(t["partitions"]) for t in await admin.describe_topics()}
    finally:
        await admin.close()


def local_bases(broker: ApacheKafkaBroker, topic: str, p: int) -> list[int]:
    return sorted(int(f.stem) for f in (broker.data_dir / f"{topic}-{p}").glob("*.log"))


def rlmm(config: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlmm.cli", *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


class Source:
    def __init__(
        self,
        remote_dir: Path,
        config: Path,
        captured: dict[str, dict[int, list[tuple[int, Row]]]],
        plans: dict[str, Any],
    ) -> None:
        self.remote_dir = remote_dir
        self.config = config
        # What a read_committed consumer of the source returned, with offsets and without.
        self.with_offsets = captured
        self.capture = {
            t: {p: [row for _, row in rows] for p, rows in by_p.items()}
            for t, by_p in captured.items()
        }
        self.plans = plans


@pytest.fixture(scope="module")
def source(apache_kafka_libs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Source]:
    """Two tiered topics, captured; then the broker is gone and only its remote dir left."""
    root = tmp_path_factory.mktemp("source")
    broker = new_broker(root / "broker", libs=apache_kafka_libs)
    start_or_fail(broker)
    try:
        rolls: dict[str, dict[int, int]] = {}

        async def fill() -> None:
            for topic, per_codec in ((TOPIC, 1200), (OTHER, 20)):
                await create_topic(broker.bootstrap, topic, PARTITIONS, tiered=True)
                rolls[topic] = await produce(broker.bootstrap, topic, per_codec)

        asyncio.run(fill())
        deadline = time.monotonic() + 180
        while True:
            local = {(t, p): local_bases(broker, t, p) for t in rolls for p in rolls[t]}
            if all(len(b) == 1 and b[0] >= rolls[t][p] for (t, p), b in local.items()):
                break
            assert time.monotonic() < deadline, f"not tiered in 180 s: {rolls} {local}"
            time.sleep(0.5)
        ends = {t: {p: local[(t, p)][0] for p in rolls[t]} for t in rolls}
        capture = {
            t: asyncio.run(consume_with_offsets(broker.bootstrap, t, ends[t])) for t in rolls
        }
        # Everything below the one local segment left: the roll records too, when a
        # marker written after them rolled again.
        assert sum(map(len, capture[TOPIC].values())) >= 5 * 1200 + 10
        config = root / "rlmm.toml"
        config.write_text(
            f'data_dir = "{root / "rlmm"}"\n[eventlog]\ntype = "kafka"\n'
            f'bootstrap_servers = "{broker.bootstrap}"\npartitions = {METADATA_PARTITIONS}\n'
            f'[remote]\ntype = "local-tiered-storage"\ndir = "{broker.remote_dir}"\n'
        )
        # The plan from Kafka's own metadata and the plan from the store alone agree
        # (a dry run against the source cluster itself: it writes nothing).
        plans = {}
        for how in ("metadata", "store"):
            extra = ["--from-store"] if how == "store" else []
            done = rlmm(
                config,
                "restore",
                "--topic",
                TOPIC,
                "--target-topic",
                "dry",
                "--bootstrap-server",
                broker.bootstrap,
                "--dry-run",
                "--json",
                *extra,
            )
            assert done.returncode == 0, done.stderr
            plans[how] = json.loads(done.stdout)["plan"]
        assert "dry" not in asyncio.run(topics(broker.bootstrap))
    finally:
        broker.stop()
    # The disaster: the cluster is gone, __remote_log_metadata with it.
    shutil.rmtree(broker.data_dir)
    config.write_text(
        f'data_dir = "{root / "rlmm"}"\n'
        f'[remote]\ntype = "local-tiered-storage"\ndir = "{broker.remote_dir}"\n'
    )
    yield Source(broker.remote_dir, config, capture, plans)


@pytest.fixture(scope="module")
def target(
    source: Source, apache_kafka_libs: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApacheKafkaBroker]:
    """A second, fresh broker (started after the source is gone: one JVM at a time)."""
    root = tmp_path_factory.mktemp("target")
    broker = new_broker(root, libs=apache_kafka_libs)
    start_or_fail(broker)
    try:
        yield broker
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)


def restore(
    source: Source, target: ApacheKafkaBroker, *args: str
) -> subprocess.CompletedProcess[str]:
    return rlmm(
        source.config, "restore", "--from-store", "--bootstrap-server", target.bootstrap, *args
    )


@pytest.mark.timeout(600)
def test_plans_from_the_metadata_and_from_the_store_agree(source: Source) -> None:
    by_metadata, by_store = source.plans["metadata"], source.plans["store"]
    assert by_metadata["source"]["metadata"] == "metadata"
    assert by_store["source"]["metadata"] == "store"
    for plan in (by_metadata, by_store):
        plan["source"].pop("metadata")
    assert by_metadata == by_store
    assert by_store["segments"] >= 2 * len(CODECS)
    assert [p["target_partitions"] for p in by_store["partitions"]] == [[0], [1]]


@pytest.mark.timeout(600)
def test_disaster_recovery_from_the_remote_dir_alone(
    source: Source, target: ApacheKafkaBroker
) -> None:
    dry = restore(source, target, "--topic", TOPIC, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    assert lines[0].split() == [
        "partition",
        "offsets",
        "from",
        "segments",
        "bytes",
        "offsets_left",
        "target",
    ]
    assert "segments from the store" in dry.stdout and "to be created" in dry.stdout
    assert lines[-1].endswith("; nothing written")
    # What the archive lacks: each partition's end (the segment Kafka had not rolled, and
    # so never tiered, starts there) and its newest archived record (issue 46, item 1).
    (tail,) = [line for line in lines if line.startswith("archive ends: ")]
    for p in source.plans["store"]["partitions"]:
        end, captured = p["archive_end_offset"], source.with_offsets[TOPIC][p["partition"]]
        assert end == p["end_offset"] > captured[-1][0], p
        assert f"{TOPIC}-{p['partition']} after offset {end - 1} (newest record 20" in tail
    assert "records written after these were never archived" in tail
    assert TOPIC not in asyncio.run(topics(target.bootstrap))
    done = restore(source, target, "--topic", TOPIC, "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["done"] and summary["created_target"] and not summary["resumed"]
    assert summary["records"] == sum(map(len, source.capture[TOPIC].values()))
    # Every archived batch went over as it was (re-stamped), none re-encoded.
    assert summary["batches_passed_through"] >= 2 * len(CODECS)
    assert summary["batches_reencoded"] == 0 and summary["reencoded"] == {}
    assert all(p["batches_passed_through"] for p in summary["partitions"])
    got = asyncio.run(consume(target.bootstrap, TOPIC))
    assert got == source.capture[TOPIC]
    assert all(r[4] == 0 for rows in got.values() for r in rows)  # CreateTime
    assert any(r[2] for rows in got.values() for r in rows)  # headers came over
    progress = asyncio.run(read_progress({"bootstrap_servers": target.bootstrap}, TOPIC, 1))
    assert sorted(progress) == [0, 1] and all(p.done for p in progress.values())
    # Run again: refused (the target holds this restore); with --resume: nothing to do.
    again = restore(source, target, "--topic", TOPIC)
    assert again.returncode == 2 and "pass --resume" in again.stderr
    resumed = restore(source, target, "--topic", TOPIC, "--resume", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["records"] == 0
    assert asyncio.run(consume(target.bootstrap, TOPIC)) == source.capture[TOPIC]


@pytest.mark.timeout(600)
def test_range_boundaries_cut_batches_that_are_decoded(
    source: Source, target: ApacheKafkaBroker
) -> None:
    """Offset and timestamp ranges whose ends fall inside archived batches: exactly the
    consumer's records in the range, the cut batches re-encoded, the rest passed
    through."""
    captured = source.with_offsets[TOPIC][0]
    # Batches of partition 0 as Kafka tiered them (several records each): cut the
    # range inside one a quarter in and one three quarters in.
    bases = sorted(
        h.base_offset
        for log in source.remote_dir.rglob("*.log")
        if log.parent.name.startswith(f"{TOPIC}-0-")
        for h in RecordBatchReader(log).headers()
        if not h.is_control and h.record_count >= 3 and not h.is_transactional
    )
    first, end = bases[len(bases) // 4] + 1, bases[3 * len(bases) // 4] + 1
    done = restore(
        source, target, "--topic", TOPIC, "--partitions", "0", "--target-topic", "dr-offsets",
        "--from-offset", str(first), "--to-offset", str(end), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["reencoded"] == {"range boundary": 2}
    assert summary["batches_passed_through"] >= 2
    got = asyncio.run(consume(target.bootstrap, "dr-offsets"))
    assert got[0] == [row for offset, row in captured if first <= offset < end]
    assert got[1] == []
    # Timestamps grow with the offsets in the source: the range is the records between.
    lo, hi = captured[1900 // 2][1][3] + 1, captured[4900 // 2][1][3]
    done = restore(
        source, target, "--topic", TOPIC, "--target-topic", "dr-times",
        "--from-timestamp", str(lo), "--to-timestamp", str(hi), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["reencoded"].get("range boundary", 0) >= 2
    got = asyncio.run(consume(target.bootstrap, "dr-times"))
    for p in range(PARTITIONS):
        assert got[p] == [row for row in source.capture[TOPIC][p] if lo <= row[3] < hi]
        assert got[p]


@pytest.mark.timeout(900)
def test_sigkilled_five_times_and_resumed_writes_every_record_once(
    source: Source, target: ApacheKafkaBroker
) -> None:
    name = "dr-crash"
    rng = random.Random()
    config = ["--topic", TOPIC, "--target-topic", name, "--transaction-records", "10"]
    # Archived batches go over whole: unthrottled the restore takes about a second, too
    # short for five kills at random moments. A produce quota on its client id makes
    # it last tens of seconds: the broker averages the rate over its 11 one-second
    # quota windows, so only the first ~88 KB of the ~370 KB go unthrottled.
    _produce_quota(target, 8_000)
    try:
        mid_way, seen = _kill_at_random_moments(source, target, name, config, rng)
    finally:
        _produce_quota(target, None)
    assert mid_way >= 3, f"the SIGKILLs did not land inside the restore: {seen}"
    done = restore(source, target, *config, "--resume", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["resumed"]
    assert asyncio.run(consume(target.bootstrap, name)) == source.capture[TOPIC]


@pytest.mark.timeout(900)
def test_two_topics_sigkilled_inside_the_second_and_resumed_write_every_record_once(
    source: Source, target: ApacheKafkaBroker
) -> None:
    """A run of two topics killed while it restores the second (the first is done by
    then), twice, then resumed: the first topic's progress says done and nothing of
    it is written again; both targets equal the source."""
    first, second = "multi.dr-other", "multi.dr"
    rng = random.Random()
    config = [
        "--topic", OTHER, "--topic", TOPIC, "--target-prefix", "multi.",
        "--transaction-records", "10",
    ]  # fmt: skip
    # As in the five-kill test: slow enough to be killed inside the second topic. The
    # first (200 records) goes over within the quota's unthrottled start.
    _produce_quota(target, 8_000)
    try:
        mid_way, seen = _kill_at_random_moments(source, target, second, config, rng, kills=2)
        client = {"bootstrap_servers": target.bootstrap}
        done_first = asyncio.run(read_progress(client, first, 1))
    finally:
        _produce_quota(target, None)
    # Each kill landed after the second topic's first commit, and before its end.
    assert mid_way == 2, f"the SIGKILLs did not land inside the second topic: {seen}"
    assert sorted(done_first) == [0, 1] and all(p.done for p in done_first.values())
    done = restore(source, target, *config, "--resume", "--json")
    assert done.returncode == 0, done.stderr
    summaries = json.loads(done.stdout)["topics"]
    assert [s["plan"]["target"]["topic"] for s in summaries] == [first, second]
    assert all(s["resumed"] and s["done"] for s in summaries)
    assert summaries[0]["records"] == 0
    for topic, name in ((OTHER, first), (TOPIC, second)):
        assert asyncio.run(consume(target.bootstrap, name)) == source.capture[topic], name


def _produce_quota(target: ApacheKafkaBroker, rate: int | None) -> None:
    """Set (or, with None, remove) a producer_byte_rate quota on the restore's client id."""
    change = (
        ["--add-config", f"producer_byte_rate={rate}"]
        if rate is not None
        else ["--delete-config", "producer_byte_rate"]
    )
    done = run_java(
        target.libs, "kafka.admin.ConfigCommand", "--bootstrap-server", target.bootstrap,
        "--alter", *change, "--entity-type", "clients", "--entity-name", "rlmm-restore",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def _kill_at_random_moments(
    source: Source,
    target: ApacheKafkaBroker,
    name: str,
    config: list[str],
    rng: random.Random,
    kills: int = 5,
) -> tuple[int, list[Any]]:
    """``kills`` runs (the first, then resumes), each SIGKILLed at a random moment after
    its first commit into the target topic ``name``; how many left that topic's restore
    unfinished, and where each left it."""
    client = {"bootstrap_servers": target.bootstrap}
    mid_way = 0
    seen: list[Any] = []
    for kill in range(kills):
        args = [
            sys.executable,
            "-m",
            "rlmm.cli",
            "restore",
            "--from-store",
            "--bootstrap-server",
            target.bootstrap,
            *config,
            "--config",
            str(source.config),
        ]
        if kill:
            args.append("--resume")
        proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
        )
        try:
            # Until the restore has committed something new (or a cap), then a random moment.
            before = asyncio.run(_committed(client, name))
            deadline = time.monotonic() + 60
            while proc.poll() is None and time.monotonic() < deadline:
                if asyncio.run(_committed(client, name)) > before:
                    break
                time.sleep(0.2)
            time.sleep(rng.uniform(0.0, 2.0))
        finally:
            proc.send_signal(signal.SIGKILL)
            _, err = proc.communicate(timeout=30)
        assert proc.returncode in (-signal.SIGKILL, 0), err
        progress = asyncio.run(read_progress(client, name, 1))
        seen.append((proc.returncode, {p: s.next_offset for p, s in progress.items()}))
        if progress and not all(p.done for p in progress.values()):
            mid_way += 1
    return mid_way, seen


async def _committed(client: dict[str, Any], target: str) -> int:
    counts = await topics(client["bootstrap_servers"])
    if "__rlmm_restore" not in counts:
        return 0
    progress = await read_progress(client, target, counts["__rlmm_restore"])
    return sum(p.records for p in progress.values())


@pytest.mark.timeout(600)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    source: Source, target: ApacheKafkaBroker
) -> None:
    async def occupy() -> None:
        await create_topic(target.bootstrap, "occupied", PARTITIONS, tiered=False)
        await create_topic(target.bootstrap, "three", 3, tiered=False)
        producer = AIOKafkaProducer(bootstrap_servers=target.bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait("occupied", b"someone's data", partition=1)
        finally:
            await producer.stop()

    asyncio.run(occupy())
    before = asyncio.run(topics(target.bootstrap))
    cases = {
        "unknown topic 'nope'": ["--topic", "nope"],
        "outside the archive": [
            "--topic",
            TOPIC,
            "--target-topic",
            "x1",
            "--to-offset",
            "999999999",
        ],
        "already holds data": ["--topic", TOPIC, "--target-topic", "occupied"],
        "has 3 partitions": ["--topic", TOPIC, "--target-topic", "three"],
        # The progress saved in "dr" (by the disaster-recovery test, or by this run
        # of it) is of the topic "dr", not of "dr-other".
        "refusing to mix two sources": ["--topic", OTHER, "--target-topic", TOPIC, "--resume"],
        # Several topics: a bad second topic (its target holds a restore) writes
        # nothing for the first ("dr-other" is not created).
        "pass --resume": ["--topic", OTHER, "--topic", TOPIC],
    }
    if TOPIC not in before:
        assert restore(source, target, "--topic", TOPIC).returncode == 0
        before = asyncio.run(topics(target.bootstrap))
    for message, args in cases.items():
        done = restore(source, target, *args)
        assert done.returncode == 2, (message, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (message, done.stderr)
        assert done.stdout == ""
    assert asyncio.run(topics(target.bootstrap)) == before
    occupied = asyncio.run(consume(target.bootstrap, "occupied"))
    assert [r[1] for rows in occupied.values() for r in rows] == [b"someone's data"]
    # With --partitioner murmur2 the 3-partition target takes the 2-partition topic,
    # each keyed record where Kafka's producer would put it, per key in order.
    done = restore(
        source,
        target,
        "--topic",
        TOPIC,
        "--target-topic",
        "three",
        "--partitioner",
        "murmur2",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["batches_passed_through"] == 0
    assert summary["reencoded"] == {"partitioner": summary["batches_reencoded"]}
    got = asyncio.run(consume(target.bootstrap, "three"))
    assert sum(map(len, got.values())) == sum(map(len, source.capture[TOPIC].values()))
    for p, rows in got.items():
        assert all(murmur2_partition(r[0], 3, -1) == p for r in rows if r[0] is not None)
    for key in {r[0] for rows in source.capture[TOPIC].values() for r in rows if r[0]}:
        want = [r for rows in source.capture[TOPIC].values() for r in rows if r[0] == key]
        have = [r for rows in got.values() for r in rows if r[0] == key]
        # The source spread one key over both partitions; each partition's share keeps
        # its order in the target.
        for src in source.capture[TOPIC].values():
            mine = [r for r in src if r[0] == key]
            it = iter(have)
            assert all(any(r == h for h in it) for r in mine)
        assert sorted(want) == sorted(have)


@pytest.mark.timeout(600)
def test_two_topics_in_one_run_each_into_a_target_of_its_own(
    source: Source, target: ApacheKafkaBroker
) -> None:
    both = ["--topic", OTHER, "--topic", TOPIC, "--target-prefix", "both."]
    dry = restore(source, target, *both, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "target: both.dr-other (2 partitions" in dry.stdout
    assert "target: both.dr (2 partitions" in dry.stdout
    assert len([ln for ln in dry.stdout.splitlines() if ln.endswith("; nothing written")]) == 2
    assert not {"both.dr", "both.dr-other"} & set(asyncio.run(topics(target.bootstrap)))
    done = restore(source, target, *both, "--json")
    assert done.returncode == 0, done.stderr
    summaries = json.loads(done.stdout)["topics"]
    assert [s["plan"]["target"]["topic"] for s in summaries] == ["both.dr-other", "both.dr"]
    assert len({s["transactional_id"] for s in summaries}) == 2
    client = {"bootstrap_servers": target.bootstrap}
    for topic, summary in zip((OTHER, TOPIC), summaries, strict=True):
        assert summary["done"] and summary["created_target"] and not summary["resumed"]
        assert summary["records"] == sum(map(len, source.capture[topic].values()))
        got = asyncio.run(consume(target.bootstrap, f"both.{topic}"))
        assert got == source.capture[topic], topic
        # Each topic's own progress (keyed by its target): a --resume finds it done.
        progress = asyncio.run(read_progress(client, f"both.{topic}", 1))
        assert sorted(progress) == [0, 1] and all(p.done for p in progress.values())
        assert {p.source_topic for p in progress.values()} == {topic}
