"""The one S3 chokepoint: the shared boto3 client and ``S3Calls.call`` for every request.

Invariants: every S3 request of the backend goes through ``S3Calls.call`` (or
``S3Calls.read`` for response bodies), which logs the operation, key, status, retries
and duration (never bodies), lets botocore's adaptive retry mode absorb transient
errors, and translates the final error at the boundary: 404/NoSuchKey ->
RemoteResourceNotFoundError, 412 -> RemoteObjectExistsError, 416 -> InvalidRangeError,
5xx/throttling/timeouts/dropped connections -> RemoteStorageUnavailableError (retriable),
anything else -> RemoteStorageError; the botocore error is kept as ``__cause__``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, BinaryIO, Literal

import boto3
import botocore.session
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    HTTPClientError,
    IncompleteReadError,
    ResponseStreamingError,
)
from botocore.loaders import create_loader

from remote.errors import (
    InvalidRangeError,
    RemoteObjectExistsError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageUnavailableError,
)
from remote.streams import verifying_stream
from rlmm.errors import ConfigError

if TYPE_CHECKING:
    from botocore.config import _RetryDict
    from botocore.loaders import Loader
    from mypy_boto3_s3 import S3Client

log = logging.getLogger("remote.s3")

_NOT_FOUND = frozenset({"NoSuchKey", "NotFound", "404", "NoSuchUpload", "NoSuchBucket"})
_UNAVAILABLE = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "RequestTimeout",
        "ServiceUnavailable",
        "InternalError",
        "503",
        "500",
    }
)
# HTTPClientError covers ReadTimeoutError and ConnectionClosedError; ConnectionError
# covers EndpointConnectionError and ConnectTimeoutError.
_TRANSIENT_BOTOCORE = (
    HTTPClientError,
    ConnectionError,
    IncompleteReadError,
    ResponseStreamingError,
)


@dataclass(frozen=True, slots=True)
class S3ClientSettings:
    """How a client talks to S3 (validated by the backend that owns the client).

    The field names are the ``[remote]`` settings' names, so ``from_options`` reads
    them from those settings or from a backend constructor's arguments alike; the
    defaults are how a client talks to S3 unless the settings say otherwise (``S3_DEFAULTS``,
    which the backends' constructors take their defaults from).
    """

    endpoint_url: str | None = None
    region: str | None = None
    max_pool_connections: int = 4
    max_attempts: int = 8
    retry_mode: str = "adaptive"
    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    addressing_style: str | None = None
    # Explicit credentials or a named profile; None: boto3's default chain. Kept out of
    # repr so that no log or error message ever shows them.
    aws_access_key_id: str | None = field(default=None, repr=False)
    aws_secret_access_key: str | None = field(default=None, repr=False)
    aws_session_token: str | None = field(default=None, repr=False)
    profile: str | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, Any], **overrides: Any) -> S3ClientSettings:
        """The settings named in ``options`` (other keys are ignored), then ``overrides``;
        numbers coerced, as a TOML file may give ``read_timeout = 30``."""
        values = {f.name: options[f.name] for f in fields(cls) if f.name in options}
        values.update(overrides)
        settings = cls(**values)
        return replace(
            settings,
            max_pool_connections=int(settings.max_pool_connections),
            max_attempts=int(settings.max_attempts),
            retry_mode=str(settings.retry_mode),
            connect_timeout=float(settings.connect_timeout),
            read_timeout=float(settings.read_timeout),
        )


S3_DEFAULTS = S3ClientSettings()
# botocore's retry modes, by the name a setting gives
_RETRY_MODES: dict[str, Literal["legacy", "standard", "adaptive"]] = {
    "legacy": "legacy",
    "standard": "standard",
    "adaptive": "adaptive",
}


def make_client(settings: S3ClientSettings) -> S3Client:
    """One boto3 S3 client, shared by every thread of the manager (clients are thread-safe)."""
    s3_options: dict[str, Any] = {}
    if settings.addressing_style is not None:
        s3_options["addressing_style"] = settings.addressing_style
    mode = _RETRY_MODES.get(settings.retry_mode)
    if mode is None:
        raise ConfigError(f"s3 client: retry_mode={settings.retry_mode!r}")
    retries: _RetryDict = {
        "mode": mode,
        "total_max_attempts": settings.max_attempts,
    }
    config = Config(
        max_pool_connections=settings.max_pool_connections,
        retries=retries,
        connect_timeout=settings.connect_timeout,
        read_timeout=settings.read_timeout,
        s3=s3_options or None,  # type: ignore[arg-type]
    )
    # A fresh session per client (sessions are not thread-safe, and a fresh one picks up
    # current credentials and event handlers) sharing one data loader, which caches the
    # parsed service model: each further client costs ~50 ms instead of ~0.3 s.
    botocore_session = botocore.session.Session(profile=settings.profile)
    botocore_session.register_component("data_loader", _shared_loader())
    session = boto3.session.Session(botocore_session=botocore_session)
    return session.client(
        "s3",
        endpoint_url=settings.endpoint_url,
        region_name=settings.region,
        config=config,
        aws_access_key_id=settings.aws_access_key_id,
        aws_secret_access_key=settings.aws_secret_access_key,
        aws_session_token=settings.aws_session_token,
    )


_loader_lock = threading.Lock()
_loader: Loader | None = None


def _shared_loader() -> Loader:
    global _loader
    with _loader_lock:
        if _loader is None:
            _loader = create_loader()
        return _loader


class S3Calls:
    """Runs S3 operations against one bucket through the chokepoint (see module doc)."""

    def __init__(self, client: S3Client, bucket: str) -> None:
        self.client = client
        self.bucket = bucket

    def url(self, key: str | None) -> str:
        return f"s3://{self.bucket}/{key}" if key is not None else f"s3://{self.bucket}"

    def call(self, operation: str, key: str | None, **params: Any) -> dict[str, Any]:
        """``client.<operation>(Bucket=bucket, Key=key, **params)``, logged and translated."""
        if key is not None:
            params["Key"] = key
        started = time.perf_counter()
        try:
            response: dict[str, Any] = getattr(self.client, operation)(Bucket=self.bucket, **params)
        except (ClientError, BotoCoreError) as e:
            error = self.translate(operation, key, e)
            level = (
                logging.DEBUG
                if isinstance(error, RemoteResourceNotFoundError | RemoteObjectExistsError)
                else logging.WARNING
            )
            log.log(
                level,
                "s3 %s %s failed after %.1f ms: %s",
                operation,
                self.url(key),
                (time.perf_counter() - started) * 1000,
                e,
            )
            raise error from e
        meta = response.get("ResponseMetadata", {})
        log.debug(
            "s3 %s %s -> %s in %.1f ms (%s retries)",
            operation,
            self.url(key),
            meta.get("HTTPStatusCode"),
            (time.perf_counter() - started) * 1000,
            meta.get("RetryAttempts", 0),
        )
        return response

    def translate(self, operation: str, key: str | None, e: Exception) -> RemoteStorageError:
        """The project error for a botocore error raised by ``operation`` on ``key``."""
        where = f"{operation} {self.url(key)}"
        if isinstance(e, ClientError):
            err = e.response.get("Error", {})
            code = str(err.get("Code", ""))
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            detail = f"{where}: {code or status} {err.get('Message', '')}".rstrip()
            if code in _NOT_FOUND or status == 404:
                return RemoteResourceNotFoundError(f"not found: {detail}")
            if code == "PreconditionFailed" or status == 412:
                return RemoteObjectExistsError(f"object already exists: {detail}")
            if code == "InvalidRange" or status == 416:
                return InvalidRangeError(f"range not satisfiable: {detail}")
            if code in _UNAVAILABLE or (isinstance(status, int) and status >= 500):
                return RemoteStorageUnavailableError(
                    f"S3 unavailable (retries exhausted): {detail}"
                )
            return RemoteStorageError(f"S3 request failed: {detail}")
        if isinstance(e, _TRANSIENT_BOTOCORE):
            return RemoteStorageUnavailableError(
                f"S3 connection failed (retries exhausted): {where}: {e}"
            )
        return RemoteStorageError(f"S3 request failed: {where}: {e}")

    def delete_keys(self, keys: list[str]) -> None:
        """Batch-delete ``keys`` (DeleteObjects, up to 1000 a request); absent keys are fine.

        Per-key errors other than NoSuchKey raise one RemoteStorageError naming them all.
        """
        failures: list[str] = []
        for i in range(0, len(keys), 1000):
            batch = keys[i : i + 1000]
            response = self.call(
                "delete_objects",
                None,
                Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
            )
            for err in response.get("Errors", []):
                if err.get("Code") in _NOT_FOUND:
                    continue
                failures.append(f"{err.get('Key')}: {err.get('Code')} {err.get('Message', '')}")
        if failures:
            raise RemoteStorageError(
                f"DeleteObjects in s3://{self.bucket} failed for {len(failures)} key(s): "
                + "; ".join(failures)
            )

    def list_objects(self, prefix: str) -> Iterator[dict[str, Any]]:
        """Every object under ``prefix`` (ListObjectsV2, page by page), in key order."""
        params: dict[str, Any] = {"Prefix": prefix}
        while True:
            response = self.call("list_objects_v2", None, **params)
            yield from response.get("Contents", [])
            token = response.get("NextContinuationToken")
            if not response.get("IsTruncated") or not token:
                return
            params["ContinuationToken"] = token

    def list_multipart_uploads(self, prefix: str) -> Iterator[dict[str, Any]]:
        """Every open multipart upload under ``prefix`` (ListMultipartUploads, paged)."""
        params: dict[str, Any] = {"Prefix": prefix}
        while True:
            response = self.call("list_multipart_uploads", None, **params)
            yield from response.get("Uploads", [])
            if not response.get("IsTruncated"):
                return
            params["KeyMarker"] = response.get("NextKeyMarker", "")
            params["UploadIdMarker"] = response.get("NextUploadIdMarker", "")

    def open(self, key: str) -> BinaryIO:
        """The whole object ``key`` as a stream of exactly its length (unverified)."""
        response = self.call("get_object", key)
        body = response["Body"]
        return verifying_stream(
            self.url(key),
            body.read,
            body.close,
            int(response["ContentLength"]),
            None,
            self.reader_error(key),
        )

    def reader_error(self, key: str) -> Callable[[Exception], Exception]:
        """A translator for errors raised while streaming the body of ``key``."""

        def translate(e: Exception) -> Exception:
            if isinstance(e, ClientError | BotoCoreError):
                return self.translate("GetObject(body)", key, e)
            return RemoteStorageUnavailableError(f"reading {self.url(key)} failed: {e}")

        return translate


__all__ = [
    "S3_DEFAULTS",
    "S3Calls",
    "S3ClientSettings",
    "make_client",
]
