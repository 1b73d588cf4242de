"""S3SnapshotStore specifics on the moto server: write-once keys, layout, errors."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from snapshot import Snapshot, SnapshotStoreError, encode_snapshot
from snapshot.s3 import S3SnapshotStore

pytestmark = pytest.mark.s3

BUCKET = "snaps"


def snap(i: int) -> Snapshot:
    return Snapshot(4, {0: i}, {"i": i}, 1_700_000_000_000 + i)


@pytest.fixture
def client(s3_endpoint: str) -> Iterator[Any]:
    c = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    c.create_bucket(Bucket=BUCKET)
    try:
        yield c
    finally:
        c.close()


def keys(client: Any) -> list[str]:
    return sorted(o["Key"] for o in client.list_objects_v2(Bucket=BUCKET).get("Contents", []))


def test_an_existing_object_is_never_overwritten(client: Any) -> None:
    store = S3SnapshotStore(client, BUCKET, owner="broker-3")
    store.write(snap(1))
    # Another writer with the same owner (a misconfiguration) takes seq 2 first.
    raced = store.key_for(2)
    client.put_object(Bucket=BUCKET, Key=raced, Body=encode_snapshot(snap(99)), IfNoneMatch="*")
    store._last_seq = 1  # as if it listed before the race
    store._own_entries = lambda: []  # type: ignore[method-assign]  # a stale listing
    location = store.write(snap(2))
    assert location.endswith("snapshot-00000000000000000003.rlmm")
    body = client.get_object(Bucket=BUCKET, Key=raced)["Body"].read()
    assert body == encode_snapshot(snap(99))  # untouched


def test_layout_beside_segments_and_foreign_keys_ignored(client: Any) -> None:
    client.put_object(Bucket=BUCKET, Key="p/__snapshots/broker-0/notes.txt", Body=b"x")
    client.put_object(Bucket=BUCKET, Key="p/topic-abc/0/seg.log", Body=b"x")
    store = S3SnapshotStore(client, BUCKET, "/p/", owner="broker-0")
    store.write(snap(1))
    assert "p/__snapshots/broker-0/snapshot-00000000000000000001.rlmm" in keys(client)
    assert store.load_latest() == snap(1)
    assert store.owners() == ["broker-0"]
    assert "p/__snapshots/broker-0/notes.txt" in keys(client)  # not ours to prune


def test_missing_bucket_is_a_clear_error(client: Any) -> None:
    store = S3SnapshotStore(client, "no-such-bucket", owner="broker-0")
    with pytest.raises(SnapshotStoreError, match="no-such-bucket"):
        store.write(snap(1))
    with pytest.raises(SnapshotStoreError, match="no-such-bucket"):
        store.load_latest()


def test_close_closes_only_an_owned_client(s3_endpoint: str) -> None:
    c = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    c.create_bucket(Bucket=BUCKET)
    shared = S3SnapshotStore(c, BUCKET)
    shared.close()
    shared.close()
    assert c.list_buckets()["Buckets"]  # still usable
    owned = S3SnapshotStore(c, BUCKET, close_client=True)
    owned.close()
    with pytest.raises(SnapshotStoreError, match="closed"):
        owned.kept()
