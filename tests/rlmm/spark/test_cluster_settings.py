"""Settings that travel to executors, and what an executor says when it lacks one.

Invariants checked, without a cluster (tests/integration/test_spark_cluster.py runs
them on one): ``spark.rlmm.*`` Spark conf entries are settings under the options and
over the config file, and an error in one names the conf key; ``register`` refuses a
secret in the Spark conf; what pyspark pickles for executors (input partitions, and
the data source and reader its read function closes over) holds no secret value given
as an option, while the driver still plans with it; a task whose executor lacks
credentials, cannot reach the endpoint or has no local root fails with one line naming
the host and the setting.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest
from pyspark import cloudpickle

from rlmm.archive import close_remote_storage
from rlmm.spark import register
from rlmm.spark.errors import ExecutorSettingError, KafkaArchiveOptionError
from rlmm.spark.options import parse_options
from rlmm.spark.planning import plan_groups, rlmm_config
from rlmm.spark.source import KafkaArchiveDataSource, SlicePartition, kafka_struct, with_spark_conf
from tests.fixtures.ports import free_port
from tests.rlmm.archive import archive_data as data
from tests.rlmm.archive.archive_data import expected_rows, rows

SECRET = "aws-secret-4711"
JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required password="jaas-7342";'
HOST = socket.gethostname()


def test_spark_conf_settings_are_under_the_options_and_over_the_file(tmp_path: Path) -> None:
    toml = tmp_path / "rlmm.toml"
    toml.write_text(f'data_dir = "{tmp_path / "file"}"\n[eventlog]\npartitions = 3\n')
    conf = {"spark.rlmm.data_dir": str(tmp_path / "conf"), "spark.rlmm.eventlog.partitions": "5",
            "spark.sql.shuffle.partitions": "2"}  # fmt: skip
    parsed = parse_options({"subscribe": "t", "config": str(toml), "rlmm.data_dir": "/opt"}, conf)
    config = rlmm_config(parsed)
    assert str(config.data_dir) == "/opt"  # option > Spark conf
    assert config.eventlog["partitions"] == 5  # Spark conf > file
    # The Spark conf alone is a whole configuration (a job that sets no rlmm option).
    alone = rlmm_config(parse_options({"subscribe": "t"}, conf))
    assert str(alone.data_dir) == str(tmp_path / "conf")
    with pytest.raises(KafkaArchiveOptionError, match="option 'config': is required"):
        parse_options({"subscribe": "t"}, {"spark.sql.shuffle.partitions": "2"})
    bad = parse_options({"subscribe": "t"}, {"spark.rlmm.remote.buckett": "b"})
    with pytest.raises(
        KafkaArchiveOptionError, match=r"kafka-archive Spark conf 'spark.rlmm.remote.buckett': "
    ):
        rlmm_config(bad)


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    @property
    def getAll(self) -> dict[str, str]:
        return dict(self.values)

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value


class _Session:
    """What register() uses of a SparkSession."""

    def __init__(self, conf: dict[str, str]) -> None:
        self.conf = _Conf({"spark.pyspark.python": sys.executable, **conf})
        self.registered: list[Any] = []
        session = self

        class _Sources:
            @staticmethod
            def register(source: Any) -> None:
                session.registered.append(source)

        self.dataSource = _Sources()


def test_register_carries_the_spark_conf_with_the_class_and_refuses_a_secret() -> None:
    session = _Session({"spark.rlmm.remote.bucket": "b", "spark.app.name": "x"})
    register(session)
    source = session.registered[-1]
    assert source.spark_conf == {"spark.rlmm.remote.bucket": "b"}
    assert source.name() == "kafka-archive"
    # Pickled by value, as spark.dataSource.register ships it to the planning worker.
    assert cloudpickle.loads(cloudpickle.dumps(source)).spark_conf == source.spark_conf
    assert with_spark_conf({}) is KafkaArchiveDataSource
    secret = _Session({"spark.rlmm.remote.aws_secret_access_key": SECRET})
    with pytest.raises(KafkaArchiveOptionError, match="is a secret, and Spark sends its conf"):
        register(secret)
    assert secret.registered == []


@pytest.fixture
def s3_archive(s3_endpoint: str, tmp_path: Path) -> tuple[dict[str, str], Path, list[Any]]:
    """An archive in moto; the options naming it (no file) and the records archived."""
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket="travel")
    remote = {"remote.type": "s3", "remote.bucket": "travel", "remote.endpoint_url": s3_endpoint}
    config = data.make_config(tmp_path / "rlmm", **remote)
    pdir, expected = data.write_history(tmp_path / "logs", "tr", 0, "zstd")
    asyncio.run(data.offload(config, [pdir]))
    close_remote_storage()
    options = {"subscribe": "tr", "rlmm.data_dir": str(config.data_dir),
               "rlmm.eventlog.partitions": "4"}  # fmt: skip
    options.update({f"rlmm.{k}": v for k, v in remote.items()})
    return options, tmp_path, data.archived(pdir, expected)


@pytest.mark.s3
def test_what_executors_get_holds_no_secret_yet_the_driver_plans_with_it(
    s3_archive: tuple[dict[str, str], Path, list[Any]],
) -> None:
    options, _tmp, expected = s3_archive
    given = {**options, "rlmm.remote.aws_secret_access_key": SECRET, "kafka.sasl.jaas.config": JAAS}
    source = KafkaArchiveDataSource(given)
    # Its first trip (load() -> the JVM -> the planning worker) keeps what planning needs.
    source = cloudpickle.loads(cloudpickle.dumps(source))
    assert SECRET.encode() in cloudpickle.dumps(source)
    reader = source.reader(kafka_struct(False))
    assert reader._secrets == {"remote.aws_secret_access_key": SECRET}  # planning uses it
    partitions = reader.partitions()
    # pyspark's read function closes over the reader and the data source: both travel
    # to every executor, as do the input partitions.
    for blob in (cloudpickle.dumps((reader, source)), cloudpickle.dumps(partitions)):
        assert SECRET.encode() not in blob and b"jaas-7342" not in blob
        assert b"travel" in blob  # the bucket travels, the secret does not
    shipped = cloudpickle.loads(cloudpickle.dumps(reader))
    assert shipped._secrets == {}
    got = [r for p in partitions for r in rows(shipped.read(p))]
    assert got == expected_rows(expected, headers=False)


def _read_everything(options: dict[str, str]) -> list[Any]:
    """Plan on the "driver", then read every input partition as an executor would (a
    fresh process: no cached S3 client)."""
    groups = plan_groups(parse_options(options))
    close_remote_storage()
    reader = KafkaArchiveDataSource(options).reader(kafka_struct(False))
    return [r for g in groups for r in rows(reader.read(SlicePartition(g)))]


def _no_credentials(monkeypatch: pytest.MonkeyPatch, tmp: Path) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp / "no-credentials"))


@pytest.mark.s3
def test_an_executor_without_credentials_says_so_in_one_line(
    s3_archive: tuple[dict[str, str], Path, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    options, tmp, expected = s3_archive
    # The driver's keys are in its config file, which this "executor" does not have:
    # the key id travels with the slices, its secret does not.
    toml = tmp / "driver.toml"
    toml.write_text('[remote]\naws_access_key_id = "testing"\naws_secret_access_key = "testing"\n')
    groups = plan_groups(parse_options({**options, "config": str(toml)}))
    toml.unlink()
    reader = KafkaArchiveDataSource(options).reader(kafka_struct(False))
    close_remote_storage()
    _no_credentials(monkeypatch, tmp)
    with pytest.raises(ExecutorSettingError) as caught:
        list(reader.read(SlicePartition(groups[0])))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(
        f"kafka-archive on executor host {HOST}: no AWS credentials for remote.bucket travel"
        f" (the config file {toml} that holds them on the driver is not on this host):"
    ), message
    assert "spark.executorEnv.AWS_ACCESS_KEY_ID" in message
    assert "remote.aws_secret_access_key is never sent to executors" in message
    # With credentials in its environment the same executor reads: the key id that
    # came without its secret does not shadow them.
    close_remote_storage()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "executor")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "executor")
    got = [r for g in groups for r in rows(reader.read(SlicePartition(g)))]
    assert got == expected_rows(expected, headers=False)
    close_remote_storage()


@pytest.mark.s3
def test_an_executor_that_cannot_reach_the_endpoint_says_so_in_one_line(
    s3_archive: tuple[dict[str, str], Path, list[Any]],
) -> None:
    options, _tmp, _expected = s3_archive
    groups = plan_groups(parse_options(options))
    unreachable = f"http://127.0.0.1:{free_port()}"
    remote = {**groups[0][0].remote_options, "endpoint_url": unreachable, "max_attempts": 1}
    moved = [dataclasses.replace(piece, remote_options=remote) for piece in groups[0]]
    reader = KafkaArchiveDataSource(options).reader(kafka_struct(False))
    with pytest.raises(ExecutorSettingError) as caught:
        list(reader.read(SlicePartition(moved)))
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(
        f"kafka-archive on executor host {HOST}: cannot reach remote.endpoint_url {unreachable}"
        " for remote.bucket travel from this host"
    ), message
    close_remote_storage()


def test_an_executor_without_the_local_root_says_so_before_reading(tmp_path: Path) -> None:
    config = data.make_config(tmp_path / "rlmm")
    pdir, expected = data.write_history(tmp_path / "logs", "lr", 0)
    asyncio.run(data.offload(config, [pdir]))
    options = {"subscribe": "lr", "rlmm.data_dir": str(config.data_dir),
               "rlmm.eventlog.partitions": "4"}  # fmt: skip
    assert _read_everything(options) == expected_rows(data.archived(pdir, expected), headers=False)
    groups = plan_groups(parse_options(options))
    root = Path(groups[0][0].remote_options["root"])
    root.rename(tmp_path / "elsewhere")  # as on a host that does not mount it
    reader = KafkaArchiveDataSource(options).reader(kafka_struct(False))
    with pytest.raises(ExecutorSettingError, match=f"remote.root {root} is not a directory"):
        list(reader.read(SlicePartition(groups[0])))
    close_remote_storage()
