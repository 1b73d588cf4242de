"""rlmm inside the broker: Apache Kafka 4.1.1 loads rlmm's RemoteStorageManager and
RemoteLogMetadataManager (the JVM bridge over ``rlmm serve``), and Kafka's own
RemoteLogManager tiers, deletes local segments and serves consumers from rlmm's tier.

Invariants checked, on real brokers:
- a consumer from offset 0 reads every record through the broker, under both isolation
  levels, equal to what was produced (keys, values, headers, every codec, a committed
  and an aborted transaction), after the local segments are gone into rlmm's S3 store
  (moto's server); the ops CLI's
  ``verify --deep`` is clean on the same archive, and Spark's ``kafka-archive`` equals
  the consumer;
- ``rlmm serve`` SIGKILLed mid-copy and mid-fetch: the broker keeps serving its local
  data, the bridge starts a new serve, tiering resumes, nothing is lost; SIGSTOPped
  past the calls' deadline: the broker never waits on it;
- a jar of another release is refused in one line, and the broker runs on untiered;
- a broker tiering with Kafka's TopicBasedRemoteLogMetadataManager switches to rlmm's
  RLMM and back (restarts): every segment tiered before each switch is still served.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import pytest
from aiokafka import AIOKafkaProducer

from rlmm.plugin import dangling_copies
from rlmm.plugin.server import release
from tests.fixtures.apache_kafka import (
    ApacheKafkaBroker,
    new_broker,
    start_or_fail,
)
from tests.fixtures.kafka_plugin import (
    alive,
    plugin_config,
    plugin_jar,
    plugin_jar_of_release,
    plugin_overrides,
    reader_config,
    sidecar_serve,
    stop_plugin_broker,
    wait_for_serve,
)
from tests.integration.test_kafka_tiered_storage_read import (
    PARTITIONS,
    SEGMENT_MS,
    create_topic,
)
from tests.integration.test_restore_apache_kafka import consume_records
from tests.integration.test_spark_kafka_vs_archive import kafka_source_jars, read_with_spark

pytestmark = [pytest.mark.kafka, pytest.mark.apache_kafka, pytest.mark.slow]

GROUP_MS = SEGMENT_MS + 500  # each group's timestamps roll a segment of its own
CODECS = [None, "gzip", "snappy", "lz4", "zstd"]
PER_CODEC = 40
Row = tuple[bytes | None, bytes, tuple[tuple[str, bytes], ...]]


def headers_for(i: int) -> list[tuple[str, bytes]]:
    return [] if i % 3 == 0 else [("trace", f"t-{i}".encode()), ("bin", bytes([i % 256, 0]))]


@pytest.fixture
def plugin_broker(tmp_path: Path) -> Iterator[ApacheKafkaBroker]:
    jar = plugin_jar()
    root = tmp_path / "broker"
    broker = new_broker(root, overrides=plugin_overrides(jar, plugin_config(root)))
    start_or_fail(broker)
    try:
        yield broker
    finally:
        left = stop_plugin_broker(broker)
        assert not left, f"rlmm serve {left} outlived its broker"


async def produce(
    bootstrap: str, topic: str, start: int = 0, group: int = 0
) -> tuple[dict[int, list[Row]], dict[int, list[Row]], dict[int, int]]:
    """Each codec's records, then a committed and an aborted transaction, each group in
    segments of its own, then one record per partition that rolls the last of them;
    returns (committed rows, aborted rows) per partition, in order, and the offsets of
    the roll records."""
    base_ts = int(time.time() * 1000) - 600_000 + group * 20 * GROUP_MS
    committed: dict[int, list[Row]] = {p: [] for p in range(PARTITIONS)}
    aborted: dict[int, list[Row]] = {p: [] for p in range(PARTITIONS)}
    n = start
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
                headers = headers_for(n)
                p = n % PARTITIONS
                committed[p].append((key, value, tuple(headers)))
                pending.append(
                    await producer.send(
                        topic, value, key=key, partition=p,
                        timestamp_ms=base_ts + g * GROUP_MS + n - start, headers=headers,
                    )
                )  # fmt: skip
                n += 1
            await asyncio.gather(*pending)
        finally:
            await producer.stop()
    txn = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=f"rlmm-plugin-{topic}-{group}",
        enable_idempotence=True,
    )
    await txn.start()
    try:
        async with txn.transaction():
            for i in range(10):
                row: Row = (b"c", f"committed-{group}-{i}".encode(), (("txn", b"commit"),))
                committed[i % 2].append(row)
                await txn.send(topic, row[1], key=row[0], partition=i % 2,
                               timestamp_ms=base_ts + 6 * GROUP_MS + i,
                               headers=list(row[2]))  # fmt: skip
        await txn.begin_transaction()
        for i in range(10):
            row = (b"a", f"aborted-{group}-{i}".encode(), (("txn", b"abort"),))
            aborted[i % 2].append(row)
            await txn.send(topic, row[1], key=row[0], partition=i % 2,
                           timestamp_ms=base_ts + 7 * GROUP_MS + i,
                           headers=list(row[2]))  # fmt: skip
        await txn.abort_transaction()
    finally:
        await txn.stop()
    await asyncio.sleep(SEGMENT_MS / 1000 + 0.5)
    plain = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await plain.start()
    rolls = {}
    try:
        for p in range(PARTITIONS):
            row = (None, f"roll-{group}".encode(), ())
            committed[p].append(row)
            rolls[p] = (await plain.send_and_wait(topic, row[1], partition=p)).offset
    finally:
        await plain.stop()
    return committed, aborted, rolls


def local_bases(broker: ApacheKafkaBroker, topic: str, p: int) -> list[int]:
    return sorted(int(f.stem) for f in (broker.data_dir / f"{topic}-{p}").glob("*.log"))


async def wait_tiered_and_deleted(
    broker: ApacheKafkaBroker, topic: str, ends: dict[int, int], timeout: float = 150
) -> None:
    """Until Kafka has tiered every rolled segment and deleted its local copy: the only
    local segment left starts at or after ``ends[p]`` (the roll record)."""
    deadline = time.monotonic() + timeout
    while True:
        local = {p: local_bases(broker, topic, p) for p in ends}
        if all(bases and bases[0] >= ends[p] for p, bases in local.items()):
            return
        if time.monotonic() > deadline:
            pytest.fail(
                f"not tiered and deleted in {timeout} s: ends {ends}, local {local}\n"
                f"{broker.log_tail(40)}"
            )
        await asyncio.sleep(0.5)


async def read_all(bootstrap: str, topic: str, isolation: str) -> dict[int, list[Row]]:
    records = await consume_records(bootstrap, topic, isolation_level=isolation)
    return {
        p: [(r.key, r.value, tuple((k, bytes(v)) for k, v in r.headers)) for r in rs]
        for p, rs in records.items()
    }


def interleaved(committed: list[Row], aborted: list[Row]) -> set[Row]:
    return set(committed) | set(aborted)


def rlmm_cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlmm.cli", *args, "--config", str(config)],
        capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
    )  # fmt: skip


async def check_consumers_read_everything(
    broker: ApacheKafkaBroker,
    topic: str,
    committed: dict[int, list[Row]],
    aborted: dict[int, list[Row]],
) -> None:
    committed_read = await read_all(broker.bootstrap, topic, "read_committed")
    assert committed_read == committed, "read_committed through the broker differs"
    uncommitted = await read_all(broker.bootstrap, topic, "read_uncommitted")
    for p in committed:
        # every record once, in produce order within each producer; the aborted ones too
        assert len(uncommitted[p]) == len(committed[p]) + len(aborted[p])
        assert set(uncommitted[p]) == interleaved(committed[p], aborted[p])
        assert [r for r in uncommitted[p] if r not in set(aborted[p])] == committed[p]


@pytest.fixture
def s3_plugin_broker(tmp_path: Path, s3_endpoint: str) -> Iterator[tuple[ApacheKafkaBroker, str]]:
    """A plugin broker whose rlmm store is S3 (moto's server on loopback; rlmm serve
    inherits the broker's environment, the credentials included), and its bucket."""
    import boto3

    bucket = f"plugin-{uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    root = tmp_path / "broker"
    root.mkdir(parents=True)
    config = root / "rlmm.toml"
    config.write_text(
        f'data_dir = "{root / "rlmm-data"}"\n[remote]\ntype = "s3"\nbucket = "{bucket}"\n'
        f'prefix = "tier"\nendpoint_url = "{s3_endpoint}"\nregion = "us-east-1"\n'
    )
    broker = new_broker(root, overrides=plugin_overrides(plugin_jar(), config))
    start_or_fail(broker)
    try:
        yield broker, bucket
    finally:
        stop_plugin_broker(broker)


@pytest.mark.spark
@pytest.mark.s3
async def test_consumers_read_rlmms_tier_through_the_broker(
    s3_plugin_broker: tuple[ApacheKafkaBroker, str], s3_endpoint: str, tmp_path: Path
) -> None:
    import boto3

    broker, bucket = s3_plugin_broker
    wait_for_serve(broker, count=2)  # both classes said hello
    topic = f"plugin-{uuid4().hex[:8]}"
    await create_topic(broker.bootstrap, topic)
    committed, aborted, rolls = await produce(broker.bootstrap, topic)
    await wait_tiered_and_deleted(broker, topic, rolls)
    keys = [
        o["Key"]
        for page in boto3.client("s3", endpoint_url=s3_endpoint)
        .get_paginator("list_objects_v2")
        .paginate(Bucket=bucket, Prefix=f"tier/{topic}-")
        for o in page.get("Contents", [])
    ]
    assert any(k.endswith(".log") for k in keys), f"nothing in rlmm's bucket: {keys}"
    assert local_bases(broker, topic, 0)[0] > 0  # offset 0 lives only in the tier now
    # The serve's lines reach Kafka's log at their own level, with the broker's time only.
    log_lines = broker._log_text().splitlines()
    assert any(re.search(r"\] INFO rlmm serve: rlmm\.plugin\.server: rlmm serve \S+ \(pid", line)
               for line in log_lines), broker.log_tail(40)  # fmt: skip
    assert not [line for line in log_lines if re.search(r"rlmm serve: \S*\d{4}-\d\d-\d\d", line)]

    await check_consumers_read_everything(broker, topic, committed, aborted)

    reader = reader_config(broker, broker.root / "rlmm.toml")
    listed = rlmm_cli(reader, "segments", "list", "--json", "--topic", topic)
    assert listed.returncode == 0, listed.stderr
    segments = json.loads(listed.stdout)["segments"]
    assert {s["partition"] for s in segments} == set(range(PARTITIONS))
    assert min(s["start_offset"] for s in segments) == 0
    deep = rlmm_cli(reader, "verify", "--json", "--deep", "--topic", topic, "--safety-window", "0s")
    assert deep.returncode == 0, deep.stdout + deep.stderr
    assert json.loads(deep.stdout)["segments_checked"] >= len(CODECS) * PARTITIONS

    # Spark's kafka-archive over the same archive equals Spark's Kafka source reading
    # through the broker (the tier, served by Kafka), row for row, both isolation levels.
    jars = await kafka_source_jars()
    tiered_end = {p: local_bases(broker, topic, p)[0] for p in range(PARTITIONS)}
    result = await asyncio.to_thread(
        read_with_spark,
        {
            "bootstrap": broker.bootstrap,
            "topic": topic,
            "ending": tiered_end,
            "isolation": ["read_uncommitted", "read_committed"],
            "jars": [str(j) for j in jars],
            "rlmm_config": str(reader),
            "output": str(tmp_path / "rows.json"),
        },
        tmp_path,
    )
    for isolation in ("read_uncommitted", "read_committed"):
        live, archived = result[f"kafka/{isolation}"], result[f"kafka-archive/{isolation}"]
        assert archived == live and len(live) > 0, f"{isolation}: kafka-archive differs"


BULK_RECORDS = 24_000  # about 24 MiB of 1 KB values: a dozen segments per partition


async def produce_bulk(bootstrap: str, topic: str, tag: str) -> dict[int, list[Row]]:
    """Many records quickly (lz4): what a copy and a catching-up consumer take seconds on."""
    rows: dict[int, list[Row]] = {p: [] for p in range(PARTITIONS)}
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", compression_type="lz4", linger_ms=50,
        max_batch_size=256 * 1024,
    )  # fmt: skip
    await producer.start()
    try:
        pending = []
        for i in range(BULK_RECORDS):
            p = i % PARTITIONS
            row: Row = (
                f"{tag}-{i % 97}".encode(),
                f"{tag}-{i}-".encode() + os.urandom(490).hex().encode(),
                (),
            )
            rows[p].append(row)
            pending.append(await producer.send(topic, row[1], key=row[0], partition=p))
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return rows


async def roll_all(
    bootstrap: str, topic: str, tag: str, rows: dict[int, list[Row]]
) -> dict[int, int]:
    """After segment.ms, one record per partition: it rolls what came before."""
    await asyncio.sleep(SEGMENT_MS / 1000 + 0.5)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        rolls = {}
        for p in range(PARTITIONS):
            row: Row = (None, f"roll-{tag}".encode(), ())
            rows[p].append(row)
            rolls[p] = (await producer.send_and_wait(topic, row[1], partition=p)).offset
        return rolls
    finally:
        await producer.stop()


async def copy_failed(broker: ApacheKafkaBroker, since: int, wait_s: float = 15.0) -> bool:
    """Whether Kafka logged a failed copy after ``since`` within ``wait_s`` (its copy
    call fails as soon as rlmm serve's socket closes)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if "Error occurred while copying log segments of partition" in broker._log_text(
            since=since
        ):
            return True
        await asyncio.sleep(0.1)
    return False


def tiered_logs(broker: ApacheKafkaBroker, topic: str) -> list[Path]:
    """The log objects of ``topic`` in the plugin broker's local store."""
    # rlmm's layout: <topic>-<topic id>/<partition>/<start offset>-<segment id>.log
    return sorted((broker.root / "tier").glob(f"{topic}-*/*/*.log"))


async def test_rlmm_serve_sigkilled_mid_copy_and_mid_fetch_loses_nothing(
    plugin_broker: ApacheKafkaBroker, tmp_path: Path
) -> None:
    broker = plugin_broker
    first = wait_for_serve(broker, count=2)
    topic = f"plugin-kill-{uuid4().hex[:8]}"
    await create_topic(broker.bootstrap, topic, segment_bytes=str(1 << 20))
    mark = broker._log_size()
    producing = asyncio.create_task(produce_bulk(broker.bootstrap, topic, "a"))

    # Mid-copy: Kafka logs "Copying <segment>" before it adds COPY_SEGMENT_STARTED,
    # copies and updates to COPY_SEGMENT_FINISHED (a hundred ms or so); kill at that
    # line. A loaded machine can read the line after the copy ended: then the kill
    # missed, and the next copy's serve is killed, three kills at most.
    copying = f":{topic}-"  # partition=<topic id>:<topic>-<partition>
    serve, kills, since = first, 0, mark
    while True:
        deadline = time.monotonic() + 120
        while not any(
            copying in line and "Copying " in line
            for line in broker._log_text(since=since).splitlines()
        ):
            assert time.monotonic() < deadline, f"no copy began in 120 s:\n{broker.log_tail(40)}"
            await asyncio.sleep(0.005)
        os.kill(serve, signal.SIGKILL)
        kills += 1
        if await copy_failed(broker, since):
            break
        assert kills < 3, "three kills, none of them during a copy"
        serve, since = wait_for_serve(broker, count=2 * (kills + 1)), broker._log_size()
    copied_before = len(tiered_logs(broker, topic))
    rows = await producing
    # The broker keeps serving its local data while rlmm serve is down.
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    await producer.start()
    try:
        local = await producer.send_and_wait(topic, b"while-down", partition=0)
        rows[0].append((None, b"while-down", ()))
    finally:
        await producer.stop()
    assert broker.running and local.offset == len(rows[0]) - 1

    # the bridge started a new one; both classes reattached
    second = wait_for_serve(broker, count=2 * (kills + 1))
    assert second != serve and alive(second)
    rolls = await roll_all(broker.bootstrap, topic, "a", rows)
    await wait_tiered_and_deleted(broker, topic, rolls)
    assert len(tiered_logs(broker, topic)) > copied_before  # copies resumed

    # Mid-fetch: a consumer catching up from offset 0 (all remote) while serve dies again.
    reading = asyncio.create_task(read_all(broker.bootstrap, topic, "read_committed"))
    await asyncio.sleep(1.0)
    os.kill(second, signal.SIGKILL)
    got = await asyncio.wait_for(reading, 240)
    assert got == rows, "a consumer from offset 0 lost or repeated records across the kill"
    third = wait_for_serve(broker, count=2 * (kills + 2))
    assert third not in (first, serve, second)

    # A copy the kill cut short stays COPY_SEGMENT_STARTED when Kafka's cleanup of it
    # also went to the dead process: the next rlmm serve cleans it, GRACE_S after its
    # manager starts (dangling_copies). Until then verify names it; after, all clean.
    reader = reader_config(broker, broker.root / "rlmm.toml")
    deadline = time.monotonic() + dangling_copies.GRACE_S + 90
    while True:
        deep = rlmm_cli(
            reader, "verify", "--json", "--deep", "--topic", topic, "--safety-window", "0s"
        )
        if deep.returncode == 0:
            break
        kinds = {p["kind"] for p in json.loads(deep.stdout)["problems"]}
        assert kinds == {"stuck_copy_started"}, deep.stdout + deep.stderr
        assert time.monotonic() < deadline, deep.stdout + deep.stderr
        await asyncio.sleep(2)


def _joined(groups: list[dict[int, list[Row]]]) -> dict[int, list[Row]]:
    return {p: [row for g in groups for row in g[p]] for p in groups[0]}


async def test_a_broker_moves_from_kafkas_rlmm_to_rlmms_and_back_keeping_every_segment(
    tmp_path: Path,
) -> None:
    """Only the RLMM class changes, with a restart each time (the RSM is rlmm's
    throughout): the segments Kafka's TopicBasedRemoteLogMetadataManager recorded are
    served by rlmm's, and those rlmm's recorded are served by Kafka's after the way
    back, since both read and write ``__remote_log_metadata`` in Kafka's format."""
    jar = plugin_jar()
    root = tmp_path / "broker"
    overrides = plugin_overrides(jar, plugin_config(root))
    rlmm_class = {
        k: overrides.pop(k)
        for k in (
            "remote.log.metadata.manager.class.name",
            "remote.log.metadata.manager.class.path",
        )
    }
    broker = new_broker(root, overrides=overrides)  # Kafka's own RLMM, rlmm's RSM
    start_or_fail(broker)
    topic = f"plugin-move-{uuid4().hex[:8]}"
    committed: list[dict[int, list[Row]]] = []
    aborted: list[dict[int, list[Row]]] = []
    try:
        await create_topic(broker.bootstrap, topic)
        for step, (rlmm_props, who) in enumerate(
            [({}, "Kafka's RLMM"), (rlmm_class, "rlmm's RLMM"), ({}, "Kafka's RLMM again")]
        ):
            if step:
                broker.stop()
                for key in rlmm_class:
                    broker.overrides.pop(key, None)
                broker.overrides.update(rlmm_props)
                start_or_fail(broker)
            rows, dropped, rolls = await produce(
                broker.bootstrap, topic, start=step * 1000, group=step
            )
            committed.append(rows)
            aborted.append(dropped)
            await wait_tiered_and_deleted(broker, topic, rolls)
            try:
                await check_consumers_read_everything(
                    broker, topic, _joined(committed), _joined(aborted)
                )
            except AssertionError as e:
                raise AssertionError(f"under {who} (step {step}): {e}") from e
        # The store holds every step's copies: rlmm's layout whichever RLMM recorded them.
        assert len({p.parent for p in tiered_logs(broker, topic)}) == PARTITIONS
    finally:
        stop_plugin_broker(broker)


async def test_a_stalled_rlmm_serve_never_stalls_the_broker(tmp_path: Path) -> None:
    """rlmm serve SIGSTOPped (alive, silent) for longer than the calls' deadline: the
    broker keeps taking and serving records; Kafka's tiering calls fail at their
    deadline (5 s here) instead of hanging; once it runs again, tiering catches up and
    a consumer from offset 0 reads everything."""
    jar = plugin_jar()
    root = tmp_path / "broker"
    overrides = plugin_overrides(
        jar,
        plugin_config(root),
        **{"rsm.config.call.timeout.ms": "5000", "rlmm.config.call.timeout.ms": "5000"},
    )
    broker = new_broker(root, overrides=overrides)
    start_or_fail(broker)
    try:
        serve = wait_for_serve(broker, count=2)
        topic = f"plugin-stall-{uuid4().hex[:8]}"
        await create_topic(broker.bootstrap, topic)
        mark = broker._log_size()
        os.kill(serve, signal.SIGSTOP)
        try:
            # A new topic's leadership reaches the RLMM on the thread that applies the
            # cluster's metadata: it must not wait on a stalled rlmm serve.
            fresh = f"{topic}-new"
            took = time.monotonic()
            await create_topic(broker.bootstrap, fresh)
            producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
            await producer.start()
            try:
                await producer.send_and_wait(fresh, b"first", partition=0)
            finally:
                await producer.stop()
            took = time.monotonic() - took
            assert took < 4.5, f"a new topic took {took:.1f} s to take a record"
            started = time.monotonic()
            committed, aborted, rolls = await produce(broker.bootstrap, topic)
            # every record above was acknowledged while rlmm serve was stalled
            got = await read_all(broker.bootstrap, topic, "read_committed")
            assert got == committed  # local data: nothing of it needed the tier
            stalled_for = time.monotonic() - started
            deadline = time.monotonic() + 60
            while "did not answer" not in broker._log_text(since=mark):
                assert time.monotonic() < deadline, broker.log_tail(40)
                await asyncio.sleep(0.5)
        finally:
            os.kill(serve, signal.SIGCONT)
        assert stalled_for < 60, f"the broker took {stalled_for:.0f} s with rlmm serve stalled"
        await wait_tiered_and_deleted(broker, topic, rolls)
        await check_consumers_read_everything(broker, topic, committed, aborted)
    finally:
        stop_plugin_broker(broker)


async def test_a_jar_of_another_release_is_refused_in_one_line_and_the_broker_runs_on(
    tmp_path: Path,
) -> None:
    """The bridge and rlmm serve compare releases on connect: a mismatch is one ERROR
    line in the broker's log naming both, nothing is tiered, and the broker serves its
    local data as if tiering were off."""
    jar = plugin_jar_of_release("0.0.9", tmp_path)
    root = tmp_path / "broker"
    broker = new_broker(root, overrides=plugin_overrides(jar, plugin_config(root)))
    start_or_fail(broker)
    try:
        # Each class says it once per attempt (every 30 s), and neither holds up the
        # broker's start waiting for a handshake that cannot succeed.
        refused = [
            line.split("] ", 1)[1]
            for line in broker._log_text().splitlines()
            if "refused this bridge" in line
        ]
        assert {line.split("refused this bridge (")[1].split(" ")[0] for line in refused} == {
            "rsm",
            "rlmm",
        }, broker.log_tail(40)
        for line in refused:
            assert line.startswith("ERROR rlmm serve at ")
            assert "jar is release 0.0.9" in line and f"rlmm serve is {release()}" in line
        topic = f"plugin-refused-{uuid4().hex[:8]}"
        await create_topic(broker.bootstrap, topic)
        committed, _aborted, _rolls = await produce(broker.bootstrap, topic)
        assert await read_all(broker.bootstrap, topic, "read_committed") == committed
        await asyncio.sleep(3)  # a few of Kafka's 500 ms task runs
        assert not tiered_logs(broker, topic)
        assert local_bases(broker, topic, 0)[0] == 0  # nothing deleted locally
    finally:
        stop_plugin_broker(broker)


async def test_the_bridge_attaches_to_a_serve_run_as_a_container_sidecar(tmp_path: Path) -> None:
    """``socket`` without ``file``: the broker starts nothing and attaches to an rlmm
    serve someone else runs (a container beside it); Kafka tiers through it, consumers
    read from it, and when the broker stops the serve keeps running (its life is its
    container's) until it is told to stop."""
    root = tmp_path / "broker"
    config = plugin_config(root)
    sock = tmp_path / "sidecar.sock"
    with sidecar_serve(config, sock, tmp_path / "serve.out") as serve:
        overrides = plugin_overrides(plugin_jar(), config)
        for prefix in ("rsm.config.", "rlmm.config."):
            del overrides[prefix + "file"], overrides[prefix + "command"]
            overrides[prefix + "socket"] = str(sock)
        broker = new_broker(root, overrides=overrides)
        start_or_fail(broker)
        try:
            assert wait_for_serve(broker, count=2) == serve.pid
            assert "starting rlmm serve" not in broker._log_text()
            topic = f"plugin-sidecar-{uuid4().hex[:8]}"
            await create_topic(broker.bootstrap, topic)
            committed, aborted, rolls = await produce(broker.bootstrap, topic)
            await wait_tiered_and_deleted(broker, topic, rolls)
            await check_consumers_read_everything(broker, topic, committed, aborted)
        finally:
            broker.stop()
        await asyncio.sleep(1)
        assert serve.poll() is None, "the sidecar serve stopped with the broker"
        serve.terminate()  # what the orchestrator does: no class is open now
        assert serve.wait(timeout=30) == 0


def test_an_interrupted_kafka_thread_fails_its_call_not_the_connection(tmp_path: Path) -> None:
    """Kafka cancels a partition's tasks by interrupting their threads: the call in flight
    on that thread fails (isReady: false), the class's connection to rlmm serve stays (a
    broken one made every partition not ready until the bridge reconnected)."""
    from tests.fixtures.apache_kafka import kafka_libs, require_tools

    jar = plugin_jar()
    java, _mvn = require_tools()
    config, sock = plugin_config(tmp_path / "serve"), tmp_path / "interrupt.sock"
    out = tmp_path / "serve.out"
    with sidecar_serve(config, sock, out):
        harness = Path(__file__).with_name("java") / "InterruptedCaller.java"
        done = subprocess.run(
            [java, "-cp", f"{jar}:{kafka_libs()}/*", str(harness), str(sock), "1500"],
            capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        calls = int(done.stdout.split("calls ")[1].split()[0])
        assert calls > 100, done.stdout
        connected = out.read_text().count("bridge rlmm connected")
        assert connected == 1, f"the class connected {connected} times:\n{out.read_text()}"


async def test_a_kafka_style_remote_read_moves_about_what_kafka_takes(tmp_path: Path) -> None:
    """Kafka's remote read opens the stream at the offset index's position, skips to the
    fetch offset's batch (up to index.interval.bytes) and takes its consumer's fetch size
    (1 MiB by default; 1.25 MiB as Kafka's ConsumerPerformance fetches). Over rlmm's
    local store the bridge reads the range from the store's file itself: one call per
    read, no bytes through the socket, the bytes read reported to rlmm serve's metrics.
    Through the socket (fetch.file.reads=false; any other store) each read is one chunk
    call of about that many bytes, once it has seen one read of that size. Its first
    chunk was exactly 1 MiB, so every read took a second 1 MiB chunk for the bytes past
    it: two calls and about twice the bytes."""
    import zlib

    from rlmm.plugin.server import PluginServer
    from tests.fixtures.apache_kafka import kafka_libs, require_tools
    from tests.rlmm.plugin.bridge_client import BridgeClient, wire
    from tests.rlmm.plugin.test_server import BROKER_PROPS, started, tier, write_config

    jar = plugin_jar()
    java, _mvn = require_tools()
    server = PluginServer(write_config(tmp_path), tmp_path / "serve.sock")
    task = await started(server)
    try:
        client = await BridgeClient.connect(server.socket_path)
        try:
            await client.hello("rlmm")
            await client.call("configure", role="rsm", props=dict(BROKER_PROPS))
            await client.call("configure", role="rlmm", props=dict(BROKER_PROPS))
            md, contents = await tier(client, tmp_path, log_size=3_500_000)
        finally:
            await client.close()
        (tmp_path / "metadata").write_bytes(wire(md))
        log, registry = contents["log_segment"], server.metrics.registry
        topic = {"topic": md.topic_id_partition.topic}

        async def kafka_reads(
            reads: list[tuple[int, int, int]], file_reads: bool = False, hide: Path | None = None
        ) -> tuple[float, float, float]:
            """The reads in one JVM (one RSM instance): reads rlmm serve counted (chunk
            calls, or reads the bridge made from the file), their bytes, and how often the
            bridge asked rlmm serve;
            with ``hide``, the JVM runs in a mount namespace of its own with an empty
            directory over ``hide`` (as a broker in another container sees rlmm's files)."""
            asked = {"method": "rsm.fetch_log_segment"}
            calls0 = registry.get_sample_value("rlmm_remote_fetch_requests_total", topic) or 0
            bytes0 = registry.get_sample_value("rlmm_remote_fetch_bytes_total", topic) or 0
            asked0 = registry.get_sample_value("rlmm_serve_calls_total", asked) or 0
            harness = Path(__file__).with_name("java") / "KafkaStyleReads.java"
            hiding = [] if hide is None else [
                "unshare", "-m", "sh", "-c", 'mount -t tmpfs none "$0" && exec "$@"', str(hide)
            ]  # fmt: skip
            proc = await asyncio.create_subprocess_exec(
                *hiding, java, "-cp", f"{jar}:{kafka_libs()}/*", str(harness),
                str(server.socket_path), str(file_reads).lower(), str(tmp_path / "metadata"),
                *(f"{s}:{k}:{n}" for s, k, n in reads),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                stdin=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            out, err = await asyncio.wait_for(proc.communicate(), 180)
            assert proc.returncode == 0, (out + err).decode()
            for line, (start, skip, length) in zip(out.decode().splitlines(), reads, strict=True):
                want = log[start + skip : start + skip + length]
                expected = [str(start), str(skip), str(len(want)), str(zlib.crc32(want))]
                assert line.split() == expected
            calls = registry.get_sample_value("rlmm_remote_fetch_requests_total", topic)
            moved = registry.get_sample_value("rlmm_remote_fetch_bytes_total", topic)
            asks = registry.get_sample_value("rlmm_serve_calls_total", asked)
            return calls - calls0, moved - bytes0, asks - asked0

        async def kafka_ranges(ranges: list[tuple[int, int]], file_reads: bool) -> list[bytes]:
            """What fetchLogSegment(start, end) streams for each (start, end), by its CRC."""
            harness = Path(__file__).with_name("java") / "KafkaStyleReads.java"
            proc = await asyncio.create_subprocess_exec(
                java, "-cp", f"{jar}:{kafka_libs()}/*", str(harness), str(server.socket_path),
                str(file_reads).lower(), str(tmp_path / "metadata"),
                *(f"{start}:0:{1 << 22}:{end}" for start, end in ranges),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                stdin=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            out, err = await asyncio.wait_for(proc.communicate(), 180)
            assert proc.returncode == 0, (out + err).decode()
            got = []
            for line, (start, end) in zip(out.decode().splitlines(), ranges, strict=True):
                _start, _skip, length, crc = line.split()
                data = log[start : start + int(length)]
                assert str(zlib.crc32(data)) == crc, (start, end)
                got.append(data)
            return got

        # a range with its end (Kafka's fetchLogSegment(start, end), end inclusive) gives
        # that range, through chunks and from the file
        for file_reads in (False, True):
            ranges = [(1000, 1099), (5000, 5000), (3_499_000, 3_499_999)]
            got = await kafka_ranges(ranges, file_reads)
            assert got == [log[1000:1100], log[5000:5001], log[3_499_000:]], file_reads

        mib = 1 << 20
        reads = [(0, 0, mib), (8192, 3000, mib), (1_500_000, 4095, mib), (3_000_000, 100, mib)]
        calls, moved, _ = await kafka_reads(reads)
        assert calls == len(reads), f"{calls} chunk calls for {len(reads)} reads"
        taken = sum(min(skip + length, len(log) - start) for start, skip, length in reads)
        assert moved <= taken + len(reads) * (64 << 10), (moved, taken)

        # ConsumerPerformance's reads take 1,310,163 bytes each: the first read learns it
        # (three calls: 1 MiB and slack, then 64 and 128 KiB), the next take one call
        big = 1_310_163
        reads = [(0, 0, big), (big, 0, big), (2_000_000, 0, big), (100_000, 0, big)]
        calls, moved, _ = await kafka_reads(reads)
        assert calls == 3 + len(reads) - 1, f"{calls} chunk calls for {len(reads)} reads"
        assert moved <= len(reads) * big + 4 * (64 << 10), (moved, len(reads) * big)

        # straight from the local store's file, which rlmm serve names once per segment:
        # each read reported with its bytes (the class's close is answered after the
        # reports sent before it)
        calls, moved, asks = await kafka_reads(reads, file_reads=True)
        assert calls == len(reads), f"{calls} reads counted for {len(reads)} reads"
        assert moved == len(reads) * big
        assert asks == 1

        # a JVM that cannot see the store's files (another container) reads through the
        # socket: the first read asks for the file (not a read), then chunks (learning the
        # read's size: three, as above), the next take one chunk each
        can_hide = subprocess.run(
            ["unshare", "-m", "sh", "-c", f"mount -t tmpfs none {tmp_path / 'data'}"],
            capture_output=True, stdin=subprocess.DEVNULL,
        ).returncode == 0 if shutil.which("unshare") else False  # fmt: skip
        if not can_hide:
            pytest.skip("unshare -m (a mount namespace) is not permitted here: the fallback")
        calls, moved, _ = await kafka_reads(reads, file_reads=True, hide=tmp_path / "data")
        assert calls == 3 + len(reads) - 1, f"{calls} calls for {len(reads)} reads"
    finally:
        server.stop()
        await asyncio.wait_for(task, 30)


async def run_harness(name: str, *args: object) -> dict[str, str]:
    """Run ``tests/integration/java/<name>.java`` against the plugin's jar and Kafka's
    libraries (java's single-file launcher); its ``key value`` lines, once it exited 0."""
    from tests.fixtures.apache_kafka import kafka_libs, require_tools

    jar = plugin_jar()
    java, _mvn = require_tools()
    harness = Path(__file__).with_name("java") / f"{name}.java"
    proc = await asyncio.create_subprocess_exec(
        java, "-cp", f"{jar}:{kafka_libs()}/*", str(harness), *map(str, args),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode == 0, (out + err).decode()
    return dict(line.split(" ", 1) for line in out.decode().splitlines())


async def test_a_kept_listing_is_asked_again_only_once_its_metadata_moved(
    tmp_path: Path,
) -> None:
    """An idle broker lists every partition's segments each task interval: the RLMM
    class keeps a listing while its metadata partition's offset holds. Its own write is
    seen by the very next listing, another broker's as soon as rlmm serve pushes the
    offset, and a stopped partition is asked again (and refused)."""
    from rlmm.plugin.server import PluginServer
    from tests.rlmm.plugin.test_server import started, write_config

    server = PluginServer(write_config(tmp_path), tmp_path / "serve.sock")
    task = await started(server)
    try:
        said = await run_harness("ListingCaller", server.socket_path, "1000")
        assert "unexpected" not in said, said
        assert said["empty"] == "1000 0"
        assert said["own"] == "[COPY_SEGMENT_STARTED]"
        assert said["kept"] == "1000 0"
        ms, states = said["other"].split(" ", 1)
        assert states == "[COPY_SEGMENT_FINISHED]"
        assert said["stopped"].endswith("Exception"), said["stopped"]
        listed = server.metrics.registry.get_sample_value(
            "rlmm_serve_calls_total", {"method": "rlmm.list_remote_log_segments"}
        )
        # the first listing, the one after A's write, the one after B's was pushed, the
        # stopped partition's: 2,000 more listings answered by the class alone
        assert listed == 4, f"rlmm serve was asked {listed} listings; said: {said}"
        assert int(ms) < 10_000
    finally:
        server.stop()
        await asyncio.wait_for(task, 30)


async def test_list_cache_segments_0_keeps_no_listing(tmp_path: Path) -> None:
    """With ``list.cache.segments = 0`` every listing is asked of rlmm serve, and each
    still tells the truth (ListingCaller's checks, as with the cache on)."""
    from rlmm.plugin.server import PluginServer
    from tests.rlmm.plugin.test_server import started, write_config

    server = PluginServer(write_config(tmp_path), tmp_path / "serve.sock")
    task = await started(server)
    try:
        said = await run_harness("ListingCaller", server.socket_path, "50", "0")
        assert "unexpected" not in said, said
        assert said["empty"] == "50 0" and said["kept"] == "50 0"
        assert said["own"] == "[COPY_SEGMENT_STARTED]"
        assert said["other"].endswith("[COPY_SEGMENT_FINISHED]")
        listed = server.metrics.registry.get_sample_value(
            "rlmm_serve_calls_total", {"method": "rlmm.list_remote_log_segments"}
        )
        # 50 + 1 + 50 + at least 1 until B's write is seen + the stopped partition's
        assert listed is not None and listed >= 103, f"{listed} listings; said: {said}"
    finally:
        server.stop()
        await asyncio.wait_for(task, 30)


async def test_list_cache_segments_refuses_what_is_not_a_count() -> None:
    said = await run_harness("BridgeConfigCaller", "-1", "many", "0", "100000")
    for i in ("0", "1"):
        assert said[i].startswith("refused "), said
        assert "list.cache.segments" in said[i] and "0 or more" in said[i], said[i]
    assert said["2"] == said["3"] == "accepted", said


async def test_a_ready_partition_is_not_asked_again_until_its_leadership_changes(
    tmp_path: Path,
) -> None:
    """An idle broker asks isReady of every partition twice per task interval: the RLMM
    class remembers a partition's ``true`` for its connection and asks rlmm serve again
    only after the partition's leadership changes or stops (a stopped partition is not
    ready, however often it was before)."""
    from rlmm.plugin.server import PluginServer
    from tests.rlmm.plugin.test_server import started, write_config

    server = PluginServer(write_config(tmp_path), tmp_path / "serve.sock")
    task = await started(server)
    try:
        said = await run_harness("ReadinessCaller", server.socket_path, "1000")
        assert said["asked"] == "1000 true 1000"
        assert said["stopped"] == "false"
        asked = server.metrics.registry.get_sample_value(
            "rlmm_serve_calls_total", {"method": "rlmm.is_ready"}
        )
        until_ready = int(said["first"]) + int(said["again"])
        assert asked == until_ready + 1, f"rlmm serve was asked {asked} times, said: {said}"
    finally:
        server.stop()
        await asyncio.wait_for(task, 30)
