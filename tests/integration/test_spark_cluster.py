"""kafka-archive on a Spark standalone cluster whose executors share nothing with the driver.

A master and two workers (tests.fixtures.spark_cluster), each its own JVM and working
directory; the driver runs in client mode in a subprocess. The archives sit in a moto
S3 server behind the fault proxy (tests.fixtures.s3_faults): rlmm's own layout, written
by the offloader's S3 store (transactions, aborted ones included), and the committed
Aiven plugin data (tests/data/aiven-tiered, zstd variant). The executors get no rlmm
config file and no credentials of their hosts: the remote-store settings come through
Spark conf (``spark.rlmm.*``) and options, the AWS credentials through
``spark.executorEnv.AWS_*``, never through options.

Invariants checked: the rows equal the records known to be in the archive under both
isolation levels, for both layouts; 5xx answers and dropped connections during the
read, or a worker SIGKILLed mid-read, cost retries, never a row; an executor without
credentials (here: the AWS profile a read names, which only the driver's host has) fails
its tasks with one line naming the setting and the host.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pytest

from remote import available_codecs
from tests.fixtures.s3_faults import FaultyS3, faulty_s3
from tests.fixtures.spark_cluster import ClusterDriver, SparkCluster
from tests.integration import test_aiven_plugin_data as aiven
from tests.rlmm.archive import archive_data as data
from tests.rlmm.archive.archive_data import Expected, expected_rows, rows

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.slow, pytest.mark.timeout(300)]

TOPIC = "orders"
BUCKET = "cluster-archive"
ISOLATION = ("read_uncommitted", "read_committed")
# What the executors' hosts lack and a job gives them (moto accepts any key).
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip


class Archives:
    """Both archives in moto, and how to read them."""

    def __init__(self, tmp: Path, s3: FaultyS3) -> None:
        self.s3 = s3
        client = boto3.client(
            "s3", endpoint_url=s3.moto_url, region_name="us-east-1",
            aws_access_key_id="testing", aws_secret_access_key="testing",
        )  # fmt: skip
        client.create_bucket(Bucket=BUCKET)
        # rlmm's layout: four partitions, one codec each, written straight to moto.
        remote = {"remote.type": "s3", "remote.bucket": BUCKET, "remote.endpoint_url": s3.moto_url,
                  "remote.region": "us-east-1", "remote.aws_access_key_id": "testing",
                  "remote.aws_secret_access_key": "testing"}  # the writer's own  # fmt: skip
        config = data.make_config(tmp / "rlmm", **remote)
        topic_id = uuid.uuid4()
        self.ours: dict[int, list[Expected]] = {}
        pdirs = []
        for partition, codec in enumerate(available_codecs()[:4]):
            pdir, written = data.write_history(
                tmp / "logs", TOPIC, partition, codec, topic_id=topic_id
            )
            pdirs.append(pdir)
            self.ours[partition] = data.archived(pdir, written)
        asyncio.run(data.offload(config, pdirs))
        # The driver's settings of it, as Spark conf: the executors read them from the
        # plan (the S3 endpoint is the fault proxy, through which every read goes).
        self.conf = {
            "spark.rlmm.data_dir": str(config.data_dir),
            "spark.rlmm.eventlog.partitions": str(data.PARTITIONS),
            "spark.rlmm.remote.type": "s3",
            "spark.rlmm.remote.bucket": BUCKET,
            "spark.rlmm.remote.endpoint_url": s3.url,
            "spark.rlmm.remote.region": "us-east-1",
        }
        # The Aiven plugin's objects and Kafka's metadata records, as they were written.
        variant = aiven.DATA / "zstd"
        props = aiven.properties(variant)
        self.aiven_bucket = props["storage.s3.bucket.name"]
        client.create_bucket(Bucket=self.aiven_bucket)
        root = variant / "bucket"
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            client.put_object(Bucket=self.aiven_bucket, Key=path.relative_to(root).as_posix(),
                              Body=path.read_bytes())  # fmt: skip
        asyncio.run(aiven.load_metadata(variant, tmp / "aiven" / "metadata-log"))
        self.aiven_records = json.loads((variant / "records.json").read_text())
        # Options over the Spark conf above: another layout, bucket and event log.
        self.aiven_options = {
            "rlmm.data_dir": str(tmp / "aiven"),
            "rlmm.eventlog.dir": str(tmp / "aiven" / "metadata-log"),
            "rlmm.eventlog.partitions": str(aiven.METADATA_PARTITIONS),
            "rlmm.remote.type": "aiven-s3",
            "rlmm.remote.bucket": self.aiven_bucket,
            **{f"rlmm.remote.{k}": v for k, v in props.items()
               if k.startswith(("key.prefix", "chunk.", "compression."))},
        }  # fmt: skip

    def expected(self, isolation: str) -> dict[tuple[str, int], list[tuple[Any, ...]]]:
        committed = isolation == "read_committed"
        return {
            (TOPIC, p): expected_rows([e for e in got if not (committed and e.aborted)], False)
            for p, got in self.ours.items()
        }


def by_partition(table: pa.Table) -> dict[tuple[str, int], list[tuple[Any, ...]]]:
    """(topic, partition) -> archive_data.rows of the table's rows, in offset order."""
    out: dict[tuple[str, int], list[tuple[Any, ...]]] = {}
    keys = zip(table.column("topic").to_pylist(), table.column("partition").to_pylist(),
               strict=True)  # fmt: skip
    for key, row in zip(keys, rows(table.to_batches()), strict=True):
        out.setdefault(key, []).append(row)
    return {k: sorted(v) for k, v in out.items()}


def as_consumer_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """The rows in the shape of the Aiven data's records.json (test_aiven_plugin_data)."""

    def b64(data: bytes | None) -> str | None:
        return None if data is None else base64.b64encode(data).decode()

    out = []
    for r in table.to_pylist():
        headers = [[h["key"], b64(h["value"])] for h in r["headers"] or []]
        millis = int(r["timestamp"].timestamp() * 1000)
        out.append((r["partition"], r["offset"], millis, r["timestampType"], b64(r["key"]),
                    b64(r["value"]), headers))  # fmt: skip
    return sorted(out)


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultyS3]:
    with faulty_s3(tmp_path_factory.mktemp("cluster-s3"), seed=29) as s3:
        yield s3


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory, s3: FaultyS3) -> Archives:
    return Archives(tmp_path_factory.mktemp("cluster-archives"), s3)


PROFILE = "archive-reader"


@pytest.fixture(scope="module")
def driver(
    spark_cluster: SparkCluster, archives: Archives, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ClusterDriver]:
    """The driver: its executors get credentials from ``spark.executorEnv``; its own
    environment has credentials too (it plans: it reads indexes), and an AWS profile
    that only the driver's host has."""
    tmp = tmp_path_factory.mktemp("driver")
    shared = tmp / "aws-credentials"
    shared.write_text(
        f"[{PROFILE}]\naws_access_key_id = testing\naws_secret_access_key = testing\n"
    )
    env = {
        **CREDENTIALS,
        "AWS_SHARED_CREDENTIALS_FILE": str(shared),
        "AWS_CONFIG_FILE": str(tmp / "no-aws-config"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    conf = {**archives.conf, **{f"spark.executorEnv.{k}": v for k, v in CREDENTIALS.items()}}
    with ClusterDriver(spark_cluster, tmp, conf, env) as d:
        yield d


def read(driver: ClusterDriver, out: Path, **options: str) -> pa.Table:
    answer = driver.request({"op": "read", "options": {"subscribe": TOPIC, **options},
                             "out": str(out)})  # fmt: skip
    assert answer["ok"], answer.get("error")
    print("read", answer)
    with pa.OSFile(str(out), "rb") as f:
        return pa.ipc.open_file(f).read_all()


def test_an_executor_without_the_credentials_fails_naming_the_setting_and_the_host(
    driver: ClusterDriver, tmp_path: Path
) -> None:
    # The read asks for a profile: the driver's host has it (planning works), the
    # executors' hosts do not, and a named profile makes boto3 ignore their
    # environment's keys: the executors have no credentials for this read.
    options = {"subscribe": TOPIC, "rlmm.remote.profile": PROFILE}
    answer = driver.request({"op": "read", "out": str(tmp_path / "none.arrow"), "options": options})
    print("ready", driver.ready, "read", {k: v for k, v in answer.items() if k != "error"})
    assert not answer["ok"]
    lines = [line for line in answer["error"].splitlines() if "kafka-archive on executor" in line]
    assert lines, answer["error"][-3000:]
    line = lines[-1]
    start = (
        f"kafka-archive on executor host {socket.gethostname()}: remote.profile '{PROFILE}'"
        f" for remote.bucket {BUCKET} is not configured on this host"
    )
    assert start in line, line
    assert "give executors credentials through their environment" in line, line


@pytest.mark.parametrize("isolation", ISOLATION)
def test_our_layout_over_s3_equals_the_archived_records(
    driver: ClusterDriver, archives: Archives, spark_cluster: SparkCluster, tmp_path: Path,
    isolation: str,
) -> None:  # fmt: skip
    table = read(driver, tmp_path / "rows.arrow", isolationLevel=isolation, minPartitions="4")
    assert by_partition(table) == archives.expected(isolation)
    # Both workers ran executors, each in its own working directory (not the driver's).
    for worker in range(2):
        dirs = spark_cluster.executor_dirs(worker)
        assert dirs, f"worker {worker} ran no executor"
        assert all(Path(driver.ready["cwd"]) not in (d, *d.parents) for d in dirs)


@pytest.mark.parametrize("isolation", ISOLATION)
def test_aiven_data_over_s3_equals_what_the_broker_served(
    driver: ClusterDriver, archives: Archives, tmp_path: Path, isolation: str
) -> None:
    table = read(driver, tmp_path / "rows.arrow", includeHeaders="true",
                 **{"kafka.isolation.level": isolation, "maxRecordsPerPartition": "97"},
                 **archives.aiven_options)  # fmt: skip
    assert as_consumer_rows(table) == aiven.expected_rows(archives.aiven_records[isolation])


def test_5xx_and_dropped_connections_during_the_read_cost_retries_not_rows(
    driver: ClusterDriver, archives: Archives, s3: FaultyS3, tmp_path: Path
) -> None:
    # No 503 SlowDown: botocore's adaptive mode would then rate-limit the client of each
    # Python worker for the rest of the module, which tests nothing more.
    before = s3.faults(rate=0.25, error=2, throttle=0, drop=1, lost=1, slow=0)
    try:
        table = read(driver, tmp_path / "rows.arrow", isolationLevel="read_committed",
                     maxRecordsPerPartition="50")  # ranged GETs inside segments  # fmt: skip
    finally:
        after = s3.faults(rate=0)
    assert by_partition(table) == archives.expected("read_committed")
    injected = {k: after["counts"][k] - before["counts"][k] for k in after["counts"]}
    assert injected["error"] > 0 and injected["drop"] + injected["lost"] > 0, injected


def test_a_worker_killed_mid_read_costs_a_retried_task_not_a_row(
    driver: ClusterDriver, archives: Archives, s3: FaultyS3, spark_cluster: SparkCluster,
    tmp_path: Path,
) -> None:  # fmt: skip
    # Last in the module: one worker is left. Every S3 request pauses 0.25-1 s, so a
    # task (several ranged GETs) runs for seconds.
    s3.faults(rate=1, slow=1, error=0, throttle=0, drop=0, lost=0, slow_s=1.0)
    try:
        out = tmp_path / "rows.arrow"
        driver.send({"op": "read", "out": str(out), "notify_running": True,
                     "options": {"subscribe": TOPIC, "isolationLevel": "read_uncommitted",
                                 "minPartitions": "8"}})  # fmt: skip
        assert driver.answer(180) == {"running": True}
        started = time.monotonic()
        spark_cluster.kill_worker(1)
        answer = driver.answer(180)
    finally:
        s3.faults(rate=0)
    assert answer["ok"], answer.get("error")
    assert answer["failed_tasks"] >= 1, answer  # the kill did land on a running task
    with pa.OSFile(str(out), "rb") as f:
        table = pa.ipc.open_file(f).read_all()
    assert by_partition(table) == archives.expected("read_uncommitted")
    assert time.monotonic() - started < 120
