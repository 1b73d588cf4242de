"""A bucket that says no: IAM denies a PUT to a read-only principal, a GET to one that
may only write. The refusal is one line naming the bucket and the key, a segment
whose objects were not written never reaches COPY_SEGMENT_FINISHED, nothing half
written stays behind, and no output holds the secret key (moto's server enforces
IAM here, with real access keys)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.s3 import IamBucket
from tests.rlmm.offload.test_sidecar import log_dir, write_config

pytestmark = pytest.mark.s3

ROOT = Path(__file__).resolve().parents[3]


def config_for(tmp: Path, bucket: IamBucket, user: str) -> Path:
    key_id, secret = bucket.keys[user]
    remote = (
        f'[remote]\ntype = "s3"\nbucket = "{bucket.bucket}"\nendpoint_url = "{bucket.endpoint}"\n'
        f'region = "us-east-1"\naws_access_key_id = "{key_id}"\n'
        f'aws_secret_access_key = "{secret}"\nmax_attempts = 1\n'
    )
    path = write_config(tmp)
    path.write_text(path.read_text() + remote)
    return path


def rlmm(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlmm.cli", *args, "--config", str(config)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def objects(bucket: IamBucket, user: str) -> list[str]:
    import boto3

    key_id, secret = bucket.keys[user]
    client = boto3.client(
        "s3", endpoint_url=bucket.endpoint, region_name="us-east-1",
        aws_access_key_id=key_id, aws_secret_access_key=secret,
    )  # fmt: skip
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket.bucket)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def test_a_denied_put_names_the_key_and_finishes_no_segment(
    iam_bucket: IamBucket, tmp_path: Path
) -> None:
    logs, _pdirs, _audit = log_dir(tmp_path)
    config = config_for(tmp_path, iam_bucket, "reader")
    done = rlmm(config, "offload", "--once", "--json", "--log-dir", str(logs))
    assert done.returncode == 1, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["segments_copied"] == 0 and summary["errors"]
    for error in summary["errors"]:
        assert "AccessDenied" in error and f"s3://{iam_bucket.bucket}" in error, error
    # the copy's own error names the object it could not write
    puts = [e for e in summary["errors"] if f"put_object s3://{iam_bucket.bucket}/orders-" in e]
    assert puts and all(e.split(": AccessDenied")[0].endswith(".log") for e in puts), puts
    # (its cleanup is denied too: the segment waits in DELETE_SEGMENT_STARTED for gc)
    listed = json.loads(rlmm(config, "segments", "list", "--json").stdout)["segments"]
    assert not [s for s in listed if s["state"] == "COPY_SEGMENT_FINISHED"]
    assert objects(iam_bucket, "reader") == []  # nothing half written
    secret = iam_bucket.keys["reader"][1]
    assert secret not in done.stdout + done.stderr


def test_a_denied_get_names_the_key(iam_bucket: IamBucket, tmp_path: Path) -> None:
    logs, _pdirs, _audit = log_dir(tmp_path)
    (tmp_path / "w").mkdir()
    writer = config_for(tmp_path / "w", iam_bucket, "writer")
    done = rlmm(writer, "offload", "--once", "--log-dir", str(logs))
    assert done.returncode == 0, done.stderr[-3000:]
    # the same metadata, read by a principal that may list and write but not read
    blind = config_for(tmp_path / "w", iam_bucket, "blind")
    read = rlmm(blind, "records", "orders", "--partition", "0", "--limit", "1")
    assert read.returncode == 2, read.stdout[-2000:] + read.stderr[-2000:]
    line = read.stderr.strip()
    assert line.startswith("error: ") and "\n" not in line, line
    assert "AccessDenied" in line and f"s3://{iam_bucket.bucket}/" in line, line
    assert iam_bucket.keys["blind"][1] not in read.stdout + read.stderr
