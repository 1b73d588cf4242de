"""rlmm's side index: entries round trip in a directory and in S3 (moto), are written
once, a partition is read with one listing, and an unusable location is a
SideIndexError (which readers log and read on without)."""

from __future__ import annotations

import uuid
from pathlib import Path

import boto3
import pytest

from remote.errors import SideIndexError
from remote.side_index import Entry, SideIndex, entry_name, smallest_of
from rlmm.factory import open_side_index
from rlmm.model import TopicIdPartition

TP = TopicIdPartition(uuid.UUID(int=7), "orders", 3)
OTHER = TopicIdPartition(uuid.UUID(int=8), "orders", 3)  # the topic recreated: another id


def _round_trip(index: SideIndex) -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    assert index.read(TP) == {}
    index.write(TP, a, Entry(0, 100, 1_700_000_000_500))
    index.write(TP, a, Entry(100, 250, 1_700_000_000_000))
    index.write(TP, a, Entry(100, 250, 1_700_000_000_000))  # again: written once, no error
    index.write(TP, b, Entry(0, 10, -1))
    index.write(OTHER, b, Entry(0, 99, 5))
    found = index.read(TP)
    assert found == {
        a: [Entry(0, 100, 1_700_000_000_500), Entry(100, 250, 1_700_000_000_000)],
        b: [Entry(0, 10, -1)],
    }
    assert smallest_of(found[a], 250) == 1_700_000_000_000
    assert smallest_of(found[a], 251) is None  # a byte no read has seen: unknown
    assert smallest_of(found[a][1:], 250) is None  # bytes [0, 100) unseen
    assert index.read(OTHER) == {b: [Entry(0, 99, 5)]}
    with pytest.raises(ValueError):
        index.write(TP, a, Entry(5, 5, 0))


def test_directory_round_trip(tmp_path: Path) -> None:
    _round_trip(open_side_index(str(tmp_path / "side"), {}))
    # One empty file per entry, under the partition's directory as rlmm names it.
    files = [p for p in (tmp_path / "side").rglob("*") if p.is_file()]
    assert len(files) == 4 and all(p.stat().st_size == 0 for p in files)


def test_entry_names_carry_everything_and_a_check(tmp_path: Path) -> None:
    segment = uuid.UUID(int=1)
    name = entry_name(segment, Entry(0, 4010, 1_700_000_000_000))
    assert name.startswith(f"{segment.hex}.0.4010.1700000000000.") and len(name) <= 104


def test_an_unusable_directory_is_a_side_index_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    index = SideIndex(str(blocker / "side"))
    with pytest.raises(SideIndexError, match="cannot write"):
        index.write(TP, uuid.uuid4(), Entry(0, 1, 0))
    with pytest.raises(SideIndexError, match="cannot list"):
        SideIndex(str(blocker)).read(TP)


@pytest.mark.s3
def test_s3_round_trip_with_the_remote_client_settings(s3_endpoint: str) -> None:
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket="rlmm-side")
    options = {"type": "aiven-s3", "endpoint_url": s3_endpoint, "region": "us-east-1"}
    index = open_side_index("s3://rlmm-side/side/index", options)
    try:
        _round_trip(index)
        keys = [o["Key"] for o in boto3.client("s3", endpoint_url=s3_endpoint).list_objects_v2(
            Bucket="rlmm-side")["Contents"]]  # fmt: skip
        assert all(k.startswith("side/index/orders-") for k in keys) and len(keys) == 4
    finally:
        index.close()
    missing = open_side_index("s3://no-such-bucket/x", options)
    try:
        with pytest.raises(SideIndexError, match="cannot list"):
            missing.read(TP)
        with pytest.raises(SideIndexError, match="cannot write"):
            missing.write(TP, uuid.uuid4(), Entry(0, 1, 0))
    finally:
        missing.close()
