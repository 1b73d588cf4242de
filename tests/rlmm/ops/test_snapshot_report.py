"""rlmm.ops.snapshot_report over the configured store: `rlmm snapshot inspect` with no
PATH reads an S3 snapshot store (moto's server) as it reads a directory, every owner's
snapshots, a damaged object reported by its location (exit 1), never raised."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import boto3
import pytest
from click.testing import CliRunner

from rlmm.cache import RemotePartitionMetadataStore
from rlmm.cli import main
from rlmm.ops.snapshot_report import inspect_snapshot, inspect_snapshot_bytes, inspect_store
from snapshot import FORMAT_VERSION, Snapshot, SnapshotStoreError
from snapshot.local import LocalSnapshotStore
from snapshot.s3 import S3SnapshotStore
from tests.rlmm.factories import S, segment, tp, update

BUCKET = "rlmm-snapshots"
PREFIX = "tiered"


def manager_snapshot(segments: int, created_ms: int) -> Snapshot:
    """A snapshot of a manager's state: ``segments`` FINISHED segments of one partition
    and one STARTED one of another."""
    store = RemotePartitionMetadataStore()
    for i in range(segments):
        m = segment(tp(0), 100 * i, 100 * i + 99, {0: 100 * i}, size=1000)
        store.apply(m)
        store.apply(update(m, S.COPY_SEGMENT_FINISHED))
    store.apply(segment(tp(1), 0, 9, {0: 0}, size=10))
    return Snapshot(
        4, {1: 7 * segments, 3: segments}, store.to_state(store.partitions()), created_ms
    )


@pytest.fixture
def client(s3_endpoint: str) -> Iterator[Any]:
    c = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    c.create_bucket(Bucket=BUCKET)
    try:
        yield c
    finally:
        c.close()


def write_config(path: Path, endpoint: str) -> Path:
    path.write_text(
        "\n".join(
            [
                f'data_dir = "{path.parent / "data"}"',
                "[remote]",
                'type = "s3"',
                f'bucket = "{BUCKET}"',
                f'prefix = "{PREFIX}"',
                f'endpoint_url = "{endpoint}"',
                'region = "us-east-1"',
                "max_attempts = 2",
                "[snapshot]",
                'store = "s3"',
                'owner = "broker-0"',
                "keep = 2",
            ]
        )
        + "\n"
    )
    return path


def url(owner: str, seq: int) -> str:
    return f"s3://{BUCKET}/{PREFIX}/__snapshots/{owner}/snapshot-{seq:020d}.rlmm"


def test_inspect_reads_the_configured_s3_store(
    client: Any, s3_endpoint: str, tmp_path: Path
) -> None:
    mine = S3SnapshotStore(client, BUCKET, PREFIX, owner="broker-0", keep=2)
    other = S3SnapshotStore(client, BUCKET, PREFIX, owner="broker-1", keep=2)
    assert mine.write(manager_snapshot(2, 1_700_000_000_001)) == url("broker-0", 1)
    assert mine.write(manager_snapshot(3, 1_700_000_000_002)) == url("broker-0", 2)
    # A third object of the owner, damaged as a bad upload by another tool would be.
    assert other.write(manager_snapshot(1, 1_700_000_000_003)) == url("broker-1", 1)
    damaged = bytearray(mine.read(url("broker-0", 2)))
    damaged[30] ^= 0xFF
    client.put_object(
        Bucket=BUCKET, Key=f"{PREFIX}/__snapshots/broker-0/snapshot-{3:020d}.rlmm", Body=damaged
    )

    config = write_config(tmp_path / "rlmm.toml", s3_endpoint)
    result = CliRunner().invoke(main, ["snapshot", "inspect", "--json", "--config", str(config)])
    assert result.exit_code == 1, result.output
    reports = json.loads(result.output)["snapshots"]
    assert [(r["path"], r["ok"]) for r in reports] == [
        (url("broker-0", 3), False),
        (url("broker-0", 2), True),
        (url("broker-0", 1), True),
        (url("broker-1", 1), True),
    ]
    bad = reports[0]
    assert "CRC-32C mismatch" in bad["problem"] and url("broker-0", 3) in bad["problem"]
    assert bad["size_bytes"] == len(damaged) and bad["format_version"] == FORMAT_VERSION
    counted = [
        (r["segments"], r["segments_by_state"], r["user_partitions"], r["remote_bytes"])
        for r in reports[1:]
    ]
    assert counted == [
        (n + 1, {"COPY_SEGMENT_FINISHED": n, "COPY_SEGMENT_STARTED": 1}, 2, n * 1000 + 10)
        for n in (3, 2, 1)
    ]
    assert [r["applied_offsets"] for r in reports[1:]] == [
        {"1": 21, "3": 3},
        {"1": 14, "3": 2},
        {"1": 7, "3": 1},
    ]
    # Decoded from the object exactly as from a file holding the same bytes.
    copy = tmp_path / "snapshot-00000000000000000002.rlmm"
    copy.write_bytes(mine.read(url("broker-0", 2)))
    as_file = inspect_snapshot(copy).to_dict()
    assert {**as_file, "path": url("broker-0", 2)} == reports[1]

    human = CliRunner().invoke(main, ["snapshot", "inspect", "--config", str(config)])
    assert human.exit_code == 1 and "CORRUPT" in human.output, human.output
    assert url("broker-0", 3) in human.output


def test_the_store_reports_its_own_owner_alone_and_never_raises_for_a_gone_object(
    client: Any,
) -> None:
    mine = S3SnapshotStore(client, BUCKET, PREFIX, owner="broker-0", read_only=True)
    S3SnapshotStore(client, BUCKET, PREFIX, owner="broker-1").write(manager_snapshot(1, 1))
    writer = S3SnapshotStore(client, BUCKET, PREFIX, owner="broker-0")
    writer.write(manager_snapshot(1, 2))
    assert [r.path for r in inspect_store(mine, all_owners=False)] == [url("broker-0", 1)]

    class Vanishing(S3SnapshotStore):
        def kept_all_owners(self) -> list[str]:
            return [url("broker-0", 9), *super().kept_all_owners()]

    vanishing = Vanishing(client, BUCKET, PREFIX, owner="broker-0", read_only=True)
    reports = inspect_store(vanishing)
    assert [(r.path, r.ok) for r in reports] == [
        (url("broker-0", 9), False),
        (url("broker-0", 1), True),
        (url("broker-1", 1), True),
    ]
    assert "gone" in str(reports[0].problem)
    with pytest.raises(SnapshotStoreError, match="not a snapshot of"):
        mine.read(f"s3://{BUCKET}/{PREFIX}/orders-abc/0/seg.log")


def test_a_local_store_reads_its_own_files_by_location(tmp_path: Path) -> None:
    store = LocalSnapshotStore(tmp_path / "snaps")
    written = str(store.write(manager_snapshot(2, 5)))
    assert store.kept_all_owners() == store.kept() == [written]
    assert store.read(written) == Path(written).read_bytes()
    report = inspect_store(store)[0]
    assert report.ok and report.segments == 3 and report.path == written
    assert inspect_snapshot_bytes(store.read(written), "x") == replace(report, path="x")
    with pytest.raises(SnapshotStoreError, match="not a snapshot of"):
        store.read(str(tmp_path / "elsewhere" / Path(written).name))
