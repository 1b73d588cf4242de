"""No secret is ever shown: `rlmm config` (text and JSON), and Spark input partitions,
which are pickled and shipped to executors."""

from __future__ import annotations

import asyncio
import json
import pickle
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from rlmm.archive import close_remote_storage
from rlmm.archive.reader import read_slice
from rlmm.config import load_config
from rlmm.secrets import REDACTED, is_secret, redact
from rlmm.spark import parse_options
from rlmm.spark.planning import plan_groups
from rlmm.spark.source import SlicePartition
from tests.rlmm.archive.archive_data import archived, expected_rows, offload, rows, write_history

JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required"
    ' username="writer" password="jaas-pw-1729";'
)
SECRETS = ("jaas-pw-1729", "keystore-pw-4242", "aws-secret-9913", "session-token-5150")


def test_names_that_are_secrets() -> None:
    for key in (
        "sasl.jaas.config", "remote.log.metadata.common.client.ssl.key.password",
        "ssl.keystore.password", "ssl.keystore.key", "aws_secret_access_key",
        "storage.aws.secret.access.key", "aws_session_token", "sasl_plain_password",
    ):  # fmt: skip
        assert is_secret(key), key
    for key in (
        "bootstrap_servers", "ssl.keystore.location", "aws_access_key_id",
        "encryption.key.pairs.k1.private.key.file", "sasl.mechanism", "bucket",
    ):  # fmt: skip
        assert not is_secret(key), key
    shown = redact({"sasl.jaas.config": JAAS, "nested": [{"ssl.key.password": "x"}]})
    assert shown["sasl.jaas.config"].endswith(f'username="writer" password="{REDACTED}";')
    assert shown["nested"] == [{"ssl.key.password": REDACTED}]


def config_file(tmp_path: Path, *, kafka: bool = False, **remote: str) -> Path:
    path = tmp_path / "rlmm.toml"
    lines = [f'"{k}" = "{v}"' for k, v in remote.items()]
    eventlog = "partitions = 4\n"
    if kafka:
        eventlog += (
            'type = "kafka"\nbootstrap_servers = "127.0.0.1:9"\n'
            f'"remote.log.metadata.common.client.sasl.jaas.config" = {json.dumps(JAAS)}\n'
            '"remote.log.metadata.common.client.ssl.key.password" = "keystore-pw-4242"\n'
        )
    path.write_text(
        f'data_dir = "{tmp_path / "data"}"\n[eventlog]\n{eventlog}'
        "[remote]\n" + "\n".join(lines) + "\n"
    )
    return path


def rlmm(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlmm.cli", *args, "--config", str(config)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize("as_json", [False, True])
def test_rlmm_config_shows_secrets_redacted(tmp_path: Path, as_json: bool) -> None:
    path = config_file(
        tmp_path, kafka=True, type="s3", bucket="b", aws_secret_access_key="aws-secret-9913",
        aws_session_token="session-token-5150",
    )  # fmt: skip
    done = rlmm(path, "config", *(["--json"] if as_json else []))
    assert done.returncode == 0, done.stderr
    out = done.stdout + done.stderr
    assert not [s for s in SECRETS if s in out]
    assert REDACTED in out and 'username=\\"writer\\"' in out


@pytest.mark.parametrize("debug", [False, True])
def test_an_error_that_quotes_a_secret_prints_it_redacted(tmp_path: Path, debug: bool) -> None:
    """The CLI's one error renderer scrubs every configured secret value, whatever
    built the message (here a bucket name that is, by mistake, the secret key)."""
    path = config_file(
        tmp_path, type="s3", bucket="aws-secret-9913", endpoint_url="http://127.0.0.1:9",
        aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="aws-secret-9913",
    )  # fmt: skip
    path.write_text(path.read_text() + "max_attempts = 1\n")
    # an empty metadata log: the command gets as far as listing the bucket
    from eventlog.file import FileEventLog

    async def create_log() -> None:
        async with FileEventLog(tmp_path / "data" / "metadata-log", 4):
            pass

    asyncio.run(create_log())
    done = rlmm(path, "verify", *(["--debug"] if debug else []))
    assert done.returncode == 2, done.stderr
    assert "aws-secret-9913" not in done.stdout + done.stderr
    assert f"s3://{REDACTED}" in done.stderr


def test_an_offload_clients_secret_never_reaches_its_log_or_error(tmp_path: Path) -> None:
    # [offload] holds the cluster client's SASL and TLS settings; a message that quotes
    # one (here the bootstrap address that is, by mistake, the keystore password) must
    # show it redacted, in the sidecar's log lines and its error line alike.
    path = config_file(tmp_path, type="local", root=str(tmp_path / "remote"))
    path.write_text(
        path.read_text() + '[offload]\n"bootstrap.servers" = "keystore-pw-4242.invalid:9"\n'
        '"ssl.keystore.password" = "keystore-pw-4242.invalid"\n'
        f'"sasl.jaas.config" = {json.dumps(JAAS)}\n'
    )
    (tmp_path / "logs").mkdir()
    done = rlmm(path, "offload", "--once", "--log-dir", str(tmp_path / "logs"))
    assert done.returncode != 0
    out = done.stdout + done.stderr
    assert "leadership unknown" in out and f"{REDACTED}:9" in out
    assert not [s for s in SECRETS if s in out]


def test_secret_values_and_scrub() -> None:
    from rlmm.secrets import scrub, secret_values

    found = secret_values(
        {"properties": {"x.sasl.jaas.config": JAAS, "x.ssl.key.password": "keystore-pw-4242"},
         "bucket": "b", "ssl.keystore.location": "/etc/k.p12"}
    )  # fmt: skip
    assert found == {"jaas-pw-1729", "keystore-pw-4242"}
    assert scrub("login jaas-pw-1729 at b", found) == f"login {REDACTED} at b"


@pytest.mark.s3
def test_spark_input_partitions_carry_no_secret(s3_endpoint: str, tmp_path: Path) -> None:
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket="secret-archive")
    path = config_file(
        tmp_path, type="s3", bucket="secret-archive", endpoint_url=s3_endpoint,
        aws_access_key_id="testing", aws_secret_access_key="aws-secret-9913",
    )  # fmt: skip
    config = load_config(path, env={})
    pdir, expected = write_history(tmp_path / "logs", "sec", 0, "none")
    asyncio.run(offload(config, [pdir]))
    close_remote_storage()
    groups = plan_groups(parse_options({"subscribe": "sec", "config": str(path)}))
    blob = pickle.dumps([SlicePartition(group) for group in groups])
    assert b"aws-secret-9913" not in blob and b"secret-archive" in blob
    assert str(path).encode() in blob  # where an executor finds the secret again
    # An executor (a fresh process cache) reads the slices with the secret from the file.
    close_remote_storage()
    got = [
        r for part in pickle.loads(blob) for piece in part.slices for r in rows(read_slice(piece))
    ]
    assert got == expected_rows(archived(pdir, expected), headers=False)


def test_the_log_scrubber_rewrites_a_record_that_quotes_a_secret() -> None:
    import logging

    from rlmm.secrets import SecretScrubber

    record = logging.LogRecord(
        "aiokafka.conn",
        logging.DEBUG,
        __file__,
        1,
        "Request %r",
        (b"\x00writer\x00jaas-pw-1729",),
        None,
    )
    assert SecretScrubber(lambda: {"jaas-pw-1729"}).filter(record)
    assert "jaas-pw-1729" not in record.getMessage() and REDACTED in record.getMessage()
