"""S3RemoteStorageManager: segment copies as write-once objects in an S3 bucket.

Invariants: one boto3 client and one bounded thread pool per manager, shared by all
threads; every request goes through the ``remote._s3_client`` chokepoint; uploads
follow ``remote._s3_upload`` (write-once, CRC-32C per object and per part, cleanup on
failure); whole objects are verified against their stored CRC-32C on fetch, ranged
fetches are checked for length (and CRC when the range is the whole object).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import logging
import re
import threading
import warnings
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, BinaryIO

from remote._s3_client import S3_DEFAULTS, S3Calls, S3ClientSettings, make_client
from remote._s3_upload import CRC_METADATA_KEY, MIN_PART_SIZE, SegmentUploader, UploadSettings
from remote.errors import RemoteIntegrityError, RemoteResourceNotFoundError, RemoteStorageError
from remote.manifest import ObjectChecksum, SegmentManifest, verify_object
from remote.naming import (
    OBJECT_KINDS,
    ObjectKind,
    check_object_name,
    check_prefix,
    kind_label,
    object_name,
    partition_prefix,
    segment_base_name,
)
from remote.storage import (
    IndexType,
    LogSegmentData,
    MultipartUpload,
    RemoteObject,
    RemoteStorageManager,
)
from remote.streams import verifying_stream
from rlmm.errors import ConfigError
from rlmm.model import RemoteLogSegmentMetadata, TopicIdPartition

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = logging.getLogger("remote.s3")

_MiB = 1024 * 1024
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")
_SSE_MODES = (None, "AES256", "aws:kms")


def make_s3_client(options: Mapping[str, Any], *, max_pool_connections: int = 4) -> S3Client:
    """A boto3 S3 client set up as ``S3RemoteStorageManager(**options)`` sets up its own.

    ``options`` are the ``[remote]`` settings (``endpoint_url``, ``region``, retries,
    timeouts, ``addressing_style``; other keys are ignored): for other users of the
    same bucket, such as the S3 snapshot store.
    """
    return make_client(
        S3ClientSettings.from_options(options, max_pool_connections=max_pool_connections)
    )


def encryption_args(
    sse: str | None = None, sse_kms_key_id: str | None = None, bucket_key_enabled: bool = False
) -> dict[str, Any]:
    """The server-side encryption parameters of every PutObject / CreateMultipartUpload
    (SSE-S3 ``AES256``; SSE-KMS ``aws:kms`` with a key id or the bucket's default key, and
    the S3 Bucket Key option); ConfigError, naming the setting, for a bad combination."""
    if sse not in _SSE_MODES:
        raise ConfigError(f"s3 remote storage: sse={sse!r} (expected None, AES256 or aws:kms)")
    if sse_kms_key_id is not None and sse != "aws:kms":
        raise ConfigError("s3 remote storage: sse_kms_key_id needs sse='aws:kms'")
    if not isinstance(bucket_key_enabled, bool):
        raise ConfigError(
            f"s3 remote storage: bucket_key_enabled={bucket_key_enabled!r} is not a bool"
        )
    if bucket_key_enabled and sse != "aws:kms":
        raise ConfigError("s3 remote storage: bucket_key_enabled needs sse='aws:kms'")
    args: dict[str, Any] = {}
    if sse is not None:
        args["ServerSideEncryption"] = sse
    if sse_kms_key_id is not None:
        args["SSEKMSKeyId"] = sse_kms_key_id
    if bucket_key_enabled:
        args["BucketKeyEnabled"] = True
    return args


class S3RemoteStorageManager(RemoteStorageManager):
    """Stores segment copies under ``s3://<bucket>/<prefix>/`` (names: remote.naming).

    ``multipart_threshold``: objects larger than this go as multipart uploads of
    ``part_size`` parts (>= 5 MiB, S3's minimum), up to ``max_concurrency`` in flight
    (also the size of the client's connection pool, plus a few for concurrent
    fetches). ``sse``: None, ``"AES256"`` (SSE-S3) or ``"aws:kms"`` (SSE-KMS, with
    ``sse_kms_key_id`` or the bucket's default key). Retries: botocore's ``retry_mode``
    (adaptive: backoff plus client-side rate limiting on throttling) with
    ``max_attempts`` attempts per request; a call that still finds S3 unavailable then
    pauses every copy of the store (a one-attempt HeadBucket probes, with no body, when
    each pause has run out; pauses double from 0.5 s to 8 s) and is tried again, for up
    to ``copy_retry_s`` seconds, keeping what the copy already stored (0: no pause, and
    the copy fails at once, cleaning up); a copy given a ``cancelled`` event counts in
    that time only the pauses its own refusals began and S3 ended by answering the
    probe, not an outage or other copies' pauses. Credentials: boto3's default chain,
    or a named ``profile``, or ``aws_access_key_id`` / ``aws_secret_access_key`` (and
    ``aws_session_token``), which never appear in a repr, log line or error.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        multipart_threshold: int = 16 * _MiB,
        part_size: int = 8 * _MiB,
        max_concurrency: int = 8,
        sse: str | None = None,
        sse_kms_key_id: str | None = None,
        bucket_key_enabled: bool = False,
        max_attempts: int = S3_DEFAULTS.max_attempts,
        copy_retry_s: float = 30.0,
        retry_mode: str = S3_DEFAULTS.retry_mode,
        connect_timeout: float = S3_DEFAULTS.connect_timeout,
        read_timeout: float = S3_DEFAULTS.read_timeout,
        addressing_style: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        profile: str | None = None,
    ) -> None:
        # The client's settings are this constructor's arguments of the same names.
        client = dict(locals())
        if not isinstance(bucket, str) or not bucket:
            raise ConfigError("s3 remote storage: 'bucket' must be a non-empty string")
        if part_size < MIN_PART_SIZE:
            raise ConfigError(
                f"s3 remote storage: part_size={part_size} is below S3's minimum of "
                f"{MIN_PART_SIZE} bytes"
            )
        if multipart_threshold < 0:
            raise ConfigError(f"s3 remote storage: multipart_threshold={multipart_threshold} < 0")
        if max_concurrency < 1:
            raise ConfigError(f"s3 remote storage: max_concurrency={max_concurrency} < 1")
        if retry_mode not in ("adaptive", "standard", "legacy"):
            raise ConfigError(f"s3 remote storage: retry_mode={retry_mode!r}")
        if max_attempts < 1:
            raise ConfigError(f"s3 remote storage: max_attempts={max_attempts} < 1")
        if isinstance(copy_retry_s, bool) or not isinstance(copy_retry_s, int | float):
            raise ConfigError(f"s3 remote storage: copy_retry_s={copy_retry_s!r} is not seconds")
        if copy_retry_s < 0:
            raise ConfigError(f"s3 remote storage: copy_retry_s={copy_retry_s} < 0")
        self._bucket = bucket
        self._prefix = check_prefix(prefix)
        self._max_concurrency = max_concurrency
        object_args = encryption_args(sse, sse_kms_key_id, bucket_key_enabled)
        # Parts in flight plus headroom for fetches from other threads.
        settings = S3ClientSettings.from_options(client, max_pool_connections=max_concurrency + 4)
        self._client = make_client(settings)
        self._calls = S3Calls(self._client, bucket)
        # One attempt, no body: whether S3 answers again after a pause of the copies.
        self._probe_settings = replace(settings, max_attempts=1, max_pool_connections=1)
        self._probe_calls: S3Calls | None = None
        self._uploader = SegmentUploader(
            self._calls,
            self._get_pool,
            UploadSettings(multipart_threshold, part_size, object_args, float(copy_retry_s)),
            self._probe,
        )
        self._pool: cf.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def client(self) -> S3Client:
        """The shared boto3 client (for event hooks, metrics and tests; do not close it)."""
        return self._client

    @property
    def bucket(self) -> str:
        return self._bucket

    @property
    def prefix(self) -> str:
        return self._prefix

    def __repr__(self) -> str:
        return f"S3RemoteStorageManager(bucket={self._bucket!r}, prefix={self._prefix!r})"

    def key_of(self, metadata: RemoteLogSegmentMetadata, kind: ObjectKind) -> str:
        """The object key of one object of the segment copy."""
        return object_name(metadata, kind, self._prefix)

    def _get_pool(self) -> cf.ThreadPoolExecutor:
        with self._lock:
            if self._closed:
                raise RemoteStorageError(f"{self!r} is closed")
            if self._pool is None:
                self._pool = cf.ThreadPoolExecutor(
                    max_workers=self._max_concurrency, thread_name_prefix="rlmm-s3"
                )
            return self._pool

    def _check_open(self) -> None:
        if self._closed:
            raise RemoteStorageError(f"{self!r} is closed")

    # --- copy --------------------------------------------------------------------------

    def copy_log_segment_data(
        self,
        metadata: RemoteLogSegmentMetadata,
        segment_data: LogSegmentData,
        *,
        cancelled: threading.Event | None = None,
    ) -> bytes | None:
        self._check_open()
        segment_base_name(metadata)  # rejects an illegal topic before any request
        manifest = self._uploader.upload(
            segment_data, lambda kind: self.key_of(metadata, kind), cancelled
        )
        log.debug(
            "copied %s to %s",
            metadata.remote_log_segment_id,
            self._calls.url(self.key_of(metadata, None)),
        )
        return manifest.encode()

    # --- fetch -------------------------------------------------------------------------

    def _open_log_range(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None
    ) -> BinaryIO:
        self._check_open()
        key = self.key_of(metadata, None)
        params: dict[str, Any] = {}
        if start_position > 0 or end_position is not None:
            end = "" if end_position is None else str(end_position)
            params["Range"] = f"bytes={start_position}-{end}"
        try:
            response = self._calls.call("get_object", key, **params)
        except RemoteResourceNotFoundError as e:
            raise RemoteResourceNotFoundError(
                f"log segment of {metadata.remote_log_segment_id} not found: {e}"
            ) from e.__cause__
        body = response["Body"]
        length = int(response["ContentLength"])
        match = _CONTENT_RANGE.fullmatch(response.get("ContentRange") or "")
        if match is not None:
            first, total = int(match.group(1)), int(match.group(3))
        else:
            first, total = 0, length
        url = self._calls.url(key)
        expected_crc = None
        manifest = SegmentManifest.of(metadata)
        recorded = manifest.objects.get(None) if manifest is not None else None
        try:
            if recorded is not None and recorded.size != total:
                raise RemoteIntegrityError(
                    f"{url}: size {total} does not match {recorded.size} recorded in the manifest"
                )
            if first == 0 and length == total:
                expected_crc = self._stored_crc(url, response, recorded)
        except BaseException:
            body.close()
            raise
        return verifying_stream(
            url, body.read, body.close, length, expected_crc, self._calls.reader_error(key)
        )

    @staticmethod
    def _stored_crc(url: str, response: dict[str, Any], recorded: ObjectChecksum | None) -> int:
        stored = response.get("Metadata", {}).get(CRC_METADATA_KEY)
        if stored is None:
            if recorded is not None:
                return recorded.crc32c
            raise RemoteIntegrityError(f"{url}: no CRC-32C stored with the object to verify")
        try:
            crc = int(stored, 16)
        except ValueError as e:
            raise RemoteIntegrityError(f"{url}: stored CRC-32C {stored!r} is not hex") from e
        if recorded is not None and recorded.crc32c != crc:
            raise RemoteIntegrityError(
                f"{url}: stored CRC-32C {crc:08x} does not match {recorded.crc32c:08x} "
                "recorded in the manifest"
            )
        return crc

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        self._check_open()
        kind = IndexType(index_type)
        key = self.key_of(metadata, kind)
        manifest = SegmentManifest.of(metadata)
        if manifest is not None and kind not in manifest.objects:
            raise RemoteResourceNotFoundError(
                f"{kind_label(kind)} of segment {metadata.remote_log_segment_id} was not "
                f"copied (manifest): {self._calls.url(key)}"
            )
        try:
            response = self._calls.call("get_object", key)
        except RemoteResourceNotFoundError as e:
            raise RemoteResourceNotFoundError(
                f"{kind_label(kind)} of segment {metadata.remote_log_segment_id} not found: {e}"
            ) from e.__cause__
        url = self._calls.url(key)
        body = response["Body"]
        try:
            data: bytes = body.read()
        except Exception as e:
            raise self._calls.reader_error(key)(e) from e
        finally:
            body.close()
        recorded = manifest.objects.get(kind) if manifest is not None else None
        crc = self._stored_crc(url, response, recorded)
        verify_object(url, data, ObjectChecksum(len(data), crc), "object metadata")
        verify_object(url, data, recorded)
        return data

    # --- delete ------------------------------------------------------------------------

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        self._check_open()
        keys = [self.key_of(metadata, kind) for kind in OBJECT_KINDS]
        self._calls.delete_keys(keys)
        # A copy that crashed mid-upload leaves an open multipart upload: abort it too.
        base = keys[0].removesuffix(".log")
        response = self._calls.call("list_multipart_uploads", None, Prefix=base)
        for upload in response.get("Uploads", []):
            with contextlib.suppress(RemoteResourceNotFoundError):  # aborted concurrently
                self._calls.call(
                    "abort_multipart_upload", upload["Key"], UploadId=upload["UploadId"]
                )

    # --- inventory ----------------------------------------------------------------------

    def _key(self, name: str) -> str:
        name = check_object_name(name)
        return f"{self._prefix}/{name}" if self._prefix else name

    def _name(self, key: str) -> str:
        return key[len(self._prefix) + 1 :] if self._prefix else key

    def _list_prefix(self, topic_id_partition: TopicIdPartition | None) -> str:
        below = "" if topic_id_partition is None else partition_prefix(topic_id_partition)
        if self._prefix:
            return f"{self._prefix}/{below}"
        return below

    def list_objects(
        self, topic_id_partition: TopicIdPartition | None = None
    ) -> Iterator[RemoteObject]:
        self._check_open()
        for entry in self._calls.list_objects(self._list_prefix(topic_id_partition)):
            yield RemoteObject(
                self._name(entry["Key"]), int(entry["Size"]), _epoch_ms(entry["LastModified"])
            )

    def open_object(self, name: str) -> BinaryIO:
        self._check_open()
        return self._calls.open(self._key(name))

    def delete_objects(self, names: Iterable[str]) -> None:
        self._check_open()
        self._calls.delete_keys([self._key(name) for name in names])

    def list_multipart_uploads(self) -> list[MultipartUpload]:
        self._check_open()
        return [
            MultipartUpload(self._name(u["Key"]), u["UploadId"], _epoch_ms(u["Initiated"]))
            for u in self._calls.list_multipart_uploads(self._list_prefix(None))
        ]

    def abort_multipart_upload(self, upload: MultipartUpload) -> None:
        self._check_open()
        with contextlib.suppress(RemoteResourceNotFoundError):  # already gone: fine
            self._calls.call(
                "abort_multipart_upload", self._key(upload.name), UploadId=upload.upload_id
            )

    def paused_for_s(self) -> float:
        return self._uploader.pause.remaining_s()

    def paused_seconds(self) -> float:
        return self._uploader.pause.paused_s()

    @property
    def probe_client(self) -> S3Client:
        """The one-attempt client of the probes that end a pause (for tests and event
        hooks; do not close it). Made on first use."""
        return self._probe_calls_made().client

    def _probe(self) -> None:
        self._probe_calls_made().call("head_bucket", None)

    def _probe_calls_made(self) -> S3Calls:
        with self._lock:
            if self._closed:
                raise RemoteStorageError(f"{self!r} is closed")
            if self._probe_calls is None:
                self._probe_calls = S3Calls(make_client(self._probe_settings), self._bucket)
            return self._probe_calls

    # --- lifecycle ---------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pool, self._pool = self._pool, None
        self._uploader.stop()  # a copy waiting out S3's unavailability gives up now
        if pool is not None:
            pool.shutdown(wait=True)
        with self._lock:
            probe, self._probe_calls = self._probe_calls, None
        if probe is not None:
            probe.client.close()
        self._client.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            warnings.warn(f"unclosed {self!r}", ResourceWarning, stacklevel=1)


def _epoch_ms(value: datetime) -> int:
    return int(value.timestamp() * 1000)


__all__ = ["S3RemoteStorageManager", "encryption_args", "make_s3_client"]
