"""Fixtures for the RemoteStorageManager tests: segment files, metadata, every backend.

Invariant: ``backend`` yields a fresh, empty store per test (local dir, in-process moto,
or the moto server on loopback) and closes it afterwards; ``Backend`` gives tests raw
access (list keys, open uploads, tamper) that goes around the manager.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from remote.naming import ObjectKind
from remote.storage import LogSegmentData, RemoteStorageManager
from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)

BUCKET = "rlmm-tiered"
TOPIC_ID = uuid.UUID("069f530d-db89-4466-bd43-9ae5bc224ec6")  # Bp9TDduJRGa9Q5rlvCJOxg


def make_metadata(
    topic: str = "orders",
    partition: int = 0,
    start_offset: int = 1000,
    segment_id: uuid.UUID | None = None,
    size: int = 0,
    topic_id: uuid.UUID = TOPIC_ID,
) -> RemoteLogSegmentMetadata:
    # TopicIdPartition does not validate topic names (Kafka's layer above does), so
    # escaping names reach the storage manager, which must refuse them.
    tp = TopicIdPartition(topic_id, topic, partition)
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(tp, segment_id or uuid.uuid4()),
        start_offset=start_offset,
        end_offset=start_offset + 99,
        max_timestamp_ms=1_700_000_000_000,
        broker_id=1,
        event_timestamp_ms=1_700_000_000_000,
        segment_size_in_bytes=size,
        segment_leader_epochs={0: start_offset},
    )


def finished(metadata: RemoteLogSegmentMetadata, custom: bytes | None) -> RemoteLogSegmentMetadata:
    """The metadata as the RLMM holds it after the copy: FINISHED, with custom metadata."""
    return metadata.create_with_updates(
        RemoteLogSegmentMetadataUpdate(
            metadata.remote_log_segment_id,
            1_700_000_000_001,
            custom,
            RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
            1,
        )
    )


@dataclass
class SegmentFiles:
    data: LogSegmentData
    contents: dict[str, bytes]  # field name -> bytes written


def write_segment(
    directory: Path,
    log_size: int = 300_000,
    *,
    with_txn: bool = True,
    seed: int = 0,
    name: str = "00000000000000001000",
) -> SegmentFiles:
    """Segment-like files of random bytes (the storage layer does not parse them)."""
    directory.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(seed)

    def blob(n: int) -> bytes:
        return rnd.randbytes(n)

    contents = {
        "log_segment": blob(log_size),
        "offset_index": blob(4096),
        "time_index": blob(6144),
        "producer_snapshot_index": blob(222),
        "leader_epoch_index": b"0\n1\n0 1000\n",
    }
    if with_txn:
        contents["transaction_index"] = blob(340)
    suffix = {
        "log_segment": ".log",
        "offset_index": ".index",
        "time_index": ".timeindex",
        "producer_snapshot_index": ".snapshot",
        "transaction_index": ".txnindex",
    }
    paths: dict[str, Any] = {}
    for field_name, ext in suffix.items():
        if field_name not in contents:
            paths[field_name] = None
            continue
        path = directory / f"{name}{ext}"
        path.write_bytes(contents[field_name])
        paths[field_name] = path
    data = LogSegmentData(
        log_segment=paths["log_segment"],
        offset_index=paths["offset_index"],
        time_index=paths["time_index"],
        transaction_index=paths["transaction_index"],
        producer_snapshot_index=paths["producer_snapshot_index"],
        leader_epoch_index=contents["leader_epoch_index"],
    )
    return SegmentFiles(data, contents)


@dataclass
class Backend:
    name: str
    rsm: RemoteStorageManager
    list_keys: Callable[[], list[str]]
    open_uploads: Callable[[], list[str]]
    tamper: Callable[[RemoteLogSegmentMetadata, ObjectKind, bytes], None]


def _s3_backend(name: str, create_bucket: bool = True, **kwargs: Any) -> Backend:
    from remote.s3 import S3RemoteStorageManager

    kwargs.setdefault("prefix", "tiered/v1")
    rsm = S3RemoteStorageManager(BUCKET, region="us-east-1", **kwargs)
    client = rsm.client
    if create_bucket:
        client.create_bucket(Bucket=BUCKET)

    def list_keys() -> list[str]:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def open_uploads() -> list[str]:
        return [u["Key"] for u in client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])]

    def tamper(metadata: RemoteLogSegmentMetadata, kind: ObjectKind, data: bytes) -> None:
        key = rsm.key_of(metadata, kind)
        head = client.head_object(Bucket=BUCKET, Key=key)
        # Keep the stored CRC metadata: only the bytes change behind the manager's back.
        client.put_object(Bucket=BUCKET, Key=key, Body=data, Metadata=head["Metadata"])

    return Backend(name, rsm, list_keys, open_uploads, tamper)


def _local_backend(root: Path) -> Backend:
    from remote.local import LocalRemoteStorageManager

    rsm = LocalRemoteStorageManager(root)

    def list_keys() -> list[str]:
        return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())

    def tamper(metadata: RemoteLogSegmentMetadata, kind: ObjectKind, data: bytes) -> None:
        rsm.path_of(metadata, kind).write_bytes(data)

    return Backend("local", rsm, list_keys, lambda: [], tamper)


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def mock_s3(aws_env: None) -> Iterator[None]:
    from moto import mock_aws

    with mock_aws():
        yield


S3Factory = Callable[..., Backend]


@pytest.fixture
def s3_mock_factory(mock_s3: None) -> Iterator[S3Factory]:
    """Builds in-process moto S3 backends with the given manager options (closed after)."""
    made: list[Backend] = []

    def make(**kwargs: Any) -> Backend:
        made.append(_s3_backend("s3-mock", create_bucket=not made, **kwargs))
        return made[-1]

    yield make
    for b in made:
        b.rsm.close()


@pytest.fixture
def s3_server_factory(s3_endpoint: str) -> Iterator[S3Factory]:
    """Builds backends on the moto server (loopback HTTP) with the given options."""
    made: list[Backend] = []

    def make(**kwargs: Any) -> Backend:
        kwargs.setdefault("endpoint_url", s3_endpoint)
        made.append(_s3_backend("s3-server", create_bucket=not made, **kwargs))
        return made[-1]

    yield make
    for b in made:
        b.rsm.close()


@pytest.fixture(
    params=["local", "s3-mock", pytest.param("s3-server", marks=pytest.mark.s3)],
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "local":
        local = _local_backend(tmp_path / "remote")
        try:
            yield local
        finally:
            local.rsm.close()
    elif request.param == "s3-mock":
        yield request.getfixturevalue("s3_mock_factory")()
    else:
        yield request.getfixturevalue("s3_server_factory")()


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore retries without sleeping (throttling backoff starts at 1 s otherwise)."""
    from botocore.retries import standard

    monkeypatch.setattr(standard.ExponentialBackoff, "delay_amount", lambda self, ctx: 0)
