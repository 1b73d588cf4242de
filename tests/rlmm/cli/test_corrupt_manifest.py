"""Issue 31's regression, as an operator meets it: one Aiven manifest in the bucket says
``"originalFileSize": 9223372036854775808`` in its fixed chunk index. ``rlmm verify``
(in a process whose address space is capped at 2 GiB; the uncapped one grew to 23 GiB)
reports it as one corrupt_object line naming the key and field and exits 1, quickly;
``rlmm gc --apply`` deletes nothing because of it.

The bucket is what Aiven's plugin wrote (tests/data/aiven-tiered/plain: a fixed chunk
index), loaded into moto's S3 server, with Kafka's own metadata records in an embedded
metadata log.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import boto3
import pytest

from eventlog.file import FileEventLog
from tests.fuzzing import DATA, ROOT

pytestmark = pytest.mark.s3

PLAIN = DATA / "aiven-tiered" / "plain"
PARTITIONS = 3
CAP = 2 << 30
FIELD = "chunkIndex.originalFileSize"


async def _load_metadata(directory: Path) -> None:
    rows = [json.loads(line) for line in (PLAIN / "metadata.jsonl").read_text().splitlines()]
    async with FileEventLog(directory, PARTITIONS) as log:
        for row in sorted(rows, key=lambda r: (r["partition"], r["offset"])):
            key = None if row["key"] is None else base64.b64decode(row["key"])
            await log.append(row["partition"], base64.b64decode(row["value"]), key)


def rlmm(config: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    """The CLI in a child that caps its own address space before anything is imported."""
    code = (
        "import resource, runpy, sys\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({CAP}, {CAP}))\n"
        "sys.argv = ['rlmm', *sys.argv[1:]]\n"
        "runpy.run_module('rlmm.cli', run_name='__main__')\n"
    )
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code, *args, "--config", str(config)],
        capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL, cwd=ROOT,
    )  # fmt: skip
    return done, time.monotonic() - began


@pytest.fixture
def bucket(s3_endpoint: str, tmp_path: Path) -> dict[str, Any]:
    s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket="plain")
    root = PLAIN / "bucket"
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        s3.put_object(Bucket="plain", Key=path.relative_to(root).as_posix(), Body=path.read_bytes())
    asyncio.run(_load_metadata(tmp_path / "metadata-log"))
    config = tmp_path / "rlmm.toml"
    config.write_text(
        f'data_dir = "{tmp_path / "rlmm"}"\n[eventlog]\ndir = "{tmp_path / "metadata-log"}"\n'
        f'partitions = {PARTITIONS}\n[remote]\ntype = "aiven-s3"\nbucket = "plain"\n'
        f'endpoint_url = "{s3_endpoint}"\nregion = "us-east-1"\n'
        'aws_access_key_id = "testing"\naws_secret_access_key = "testing"\n'
    )
    return {"s3": s3, "config": config}


def test_a_manifest_claiming_2_pow_63_bytes_is_one_corrupt_object_line(
    bucket: dict[str, Any],
) -> None:
    s3, config = bucket["s3"], bucket["config"]
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="plain")["Contents"])
    manifest = next(k for k in keys if k.endswith(".rsm-manifest"))
    original = s3.get_object(Bucket="plain", Key=manifest)["Body"].read()
    doc = json.loads(original)
    assert doc["chunkIndex"]["type"] == "fixed"
    text = original.decode().replace(
        f'"originalFileSize":{doc["chunkIndex"]["originalFileSize"]}',
        '"originalFileSize": 9223372036854775808',
    )
    assert '"originalFileSize": 9223372036854775808' in text
    s3.put_object(Bucket="plain", Key=manifest, Body=text.encode())

    found, took = rlmm(config, "verify", "--json", "--safety-window", "0s")
    assert found.returncode == 1, found.stdout + found.stderr
    assert "MemoryError" not in found.stderr and took < 60
    problems = json.loads(found.stdout)["problems"]
    assert [(p["kind"], p["object_name"]) for p in problems] == [("corrupt_object", manifest)]
    assert FIELD in problems[0]["detail"] and "\n" not in problems[0]["detail"]

    plain, _ = rlmm(config, "verify", "--safety-window", "0s")
    assert plain.returncode == 1, plain.stdout + plain.stderr
    lines = [line for line in plain.stdout.splitlines() if FIELD in line]
    assert len(lines) == 1 and manifest in lines[0], plain.stdout

    gc, _ = rlmm(config, "gc", "--apply", "--json", "--safety-window", "0s")
    assert gc.returncode == 1, gc.stdout + gc.stderr
    assert sorted(o["Key"] for o in s3.list_objects_v2(Bucket="plain")["Contents"]) == keys
