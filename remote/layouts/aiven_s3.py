"""AivenS3Layout: the objects of Aiven's tiered-storage plugin in S3, read as they are.

Per segment copy the plugin writes three objects under its ``key.prefix`` (a plain
string prefix, not a directory): ``<topic>-<topic_id>/<partition>/<start:020>-<segment_id>``
``.log`` (the log in chunks, see ``_aiven_manifest``), ``.indexes`` (every index back to
back) and ``.rsm-manifest`` (JSON). When the brokers include ``object_prefix`` /
``object_key`` in the segment's custom metadata, those win over the configured prefix.

Invariants: reads only (``delete_objects`` of names in that pattern aside); every
request goes through the one S3 chokepoint (``remote._s3_client``); a fetched range is
exactly the bytes asked for, every chunk checked against the chunk index; each error
names the object key; manifests (and their unwrapped data keys) are cached per
segment, at most ``_MANIFEST_CACHE`` of them.
"""

from __future__ import annotations

import collections
import contextlib
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from remote._s3_client import S3_DEFAULTS, S3Calls, S3ClientSettings, make_client
from remote.errors import (
    CorruptObjectError,
    MissingKeyMaterialError,
    RemoteIntegrityError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from remote.layouts import RemoteLayout, SegmentObject
from remote.layouts._aiven_manifest import (
    MAX_MANIFEST_BYTES,
    OBJECT_KEY,
    OBJECT_PREFIX,
    AivenManifest,
    Chunk,
    decode_custom_metadata,
    parse_manifest,
)
from remote.layouts._aiven_transforms import (
    decrypt,
    detransform_chunk,
    naming,
    unwrap_data_key,
)
from remote.naming import LOG_LABEL, ObjectName, SegmentNaming, index_label
from remote.registry import check_layout_matches
from remote.storage import IndexType, MultipartUpload, RemoteObject
from remote.streams import resolve_range, verifying_stream
from rlmm.errors import ConfigError
from rlmm.model import RemoteLogSegmentMetadata, TopicIdPartition

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

LOG, INDEXES, MANIFEST = "log", "indexes", "rsm-manifest"
NAMING = SegmentNaming({".log": LOG_LABEL, ".indexes": "indexes", ".rsm-manifest": "manifest"})
_MANIFEST_CACHE = 1024
# Our names for the bucket settings, and the plugin's where it has one.
_ALIASES = {
    "storage.s3.bucket.name": "bucket",
    "storage.s3.endpoint.url": "endpoint_url",
    "storage.s3.region": "region",
    "storage.aws.access.key.id": "aws_access_key_id",
    "storage.aws.secret.access.key": "aws_secret_access_key",
    "key.prefix": "key_prefix",
    "prefix": "key_prefix",
}
_OPTIONS = {
    "bucket", "endpoint_url", "region", "addressing_style", "aws_access_key_id",
    "aws_secret_access_key", "aws_session_token", "profile", "key_prefix", "max_attempts",
    "retry_mode", "connect_timeout", "read_timeout",
}  # fmt: skip
# The plugin's settings that only its writer uses: accepted, so that the brokers'
# rsm.config.* can be pasted as they are.
_WRITER_ONLY = re.compile(
    r"key\.prefix\.mask|chunk\.size|compression\.enabled|compression\.heuristic\.enabled"
    r"|encryption\.enabled|encryption\.key\.pair\.id|encryption\.key\.pairs"
    r"|encryption\.key\.pairs\.[^.]+\.public\.key\.file|storage\.backend\.class"
    r"|storage\.s3\.multipart\.upload\.part\.size"
    r"|upload\.rate\.limit\.bytes\.per\.second|custom\.metadata\.fields\.include"
    r"|fetch\..*|storage\.s3\.(api\.call|certificate|checksum|credentials|storage\.class).*"
)
_PRIVATE_KEY = re.compile(r"encryption\.key\.pairs\.(?P<id>[^.]+)\.private\.key\.file")


@dataclass(frozen=True)
class _Segment:
    """A decoded manifest, with its data key once unwrapped."""

    manifest: AivenManifest
    data_key: bytes | None


class AivenS3Layout(RemoteLayout):
    """Aiven's S3 layout under ``key_prefix`` in ``bucket`` (see the module doc)."""

    type_name = "aiven-s3"

    def __init__(
        self,
        bucket: str | None,
        key_prefix: str = "",
        *,
        private_key_files: Mapping[str, Path] | None = None,
        endpoint_url: str | None = None,
        region: str | None = None,
        addressing_style: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        profile: str | None = None,
        max_attempts: int = S3_DEFAULTS.max_attempts,
        retry_mode: str = S3_DEFAULTS.retry_mode,
        connect_timeout: float = S3_DEFAULTS.connect_timeout,
        read_timeout: float = S3_DEFAULTS.read_timeout,
    ) -> None:
        # The client's settings are this constructor's arguments of the same names.
        client = dict(locals())
        if not isinstance(bucket, str) or not bucket:
            raise ConfigError(
                "remote.type = 'aiven-s3' needs remote.bucket (or storage.s3.bucket.name)"
            )
        if "\x00" in key_prefix or ".." in key_prefix.split("/"):
            raise ConfigError(f"remote.key.prefix {key_prefix!r} is not a clean key prefix")
        self._bucket = bucket
        self._prefix = key_prefix
        self._private_key_files = dict(private_key_files or {})
        self._client = make_client(S3ClientSettings.from_options(client, max_pool_connections=8))
        self._calls = S3Calls(self._client, bucket)
        self._lock = threading.Lock()
        self._segments: collections.OrderedDict[str, _Segment] = collections.OrderedDict()
        self._closed = False

    @classmethod
    def known_options(cls) -> None:
        return None  # open-ended: the plugin's own property names, see check_options

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """ConfigError naming a ``[remote]`` setting this layout does not take."""
        cls._arguments(options)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> AivenS3Layout:
        """From ``[remote]`` settings: ours or the plugin's property names (see _ALIASES);
        the plugin's writer-only settings are accepted and ignored."""
        kwargs, keys = cls._arguments(options)
        bucket = kwargs.pop("bucket", None)
        return cls(bucket, private_key_files=keys, **kwargs)

    @classmethod
    def _arguments(cls, options: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Path]]:
        kwargs: dict[str, Any] = {}
        keys: dict[str, Path] = {}
        for key, value in options.items():
            if key == "type":
                continue
            private = _PRIVATE_KEY.fullmatch(key)
            if private is not None:
                keys[private["id"]] = Path(str(value))
                continue
            if key == "storage.s3.path.style.access.enabled":
                if str(value).lower() == "true":
                    kwargs.setdefault("addressing_style", "path")
                continue
            if _WRITER_ONLY.fullmatch(key):
                continue
            name = _ALIASES.get(key, key)
            if name not in _OPTIONS:
                known = sorted(_OPTIONS | set(_ALIASES))
                raise ConfigError(
                    f"unknown setting remote.{key} for remote.type = 'aiven-s3' (known: "
                    f"{', '.join(known)}, encryption.key.pairs.<id>.private.key.file and the"
                    " plugin's writer settings)"
                )
            kwargs[name] = value
        return kwargs, keys

    def __repr__(self) -> str:
        return f"AivenS3Layout(bucket={self._bucket!r}, key_prefix={self._prefix!r})"

    @property
    def client(self) -> S3Client:
        return self._client

    # --- naming -------------------------------------------------------------------------

    def partition_prefix(self, topic_id_partition: TopicIdPartition) -> str:
        return NAMING.partition_prefix(topic_id_partition)

    def _key(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
        """The object key, as the plugin builds it (custom metadata fields win)."""
        try:
            fields = decode_custom_metadata(metadata.custom_metadata)
        except ValueError:
            fields = {}
        prefix = fields.get(OBJECT_PREFIX) or self._prefix
        main = fields.get(OBJECT_KEY) or NAMING.base_name(metadata)
        return f"{prefix}{main}.{suffix}"

    def _name(self, key: str) -> str:
        return key[len(self._prefix) :] if key.startswith(self._prefix) else key

    def _name_of(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
        return self._name(self._key(metadata, suffix))

    def log_object_name(self, metadata: RemoteLogSegmentMetadata) -> str:
        return self._name_of(metadata, LOG)

    def index_object_name(self, metadata: RemoteLogSegmentMetadata, kind: IndexType) -> str:
        return self._name_of(metadata, INDEXES)

    def segment_object_names(self, metadata: RemoteLogSegmentMetadata) -> list[str]:
        return [self._name_of(metadata, s) for s in (LOG, INDEXES, MANIFEST)]

    def parse_object_name(self, name: str) -> ObjectName | None:
        return NAMING.parse(name)

    def segment_objects(self, metadata: RemoteLogSegmentMetadata) -> list[SegmentObject]:
        manifest = self._segment(metadata, need_key=False).manifest
        return [
            SegmentObject(
                self._name_of(metadata, LOG),
                LOG_LABEL,
                manifest.chunk_index.transformed_file_size,
                holds_log=manifest.log_stored_as_is,
            ),
            SegmentObject(
                self._name_of(metadata, INDEXES), "indexes", manifest.indexes_object_size
            ),
            SegmentObject(self._name_of(metadata, MANIFEST), "manifest"),
        ]

    # --- manifests ----------------------------------------------------------------------

    def _segment(self, metadata: RemoteLogSegmentMetadata, *, need_key: bool = True) -> _Segment:
        key = self._key(metadata, MANIFEST)
        with self._lock:
            cached = self._segments.get(key)
            if cached is not None:
                self._segments.move_to_end(key)
        if cached is None:
            cached = _Segment(self._read_manifest(metadata, key), None)
        if need_key and cached.manifest.encryption is not None and cached.data_key is None:
            cached = _Segment(cached.manifest, self._data_key(cached.manifest, key))
        with self._lock:
            self._segments[key] = cached
            while len(self._segments) > _MANIFEST_CACHE:
                self._segments.popitem(last=False)
        return cached

    def _read_manifest(self, metadata: RemoteLogSegmentMetadata, key: str) -> AivenManifest:
        self._check_open()
        try:
            data = self._get(key, max_bytes=MAX_MANIFEST_BYTES)
        except RemoteResourceNotFoundError as e:
            # A bucket in another layout says so (one line, naming an object).
            tp = metadata.topic_id_partition
            names = [o.name for o in self.list_objects(tp)]
            check_layout_matches(self, names)
            e.object_name = self._name(key)  # type: ignore[attr-defined]
            raise
        return parse_manifest(data, self._calls.url(key), self._name(key))

    def _data_key(self, manifest: AivenManifest, key: str) -> bytes:
        encryption = manifest.encryption
        assert encryption is not None
        setting = f"remote.encryption.key.pairs.{encryption.key_pair_id}.private.key.file"
        path = self._private_key_files.get(encryption.key_pair_id)
        if path is None:
            raise MissingKeyMaterialError(
                f"{self._calls.url(key)} is encrypted with key pair"
                f" {encryption.key_pair_id!r}: set {setting}"
            )
        try:
            pem = path.read_bytes()
        except OSError as e:
            raise MissingKeyMaterialError(f"cannot read {setting} = {path}: {e}") from e
        try:
            return unwrap_data_key(encryption.wrapped_data_key, pem)
        except ImportError as e:
            raise MissingKeyMaterialError(
                f"{self._calls.url(key)} is encrypted: reading it needs the cryptography"
                " library (pip install 'rlmm[encryption]')"
            ) from e
        except ValueError as e:
            raise RemoteIntegrityError(
                f"{self._calls.url(key)}: {setting} = {path}: {e}", object_name=self._name(key)
            ) from e

    # --- reading ------------------------------------------------------------------------

    def _get(
        self,
        key: str,
        first: int | None = None,
        last: int | None = None,
        *,
        max_bytes: int | None = None,
    ) -> bytes:
        """The object (or its bytes ``first..last``); with ``max_bytes``, a bigger one is a
        CorruptObjectError before any of it is read."""
        params: dict[str, Any] = {}
        if first is not None:
            params["Range"] = f"bytes={first}-{last}"
        response = self._calls.call("get_object", key, **params)
        body = response["Body"]
        length = response.get("ContentLength")
        try:
            if max_bytes is not None and isinstance(length, int) and length > max_bytes:
                raise self._too_big(key, f"{length} bytes, more", max_bytes)
            try:
                data: bytes = body.read() if max_bytes is None else body.read(max_bytes + 1)
            except Exception as e:
                raise self._calls.reader_error(key)(e) from e
        finally:
            body.close()
        if max_bytes is not None and len(data) > max_bytes:
            raise self._too_big(key, "more bytes", max_bytes)
        return data

    def _too_big(self, key: str, size: str, max_bytes: int) -> CorruptObjectError:
        return CorruptObjectError(
            self._calls.url(key),
            "object size",
            f"{size} than the {max_bytes} such an object may have",
            object_name=self._name(key),
        )

    def _open_log_range(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None
    ) -> BinaryIO:
        segment = self._segment(metadata)
        index = segment.manifest.chunk_index
        key = self._key(metadata, LOG)
        url = self._calls.url(key)
        start, length = resolve_range(url, index.original_file_size, start_position, end_position)
        chunks = index.chunks_for_range(start, start + length - 1) if length else ()
        pieces = self._chunks(metadata, segment, key, chunks, start, start + length)
        buffer = _Pieces(pieces)
        return verifying_stream(url, buffer.read, buffer.close, length, None, None)

    def _chunks(
        self,
        metadata: RemoteLogSegmentMetadata,
        segment: _Segment,
        key: str,
        chunks: Sequence[Chunk],
        start: int,
        end: int,
    ) -> Iterator[bytes | bytearray]:
        """The original bytes ``[start, end)``, chunk by chunk, from one ranged GET (the
        object's size checked against the chunk index before a chunk is read)."""
        if not chunks:
            return
        manifest = segment.manifest
        first = chunks[0].transformed_position
        last = chunks[-1].transformed_position + chunks[-1].transformed_size - 1
        name = self._name(key)
        response = self._calls.call("get_object", key, Range=f"bytes={first}-{last}")
        body = response["Body"]
        try:
            total = _object_size(response)
            expected = manifest.chunk_index.transformed_file_size
            if total != expected:
                has = "no Content-Range" if total is None else f"{total} bytes"
                raise CorruptObjectError(
                    self._calls.url(key),
                    "object size",
                    f"the object has {has}, its chunk index (in the manifest) says {expected}",
                    object_name=name,
                )
            aad = manifest.encryption.aad if manifest.encryption else None
            for chunk in chunks:
                try:
                    stored = body.read(chunk.transformed_size)
                except Exception as e:
                    raise self._calls.reader_error(key)(e) from e
                data = detransform_chunk(
                    stored,
                    chunk,
                    manifest.compression,
                    segment.data_key,
                    aad,
                    self._calls.url(key),
                    name,
                )
                lo = max(start - chunk.original_position, 0)
                hi = min(end - chunk.original_position, chunk.original_size)
                yield data if (lo, hi) == (0, len(data)) else data[lo:hi]
        finally:
            body.close()

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        kind = IndexType(index_type)
        segment = self._segment(metadata)
        where = segment.manifest.indexes.get(kind)
        key = self._key(metadata, INDEXES)
        if where is None:
            raise RemoteResourceNotFoundError(
                f"{index_label(kind)} of segment {metadata.remote_log_segment_id}: the manifest"
                f" {self._calls.url(self._key(metadata, MANIFEST))} records none"
            )
        if where.size == 0:
            return b""
        data = self._get(key, where.position, where.position + where.size - 1)
        name = self._name(key)
        if len(data) != where.size:
            raise CorruptObjectError(
                self._calls.url(key),
                index_label(kind),
                f"at byte {where.position} is {len(data)} of {where.size} bytes (the object is"
                " shorter than its manifest says)",
                object_name=name,
            )
        encryption = segment.manifest.encryption
        if encryption is not None and segment.data_key is not None:
            with naming(self._calls.url(key), name):
                data = decrypt(data, segment.data_key, encryption.aad, index_label(kind))
        return data

    # --- inventory ----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RemoteStorageError(f"{self!r} is closed")

    def list_objects(
        self, topic_id_partition: TopicIdPartition | None = None
    ) -> Iterator[RemoteObject]:
        self._check_open()
        below = "" if topic_id_partition is None else self.partition_prefix(topic_id_partition)
        for entry in self._calls.list_objects(self._prefix + below):
            yield RemoteObject(
                self._name(entry["Key"]),
                int(entry["Size"]),
                int(entry["LastModified"].timestamp() * 1000),
            )

    def open_object(self, name: str) -> BinaryIO:
        self._check_open()
        return self._calls.open(self._prefix + name)

    def _delete(self, names: list[str]) -> None:
        self._check_open()
        self._calls.delete_keys([self._prefix + name for name in names])
        with self._lock:
            for name in names:
                self._segments.pop(self._prefix + name, None)

    def list_multipart_uploads(self) -> list[MultipartUpload]:
        self._check_open()
        return [
            MultipartUpload(
                self._name(u["Key"]), u["UploadId"], int(u["Initiated"].timestamp() * 1000)
            )
            for u in self._calls.list_multipart_uploads(self._prefix)
        ]

    def abort_multipart_upload(self, upload: MultipartUpload) -> None:
        self._check_open()
        with contextlib.suppress(RemoteResourceNotFoundError):  # already gone: fine
            self._calls.call(
                "abort_multipart_upload", self._prefix + upload.name, UploadId=upload.upload_id
            )

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._segments.clear()
        self._client.close()


def _object_size(response: Mapping[str, Any]) -> int | None:
    """The whole object's size from a ranged GET's Content-Range (``bytes a-b/size``)."""
    text = str(response.get("ContentRange") or "")
    _, _, total = text.rpartition("/")
    return int(total) if total.isdigit() else None


class _Pieces:
    """``read(n)`` over an iterator of byte strings (the detransformed chunks)."""

    def __init__(self, pieces: Iterator[bytes | bytearray]) -> None:
        self._pieces = pieces
        self._current = memoryview(b"")

    def read(self, n: int) -> bytes:
        while not self._current:
            piece = next(self._pieces, None)
            if piece is None:
                return b""
            self._current = memoryview(piece)
        out, self._current = self._current[:n], self._current[n:]
        return bytes(out)

    def close(self) -> None:
        close = getattr(self._pieces, "close", None)
        if close is not None:
            close()


__all__ = ["AivenS3Layout"]
