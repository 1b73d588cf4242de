"""rlmm reads what Aiven's tiered-storage plugin wrote, as it wrote it.

``tests/data/aiven-tiered/<variant>/`` holds the objects and the ``__remote_log_metadata``
records that Aiven's plugin and Kafka's own RLMM wrote in an Apache Kafka 4.1.1 broker
over moto S3 (see its README), and the records a Kafka consumer read through that
broker while the data lived only in the remote tier. Here the objects go into moto's
S3 server and the metadata records, byte for byte, into an embedded metadata log.

Invariants checked, per variant (chunked and zstd-compressed, plain, encrypted):
``rlmm verify --deep`` is clean; ``rlmm records`` and ``format("kafka-archive")`` give
exactly the consumer's records under both isolation levels; ``segments show`` names
the three objects; a deleted ``.indexes`` object and a stray object are found and
``gc --apply`` removes the stray only; a manifest that is not JSON is a
``corrupt_object`` naming its key, and gc deletes nothing because of it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest

from eventlog.file import FileEventLog
from rlmm.codec import decode
from rlmm.model import RemoteLogSegmentMetadata
from rlmm.spark import register

pytestmark = [pytest.mark.s3, pytest.mark.spark]

DATA = Path(__file__).resolve().parents[1] / "data" / "aiven-tiered"
VARIANTS = sorted(p.name for p in DATA.glob("*") if (p / "metadata.jsonl").is_file())
METADATA_PARTITIONS = 3
ISOLATION = ("read_uncommitted", "read_committed")


def test_the_plugin_data_is_here() -> None:
    assert {"zstd", "plain"} <= set(VARIANTS), f"tests/data/aiven-tiered holds {VARIANTS}"


def properties(variant: Path) -> dict[str, str]:
    out = {}
    for line in (variant / "rsm.properties").read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip().removeprefix("rsm.config.")] = value.strip()
    return out


async def load_metadata(variant: Path, directory: Path) -> list[Any]:
    """Kafka's RLMM records, byte for byte, into an embedded log (same partitions and
    offsets); returns them decoded."""
    rows = [json.loads(line) for line in (variant / "metadata.jsonl").read_text().splitlines()]
    events = []
    async with FileEventLog(directory, METADATA_PARTITIONS) as log:
        for row in sorted(rows, key=lambda r: (r["partition"], r["offset"])):
            value = base64.b64decode(row["value"])
            key = None if row["key"] is None else base64.b64decode(row["key"])
            assert await log.append(row["partition"], value, key) == row["offset"]
            events.append(decode(value))
    return events


@pytest.fixture(params=VARIANTS)
def cluster(request: pytest.FixtureRequest, s3_endpoint: str, tmp_path: Path) -> dict[str, Any]:
    """The variant's bucket on the moto server and an rlmm config over it."""
    variant = DATA / request.param
    props = properties(variant)
    bucket = props["storage.s3.bucket.name"]
    s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket=bucket)
    root = variant / "bucket"
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        s3.put_object(Bucket=bucket, Key=path.relative_to(root).as_posix(), Body=path.read_bytes())
    events = asyncio.run(load_metadata(variant, tmp_path / "metadata-log"))
    remote = {
        k: v
        for k, v in props.items()
        if k.startswith(("key.prefix", "chunk.", "compression.", "encryption.key.pair.id"))
    }
    for key, value in props.items():
        if key.endswith(".private.key.file"):
            remote[key] = str(variant / Path(value).name)
    lines = [f'"{k}" = "{v}"' for k, v in remote.items()]
    config = tmp_path / "rlmm.toml"
    config.write_text(
        f'data_dir = "{tmp_path / "rlmm"}"\n[eventlog]\ndir = "{tmp_path / "metadata-log"}"\n'
        f'partitions = {METADATA_PARTITIONS}\n[remote]\ntype = "aiven-s3"\n'
        f'bucket = "{bucket}"\nendpoint_url = "{s3_endpoint}"\nregion = "us-east-1"\n'
        'aws_access_key_id = "testing"\naws_secret_access_key = "testing"\n' + "\n".join(lines)
    )
    segments = [e for e in events if isinstance(e, RemoteLogSegmentMetadata)]
    return {
        "variant": variant,
        "config": config,
        "s3": s3,
        "bucket": bucket,
        "prefix": props.get("key.prefix", ""),
        "segments": segments,
        "records": json.loads((variant / "records.json").read_text()),
    }


def rlmm(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlmm.cli", *args, "--config", str(config)],
        capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def as_consumer_rows(records: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """``rlmm records`` JSON lines in records.json's shape."""

    def field(r: dict[str, Any], name: str) -> str | None:
        if f"{name}_base64" in r:
            return str(r[f"{name}_base64"])
        return b64(None if r.get(name) is None else str(r[name]).encode())

    return [
        (
            r["partition"], r["offset"], r["timestamp_ms"], r["timestamp_type"],
            field(r, "key"), field(r, "value"),
            [[h["key"], field(h, "value")] for h in r.get("headers") or []],
        )
        for r in records
    ]  # fmt: skip


def expected_rows(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted(
        (r["partition"], r["offset"], r["timestamp"], r["timestampType"], r["key"], r["value"],
         [list(h) for h in r["headers"]])
        for r in rows
    )  # fmt: skip


def test_verify_records_and_spark_equal_what_the_broker_served(
    cluster: dict[str, Any], spark: Any
) -> None:
    config = cluster["config"]
    deep = rlmm(config, "verify", "--deep", "--json", "--safety-window", "0s")
    assert deep.returncode == 0, deep.stdout + deep.stderr
    report = json.loads(deep.stdout)
    assert report["ok"] and report["segments_checked"] == len(cluster["segments"]) > 0

    for isolation in ISOLATION:
        expected = expected_rows(cluster["records"][isolation])
        got = rlmm(config, "records", "orders", "--isolation", isolation)
        assert got.returncode == 0, got.stderr
        lines = [json.loads(line) for line in got.stdout.splitlines()]
        assert sorted(as_consumer_rows(lines)) == expected, isolation

        register(spark)
        df = (
            spark.read.format("kafka-archive")
            .option("config", str(config))
            .option("subscribe", "orders")
            .option("includeHeaders", "true")
            .option("kafka.isolation.level", isolation)
            .option("maxRecordsPerPartition", "97")  # slices start inside chunks
            .load()
        )
        rows = [
            (r["partition"], r["offset"], int(r["timestamp"].timestamp() * 1000),
             r["timestampType"], b64(None if r["key"] is None else bytes(r["key"])),
             b64(None if r["value"] is None else bytes(r["value"])),
             [[h["key"], b64(None if h["value"] is None else bytes(h["value"]))]
              for h in r["headers"] or []])
            for r in df.collect()
        ]  # fmt: skip
        assert sorted(rows) == expected, isolation


def test_breakage_is_found_and_gc_removes_only_garbage(cluster: dict[str, Any]) -> None:
    config, s3, bucket, prefix = (cluster[k] for k in ("config", "s3", "bucket", "prefix"))
    listed = rlmm(config, "segments", "list", "--json")
    ids = [s["segment_id"] for s in json.loads(listed.stdout)["segments"]]
    shown = rlmm(config, "segments", "show", ids[0], "--json")
    assert shown.returncode == 0, shown.stderr
    objects = json.loads(shown.stdout)["objects"]
    assert {o["kind"] for o in objects} == {"log segment", "indexes", "manifest"}, objects
    assert all(o["stored_size"] is not None for o in objects)

    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    indexes = next(k for k in keys if k.endswith(".indexes"))
    manifest = next(k for k in keys if k.endswith(".rsm-manifest") and k[:-13] != indexes[:-8])
    log_key = next(k for k in keys if k.endswith(".log"))
    stray = log_key[: -len("AAAAAAAAAAAAAAAAAAAAAA.log")] + "AAAAAAAAAAAAAAAAAAAAAA.log"
    saved = {k: s3.get_object(Bucket=bucket, Key=k)["Body"].read() for k in (indexes, manifest)}
    s3.delete_object(Bucket=bucket, Key=indexes)
    s3.put_object(Bucket=bucket, Key=manifest, Body=b"this is not a manifest")
    s3.copy_object(Bucket=bucket, Key=stray, CopySource={"Bucket": bucket, "Key": log_key})
    before = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"])

    found = rlmm(config, "verify", "--json", "--safety-window", "0s")
    assert found.returncode == 1, found.stdout + found.stderr
    problems = {(p["kind"], p.get("object_name")) for p in json.loads(found.stdout)["problems"]}
    assert problems == {
        ("missing_object", indexes.removeprefix(prefix)),
        ("corrupt_object", manifest.removeprefix(prefix)),
        ("orphan_object", stray.removeprefix(prefix)),
    }, problems
    gc = rlmm(config, "gc", "--apply", "--json", "--safety-window", "0s")
    assert gc.returncode == 1, gc.stdout + gc.stderr
    after = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"])
    assert set(before) - set(after) == {stray}

    for key, data in saved.items():
        s3.put_object(Bucket=bucket, Key=key, Body=data)
    clean = rlmm(config, "verify", "--deep", "--safety-window", "0s")
    assert clean.returncode == 0, clean.stdout + clean.stderr


@pytest.mark.parametrize("cluster", ["plain"], indirect=True)  # the layout reads each alike
def test_a_window_learns_and_then_skips_segments_after_it(
    cluster: dict[str, Any], tmp_path: Path
) -> None:
    """Aiven's plugin records no smallest timestamp: the first read learns each segment's
    into rlmm's side index (a directory of rlmm's, nothing in the plugin's bucket), and
    the next window skips the segments wholly after it, with the same rows."""
    from rlmm.archive import ReadRequest, RowBounds, open_metadata_view, plan_slices
    from rlmm.archive.reader import read_slice
    from rlmm.config import load_config

    config = load_config(cluster["config"])
    side = str(tmp_path / "side-index")
    rows = cluster["records"]["read_uncommitted"]
    before = {o["Key"] for o in cluster["s3"].list_objects_v2(Bucket=cluster["bucket"])["Contents"]}

    def read(where: RowBounds) -> tuple[set[tuple[int, int]], list[tuple[int, int]]]:
        with open_metadata_view(config) as view:
            request = ReadRequest(topics=("orders",), where=where)
            slices = plan_slices(view, request, config.remote_options(), side_index=side)
        got = [
            (p, o)
            for piece in slices
            for batch in read_slice(piece)
            for p, o in zip(
                batch["partition"].to_pylist(), batch["offset"].to_pylist(), strict=True
            )
        ]
        return {(s.partition, s.segment.start_offset) for s in slices}, sorted(got)

    first_segment_end = min(r["timestamp"] for r in rows) + 1  # the first batch's records
    window = RowBounds(max_timestamp_ms=first_segment_end)
    expected = sorted(
        (r["partition"], r["offset"]) for r in rows if r["timestamp"] <= first_segment_end
    )
    unknown, got = read(window)  # unknown: every segment, and its readers learn
    assert got == expected
    learned, got = read(window)
    assert got == expected
    assert learned < unknown and learned
    # Every segment skipped holds only records after the window.
    for p, start in unknown - learned:
        later = [r for r in rows if r["partition"] == p and r["offset"] >= start]
        assert all(r["timestamp"] > first_segment_end for r in later)
    after = {o["Key"] for o in cluster["s3"].list_objects_v2(Bucket=cluster["bucket"])["Contents"]}
    assert after == before
