"""S3RemoteStorageManager specifics on in-process moto: multipart, SSE, checksums, deletes."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from botocore.awsrequest import AWSRequest, AWSResponse
from botocore.exceptions import ClientError, ReadTimeoutError

from remote import (
    IndexType,
    RemoteIntegrityError,
    RemoteObjectExistsError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageUnavailableError,
    SegmentManifest,
)
from remote._s3_client import S3Calls
from remote.errors import InvalidRangeError
from remote.manifest import crc32c_of
from remote.naming import OBJECT_KINDS
from remote.s3 import S3RemoteStorageManager
from rlmm.errors import ConfigError
from tests.remote.conftest import BUCKET, S3Factory, finished, make_metadata, write_segment

MiB = 1024 * 1024
MULTIPART = {"multipart_threshold": 5 * MiB, "part_size": 5 * MiB}


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Any:
        yield self._body


def xml_response(request: AWSRequest, status: int, body: str) -> AWSResponse:
    headers: Any = {"Content-Type": "application/xml"}
    return AWSResponse(str(request.url), status, headers, _Raw(body.encode()))


def test_large_segment_uses_parallel_multipart(s3_mock_factory: S3Factory, tmp_path: Path) -> None:
    b = s3_mock_factory(max_concurrency=4, **MULTIPART)
    seg = write_segment(tmp_path / "l", 17 * MiB)
    calls: dict[str, int] = {"UploadPart": 0, "PutObject": 0}
    inflight = [0, 0]  # now, max
    lock = threading.Lock()

    def count(request: AWSRequest, event_name: str, **_: Any) -> None:
        op = event_name.rsplit(".", 1)[-1]
        with lock:
            calls[op] += 1
            inflight[0] += 1
            inflight[1] = max(inflight[1], inflight[0])
        time.sleep(0.15)  # hold the slot so overlapping parts are observable
        with lock:
            inflight[0] -= 1

    b.rsm.client.meta.events.register("before-send.s3.UploadPart", count)  # type: ignore[attr-defined]
    b.rsm.client.meta.events.register("before-send.s3.PutObject", count)  # type: ignore[attr-defined]
    metadata = make_metadata()
    custom = b.rsm.copy_log_segment_data(metadata, seg.data)
    assert calls == {"UploadPart": 4, "PutObject": 5}
    assert inflight[1] >= 2, "parts and PUTs were not sent in parallel"
    head = b.rsm.client.head_object(Bucket=BUCKET, Key=b.rsm.key_of(metadata, None))  # type: ignore[attr-defined]
    assert head["ETag"].endswith('-4"')
    log = seg.contents["log_segment"]
    with b.rsm.fetch_log_segment(metadata, 0) as stream:
        assert stream.read() == log
    # A range across the boundary between part 1 and part 2.
    with b.rsm.fetch_log_segment(finished(metadata, custom), 5 * MiB - 10, 5 * MiB + 9) as stream:
        assert stream.read() == log[5 * MiB - 10 : 5 * MiB + 10]


def test_manifest_records_sizes_and_crcs(s3_mock_factory: S3Factory, tmp_path: Path) -> None:
    b = s3_mock_factory(**MULTIPART)
    seg = write_segment(tmp_path / "l", 6 * MiB)
    custom = b.rsm.copy_log_segment_data(make_metadata(), seg.data)
    assert custom is not None
    manifest = SegmentManifest.decode(custom)
    fields = [
        "log_segment",
        "offset_index",
        "time_index",
        "producer_snapshot_index",
        "transaction_index",
        "leader_epoch_index",
    ]
    for kind, field_name in zip(OBJECT_KINDS, fields, strict=True):
        data = seg.contents[field_name]
        assert manifest.objects[kind].size == len(data)
        assert manifest.objects[kind].crc32c == crc32c_of(data)
    # Random bytes are no Kafka log: the smallest timestamp is unknown (version 1) ...
    assert manifest.smallest_timestamp_ms is None
    # ... and the offloader's, from its CRC pass, is recorded as it is (version 2).
    known = dataclasses.replace(seg.data, smallest_timestamp_ms=1_700_000_000_000)
    custom = b.rsm.copy_log_segment_data(make_metadata(), known)
    assert custom is not None and len(custom) <= 128
    assert SegmentManifest.decode(custom).smallest_timestamp_ms == 1_700_000_000_000


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"sse": "AES256"}, {"ServerSideEncryption": "AES256"}),
        (
            {"sse": "aws:kms", "sse_kms_key_id": "alias/rlmm"},
            {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": "alias/rlmm"},
        ),
    ],
)
def test_sse_headers(
    s3_mock_factory: S3Factory, tmp_path: Path, options: dict[str, str], expected: dict[str, str]
) -> None:
    b = s3_mock_factory(**MULTIPART, **options)
    metadata = make_metadata()
    b.rsm.copy_log_segment_data(metadata, write_segment(tmp_path / "l", 6 * MiB).data)
    keys = b.list_keys()
    assert len(keys) == 6  # the multipart .log and five single PUTs
    for key in keys:
        head = b.rsm.client.head_object(Bucket=BUCKET, Key=key)  # type: ignore[attr-defined]
        assert {k: head.get(k) for k in expected} == expected, key


def test_write_requests_are_conditional_and_checksummed(
    s3_mock_factory: S3Factory, tmp_path: Path
) -> None:
    b = s3_mock_factory(**MULTIPART)
    seen: dict[str, list[dict[str, str]]] = {}

    def record(request: AWSRequest, event_name: str, **_: Any) -> None:
        headers = {k.lower(): v for k, v in request.headers.items()}
        seen.setdefault(event_name.rsplit(".", 1)[-1], []).append(
            {k: v.decode() if isinstance(v, bytes) else v for k, v in headers.items()}
        )

    b.rsm.client.meta.events.register("before-send.s3.*", record)  # type: ignore[attr-defined]
    seg = write_segment(tmp_path / "l", 6 * MiB)
    b.rsm.copy_log_segment_data(make_metadata(), seg.data)
    for put in seen["PutObject"]:
        assert put["if-none-match"] == "*"
        assert "x-amz-checksum-crc32c" in put
        assert len(put["x-amz-meta-crc32c"]) == 8
    assert all("x-amz-checksum-crc32c" in p for p in seen["UploadPart"])
    assert seen["CreateMultipartUpload"][0]["x-amz-meta-crc32c"] == (
        f"{crc32c_of(seg.contents['log_segment']):08x}"
    )
    assert seen["CompleteMultipartUpload"][0]["if-none-match"] == "*"


def test_integrity_checked_without_custom_metadata(
    s3_mock_factory: S3Factory, tmp_path: Path
) -> None:
    b = s3_mock_factory()
    seg = write_segment(tmp_path / "l")
    metadata = make_metadata()  # as at COPY_SEGMENT_STARTED: no custom metadata yet
    b.rsm.copy_log_segment_data(metadata, seg.data)
    b.tamper(metadata, IndexType.TIMESTAMP, seg.contents["time_index"][:-1] + b"\x00")
    with pytest.raises(RemoteIntegrityError, match=r"timeindex.*CRC-32C"):
        b.rsm.fetch_index(metadata, IndexType.TIMESTAMP)
    # An object replaced without our metadata cannot be verified: refused, not trusted.
    key = b.rsm.key_of(metadata, IndexType.OFFSET)  # type: ignore[attr-defined]
    b.rsm.client.put_object(Bucket=BUCKET, Key=key, Body=seg.contents["offset_index"])  # type: ignore[attr-defined]
    with pytest.raises(RemoteIntegrityError, match="no CRC-32C stored"):
        b.rsm.fetch_index(metadata, IndexType.OFFSET)


def test_truncated_object_is_detected_by_manifest(
    s3_mock_factory: S3Factory, tmp_path: Path
) -> None:
    b = s3_mock_factory()
    seg = write_segment(tmp_path / "l")
    metadata = make_metadata()
    meta = finished(metadata, b.rsm.copy_log_segment_data(metadata, seg.data))
    b.tamper(metadata, None, seg.contents["log_segment"][:1000])
    with pytest.raises(RemoteIntegrityError, match="size 1000"):
        b.rsm.fetch_log_segment(meta, 0, 10).close()


def test_lost_put_response_is_an_idempotent_retry(
    s3_mock_factory: S3Factory, tmp_path: Path
) -> None:
    # In-process moto still applies a request whose response the hook replaces: the PUT
    # lands, the client sees a 500 and retries, and the retry meets If-None-Match (412).
    b = s3_mock_factory(max_attempts=3)
    failed: list[str] = []

    def lose_first(request: AWSRequest, **_: Any) -> AWSResponse | None:
        if not failed:
            failed.append(str(request.url))
            return xml_response(request, 500, "<Error><Code>InternalError</Code></Error>")
        return None

    b.rsm.client.meta.events.register("before-send.s3.PutObject", lose_first)  # type: ignore[attr-defined]
    seg = write_segment(tmp_path / "l")
    metadata = make_metadata()
    b.rsm.copy_log_segment_data(metadata, seg.data)
    assert failed and len(b.list_keys()) == 6
    assert b.rsm.fetch_index(metadata, IndexType.OFFSET) == seg.contents["offset_index"]


def test_multipart_write_once(s3_mock_factory: S3Factory, tmp_path: Path) -> None:
    b = s3_mock_factory(**MULTIPART)
    seg = write_segment(tmp_path / "a", 11 * MiB, seed=1)
    metadata = make_metadata()
    first = b.rsm.copy_log_segment_data(metadata, seg.data)
    assert b.rsm.copy_log_segment_data(metadata, seg.data) == first
    other = write_segment(tmp_path / "b", 11 * MiB, seed=2)
    with pytest.raises(RemoteObjectExistsError, match=r"\.log|\.index"):
        b.rsm.copy_log_segment_data(metadata, other.data)
    assert b.open_uploads() == []
    assert len(b.list_keys()) == 6
    with b.rsm.fetch_log_segment(metadata, 0) as stream:
        assert stream.read() == seg.contents["log_segment"]


def test_delete_aborts_a_crashed_copys_multipart_upload(
    s3_mock_factory: S3Factory, tmp_path: Path
) -> None:
    b = s3_mock_factory()
    metadata = make_metadata()
    client = b.rsm.client  # type: ignore[attr-defined]
    key = b.rsm.key_of(metadata, None)  # type: ignore[attr-defined]
    # What a broker that died mid-upload leaves behind: an open upload with one part.
    upload = client.create_multipart_upload(Bucket=BUCKET, Key=key)
    client.upload_part(
        Bucket=BUCKET, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=b"x" * 100
    )
    other = make_metadata(start_offset=5000)
    client.create_multipart_upload(Bucket=BUCKET, Key=b.rsm.key_of(other, None))  # type: ignore[attr-defined]
    b.rsm.delete_log_segment_data(metadata)
    assert b.open_uploads() == [b.rsm.key_of(other, None)]  # type: ignore[attr-defined]


def test_delete_objects_reports_per_key_errors(s3_mock_factory: S3Factory) -> None:
    b = s3_mock_factory()
    metadata = make_metadata()
    denied = b.rsm.key_of(metadata, IndexType.OFFSET)  # type: ignore[attr-defined]

    def partial(request: AWSRequest, **_: Any) -> AWSResponse:
        return xml_response(
            request,
            200,
            "<DeleteResult>"
            f"<Error><Key>{denied}</Key><Code>AccessDenied</Code><Message>no</Message></Error>"
            "<Error><Key>gone</Key><Code>NoSuchKey</Code><Message>x</Message></Error>"
            "</DeleteResult>",
        )

    b.rsm.client.meta.events.register("before-send.s3.DeleteObjects", partial)  # type: ignore[attr-defined]
    with pytest.raises(RemoteStorageError, match=r"1 key\(s\).*\.index: AccessDenied") as info:
        b.rsm.delete_log_segment_data(metadata)
    assert not info.value.retriable


def test_unknown_bucket(mock_s3: None) -> None:
    with (
        S3RemoteStorageManager("no-such-bucket", region="us-east-1") as rsm,
        pytest.raises(RemoteResourceNotFoundError, match="no-such-bucket"),
    ):
        rsm.fetch_index(make_metadata(), IndexType.OFFSET)


def test_read_timeout_is_retried(s3_mock_factory: S3Factory, tmp_path: Path) -> None:
    b = s3_mock_factory(max_attempts=3)
    seg = write_segment(tmp_path / "l")
    metadata = make_metadata()
    b.rsm.copy_log_segment_data(metadata, seg.data)
    failures = [0]

    def timeout_once(request: AWSRequest, **_: Any) -> None:
        if failures[0] == 0:
            failures[0] += 1
            raise ReadTimeoutError(endpoint_url=str(request.url))

    b.rsm.client.meta.events.register("before-send.s3.GetObject", timeout_once)  # type: ignore[attr-defined]
    assert b.rsm.fetch_index(metadata, IndexType.OFFSET) == seg.contents["offset_index"]
    assert failures == [1]


def _client_error(code: str, status: int) -> ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": "m"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, "GetObject")


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("NoSuchKey", 404, RemoteResourceNotFoundError),
        ("404", 404, RemoteResourceNotFoundError),
        ("NoSuchBucket", 404, RemoteResourceNotFoundError),
        ("PreconditionFailed", 412, RemoteObjectExistsError),
        ("InvalidRange", 416, InvalidRangeError),
        ("SlowDown", 503, RemoteStorageUnavailableError),
        ("InternalError", 500, RemoteStorageUnavailableError),
        ("AccessDenied", 403, RemoteStorageError),
    ],
)
def test_error_translation(code: str, status: int, expected: type[Exception]) -> None:
    error = S3Calls(None, "bkt").translate("get_object", "a/b.log", _client_error(code, status))  # type: ignore[arg-type]
    assert type(error) is expected
    assert "s3://bkt/a/b.log" in str(error)
    assert error.retriable == (expected is RemoteStorageUnavailableError)


@pytest.mark.parametrize(
    "options",
    [
        {"part_size": 1024},
        {"sse": "aes"},
        {"sse_kms_key_id": "k"},
        {"max_concurrency": 0},
        {"retry_mode": "sometimes"},
        {"prefix": "a/../b"},
    ],
)
def test_bad_options_are_config_errors(aws_env: None, options: dict[str, Any]) -> None:
    with pytest.raises((ConfigError, RemoteStorageError)):
        S3RemoteStorageManager("bkt", **options).close()


@pytest.mark.parametrize("value", [-1, "30", True])
def test_a_bad_copy_retry_s_is_a_config_error_naming_it(aws_env: None, value: object) -> None:
    with pytest.raises(ConfigError, match="copy_retry_s"):
        S3RemoteStorageManager("bkt", copy_retry_s=value).close()  # type: ignore[arg-type]


def test_calls_are_logged_without_bodies(
    s3_mock_factory: S3Factory, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    b = s3_mock_factory()
    seg = write_segment(tmp_path / "l", 1000)
    metadata = make_metadata()
    with caplog.at_level(logging.DEBUG, logger="remote.s3"):
        b.rsm.copy_log_segment_data(metadata, seg.data)
    lines = [r.getMessage() for r in caplog.records if r.name == "remote.s3"]
    assert any(
        "put_object" in line and b.rsm.key_of(metadata, None) in line  # type: ignore[attr-defined]
        for line in lines
    )
    assert not any(repr(seg.contents["log_segment"][:16])[2:-1] in line for line in lines)


def test_failed_write_with_unknown_outcome_is_cleaned_up(
    s3_mock_factory: S3Factory, tmp_path: Path
) -> None:
    # In-process moto applies each PUT the hook answers with 500: the object lands while
    # the client only sees errors. The failed copy must still leave nothing behind.
    b = s3_mock_factory(max_attempts=2, retry_mode="standard")

    def lose_txn(request: AWSRequest, **_: Any) -> AWSResponse | None:
        if ".txnindex" in str(request.url):
            return xml_response(request, 500, "<Error><Code>InternalError</Code></Error>")
        return None

    b.rsm.client.meta.events.register("before-send.s3.PutObject", lose_txn)  # type: ignore[attr-defined]
    with pytest.raises(RemoteStorageUnavailableError, match=r"\.txnindex"):
        b.rsm.copy_log_segment_data(make_metadata(), write_segment(tmp_path / "l").data)
    assert b.list_keys() == []
