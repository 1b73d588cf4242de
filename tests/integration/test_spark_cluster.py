"""kafka-archive on a Spark standalone cluster whose executors share nothing with the driver.

A master and two workers (tests.fixtures.spark_cluster), each its own JVM and working
directory; the driver runs in client mode in a subprocess. The archives sit in a moto
S3 server behind the fault proxy (tests.fixtures.s3_faults): rlmm's own layout, which
our sidecar offloaded from the log dir of the session's Apache Kafka 4.1.1 broker (a
topic of two partitions: a segment per producer codec, keys (some null), headers, a
committed and an aborted transaction), and the committed Aiven plugin data
(tests/data/aiven-tiered, zstd variant). The executors get no rlmm config file and no
credentials of their hosts: the remote-store settings come through Spark conf
(``spark.rlmm.*``) and options, the AWS credentials through ``spark.executorEnv.AWS_*``,
never through options.

Invariants checked: for both layouts and under both isolation levels, the rows equal,
partition by partition and in offset order, what a Kafka consumer at that isolation
level was served (for our layout, a consumer of the broker before the offload; for
Aiven's, records.json); 5xx answers and dropped connections during the read, or a
worker SIGKILLed mid-read, cost retries, never a row; an executor without credentials
(here: the AWS profile a read names, which only the driver's host has) fails its tasks
with one line naming the setting and the host. And docs/spark.md's recipe: rlmm's wheel,
built here with its build backend and shipped by the installed pyspark's own
``spark-submit --py-files`` under a ``.zip`` name, runs a kafka-archive job on
executors whose Python has rlmm's dependencies but not rlmm (a task proves it).
"""

from __future__ import annotations

import asyncio
import base64
import importlib.metadata
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import tomllib
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pytest
from aiokafka import ConsumerRecord

from tests.fixtures.apache_kafka import ApacheKafkaBroker, start_or_fail
from tests.fixtures.s3_faults import FaultyS3, faulty_s3
from tests.fixtures.spark_cluster import ClusterDriver, SparkCluster, spark_submit, tail
from tests.integration import test_aiven_plugin_data as aiven
from tests.integration import test_restore_apache_kafka as restore
from tests.integration.spark_cluster_driver import APP_CONF
from tests.integration.test_spark_kafka_vs_archive import (
    EVENTLOG_PARTITIONS,
    create_topic,
    offload_topic,
)
from tests.rlmm.archive.archive_data import rows

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.kafka, pytest.mark.apache_kafka,
              pytest.mark.slow, pytest.mark.timeout(300)]  # fmt: skip

ROOT = Path(__file__).resolve().parents[2]
JOB = Path(__file__).resolve().parent / "spark_submit_job.py"
TOPIC = "orders"  # the Aiven data's topic, and the start of ours
BUCKET = "cluster-archive"
ISOLATION = ("read_uncommitted", "read_committed")
# Our topic rolls a segment whenever a batch's timestamps are 40 ms past the segment's
# first: each producer codec's block (PER_CODEC records, stamped 1 ms apart) starts one,
# and so does the first transaction marker (stamped by the broker's clock). Every batch
# but a segment's first is in its offset index, so reads can start inside segments.
TOPIC_CONFIGS = {"segment.ms": "40", "index.interval.bytes": "1"}
PER_CODEC = 60
# What the executors' hosts lack and a job gives them (moto accepts any key).
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip


class Archives:
    """Both archives in moto, what a consumer was served, and how to read them."""

    def __init__(self, tmp: Path, s3: FaultyS3, broker: ApacheKafkaBroker) -> None:
        self.s3 = s3
        client = boto3.client(
            "s3", endpoint_url=s3.moto_url, region_name="us-east-1",
            aws_access_key_id="testing", aws_secret_access_key="testing",
        )  # fmt: skip
        client.create_bucket(Bucket=BUCKET)
        # rlmm's layout: a topic of the session's broker (other tests share it, hence
        # the name), offloaded by our sidecar straight to moto.
        self.topic = f"{TOPIC}-{uuid.uuid4().hex[:8]}"
        remote = {"type": "s3", "bucket": BUCKET, "endpoint_url": s3.moto_url,
                  "region": "us-east-1", "aws_access_key_id": "testing",
                  "aws_secret_access_key": "testing"}  # the sidecar's own  # fmt: skip
        self.captured = asyncio.run(self._offloaded(tmp, broker, remote))
        # The driver's settings of it, as Spark conf: the executors read them from the
        # plan (the S3 endpoint is the fault proxy, through which every read goes).
        self.conf = {
            "spark.rlmm.data_dir": str(tmp / "rlmm"),
            "spark.rlmm.eventlog.partitions": str(EVENTLOG_PARTITIONS),
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

    async def _offloaded(
        self, tmp: Path, broker: ApacheKafkaBroker, remote: dict[str, str]
    ) -> dict[str, dict[tuple[str, int], list[tuple[Any, ...]]]]:
        """Produce to the broker, capture the topic with a consumer at each isolation
        level, offload it; the captures, as archive_data.rows of each partition."""
        topic = self.topic
        await create_topic(broker.bootstrap, topic, restore.PARTITIONS, TOPIC_CONFIGS)
        ends = await restore.produce(broker.bootstrap, topic, PER_CODEC)
        captured = {
            isolation: {
                (topic, p): [consumer_row(r) for r in records]
                for p, records in (
                    await restore.consume_records(broker.bootstrap, topic, ends, isolation)
                ).items()
            }
            for isolation in ISOLATION
        }
        # What the data claims to hold: the aborted transaction's 10 records are served
        # read_uncommitted only, and each partition rolled a segment per codec or so.
        for capture in captured.values():
            for got in capture.values():
                assert [r[0] for r in got] == sorted({r[0] for r in got})  # in offset order
        served = {i: sum(map(len, c.values())) for i, c in captured.items()}
        assert served["read_uncommitted"] - served["read_committed"] == 10, served
        logs = {p: len(list((broker.data_dir / f"{topic}-{p}").glob("*.log"))) for p in ends}
        assert min(logs.values()) >= 4, logs
        await offload_topic(broker, topic, ends, tmp, remote)
        return captured


def consumer_row(r: ConsumerRecord[bytes, bytes]) -> tuple[Any, ...]:
    """A consumed record as archive_data.rows shows a row read with headers."""
    headers = tuple((key, value) for key, value in r.headers)
    return (r.offset, r.key, r.value, headers, r.timestamp, r.timestamp_type)


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
def broker(apache_kafka: ApacheKafkaBroker) -> ApacheKafkaBroker:
    """The session's Apache Kafka broker (other tests share it), running."""
    if not apache_kafka.running:
        start_or_fail(apache_kafka)
    return apache_kafka


@pytest.fixture(scope="module")
def archives(
    tmp_path_factory: pytest.TempPathFactory, s3: FaultyS3, broker: ApacheKafkaBroker
) -> Archives:
    return Archives(tmp_path_factory.mktemp("cluster-archives"), s3, broker)


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


def read_arrow(path: Path) -> pa.Table:
    with pa.OSFile(str(path), "rb") as f:
        return pa.ipc.open_file(f).read_all()


def read(driver: ClusterDriver, out: Path, topic: str, **options: str) -> pa.Table:
    answer = driver.request({"op": "read", "options": {"subscribe": topic, **options},
                             "out": str(out)})  # fmt: skip
    assert answer["ok"], answer.get("error")
    print("read", answer)
    return read_arrow(out)


@pytest.fixture(scope="module")
def rlmm_zip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rlmm's wheel, built from this checkout by its build backend (offline: no build
    isolation, no index), copied under a ``.zip`` name: PySpark puts only ``.zip``,
    ``.egg`` and ``.jar`` files of ``--py-files`` on its Python workers' path."""
    try:
        setuptools = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        setuptools = "none"
    if not setuptools.split(".")[0].isdigit() or int(setuptools.split(".")[0]) < 77:
        pytest.skip(f"building rlmm's wheel offline needs setuptools>=77 in this Python"
                    f" (found {setuptools}; the test extra installs it)")  # fmt: skip
    tmp = tmp_path_factory.mktemp("wheel")
    # A copy of what the wheel is built from: setuptools writes build/ and *.egg-info
    # into the tree it builds, and other runs may share this checkout.
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for top in sorted({name.split(".")[0] for name in packages["packages"]}):
        shutil.copytree(ROOT / top, src / top, ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "--quiet", "-w", str(tmp / "dist"), str(src)],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("rlmm-*-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as z:
        assert {"rlmm/spark/source.py", "remote/__init__.py"} <= set(z.namelist())
    shipped = tmp / wheel.name.replace(".whl", ".zip")
    shutil.copy2(wheel, shipped)
    return shipped


# A whole application of its own (driver JVM, executors, Python workers) after the
# module's fixtures: on a loaded 2-core machine, 80 s of setup and 210 s of job were seen.
@pytest.mark.timeout(600)
def test_spark_submit_py_files_runs_a_job_on_executors_without_rlmm(
    spark_cluster: SparkCluster, archives: Archives, rlmm_zip: Path, tmp_path: Path
) -> None:
    # First in the module: the driver fixture's application holds both workers' cores
    # from its first test on, and another application would wait for them.
    assert spark_cluster.active_apps() == [], "an application holds the cluster's cores"
    if sys.prefix == sys.base_prefix:
        pytest.skip("needs a virtualenv: its base interpreter is the Python without rlmm")
    # The executors' Python: the venv's base interpreter with the venv's site-packages
    # on PYTHONPATH, which gives it rlmm's dependencies but not rlmm: the editable
    # install is a .pth file, and Python reads .pth files only in its site directories.
    python = os.path.realpath(sys.executable)
    site = sysconfig.get_paths()["purelib"]
    bare = subprocess.run([python, "-c", "import pyarrow; import rlmm"],
                          env={**os.environ, "PYTHONPATH": site}, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    if bare.returncode == 0:
        pytest.skip(f"rlmm is installed in {site} itself (not editable): no Python without it")
    request = {
        "reads": {
            isolation: {"subscribe": archives.topic, "includeHeaders": "true",
                        "isolationLevel": isolation, "minPartitions": "4"}
            for isolation in ISOLATION
        },
        "out_dir": str(tmp_path),
        "result": str(tmp_path / "result.json"),
    }  # fmt: skip
    (tmp_path / "request.json").write_text(json.dumps(request))
    conf = {
        **APP_CONF,
        "spark.pyspark.python": python,
        "spark.pyspark.driver.python": python,
        "spark.executorEnv.PYTHONPATH": site,
        **{f"spark.executorEnv.{k}": v for k, v in CREDENTIALS.items()},
        **archives.conf,
    }
    code, log = spark_submit(
        spark_cluster, JOB, [str(tmp_path / "request.json")], conf=conf,
        env={"PYTHONPATH": site, **CREDENTIALS}, py_files=[rlmm_zip], workdir=tmp_path,
        timeout_s=450,
    )  # fmt: skip
    assert code == 0, tail(log, 60)
    result = json.loads((tmp_path / "result.json").read_text())
    print("spark-submit", result)
    assert rlmm_zip.name in result["driver_rlmm"], result["driver_rlmm"]
    assert len(result["probes"]) == 2
    for probe in result["probes"]:
        assert probe["executable"] == python, probe
        assert Path(probe["cwd"]).is_relative_to(spark_cluster.base), probe  # an executor's
        assert rlmm_zip.name in probe["rlmm"], probe  # from the shipped file
        assert probe["bare_returncode"] != 0, probe
        assert probe["bare_error"] == "ModuleNotFoundError: No module named 'rlmm'", probe
    for isolation in ISOLATION:
        table = read_arrow(tmp_path / f"{isolation}.arrow")
        assert by_partition(table) == archives.captured[isolation], isolation


def test_an_executor_without_the_credentials_fails_naming_the_setting_and_the_host(
    driver: ClusterDriver, archives: Archives, tmp_path: Path
) -> None:
    # The read asks for a profile: the driver's host has it (planning works), the
    # executors' hosts do not, and a named profile makes boto3 ignore their
    # environment's keys: the executors have no credentials for this read.
    options = {"subscribe": archives.topic, "rlmm.remote.profile": PROFILE}
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
def test_our_layout_over_s3_equals_what_a_kafka_consumer_was_served(
    driver: ClusterDriver, archives: Archives, spark_cluster: SparkCluster, tmp_path: Path,
    isolation: str,
) -> None:  # fmt: skip
    table = read(driver, tmp_path / "rows.arrow", archives.topic, isolationLevel=isolation,
                 minPartitions="4", includeHeaders="true")  # fmt: skip
    assert by_partition(table) == archives.captured[isolation]
    # Both workers ran executors, each in its own working directory (not the driver's).
    for worker in range(2):
        dirs = spark_cluster.executor_dirs(worker, app=driver.ready["app"])
        assert dirs, f"worker {worker} ran no executor"
        assert all(Path(driver.ready["cwd"]) not in (d, *d.parents) for d in dirs)


@pytest.mark.parametrize("isolation", ISOLATION)
def test_aiven_data_over_s3_equals_what_the_broker_served(
    driver: ClusterDriver, archives: Archives, tmp_path: Path, isolation: str
) -> None:
    table = read(driver, tmp_path / "rows.arrow", TOPIC, includeHeaders="true",
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
        # Small groups: more requests, and slices that start between a segment's batches.
        table = read(driver, tmp_path / "rows.arrow", archives.topic, includeHeaders="true",
                     isolationLevel="read_committed", maxRecordsPerPartition="5")  # fmt: skip
    finally:
        after = s3.faults(rate=0)
    assert by_partition(table) == archives.captured["read_committed"]
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
                     "options": {"subscribe": archives.topic, "includeHeaders": "true",
                                 "isolationLevel": "read_uncommitted",
                                 "minPartitions": "8"}})  # fmt: skip
        assert driver.answer(180) == {"running": True}
        started = time.monotonic()
        spark_cluster.kill_worker(1)
        answer = driver.answer(180)
    finally:
        s3.faults(rate=0)
    assert answer["ok"], answer.get("error")
    assert answer["failed_tasks"] >= 1, answer  # the kill did land on a running task
    assert by_partition(read_arrow(out)) == archives.captured["read_uncommitted"]
    assert time.monotonic() - started < 120
