"""The RemoteStorageManager contract (Kafka's, in snake_case) and what every backend shares.

Holds the ABC, ``LogSegmentData``, ``IndexType``, the object layout, the compact
custom-metadata manifest returned by a copy, the verifying stream returned by
``fetch_log_segment`` and the ``load_remote_storage_manager`` factory.

Invariants:
- every backend stores one segment copy as write-once objects named
  ``<prefix>/<topic>-<topic_id>/<partition>/<start_offset:020>-<segment_id>.<suffix>``;
  a topic name that could leave the root raises InvalidRemotePathError before any I/O;
- a stream never hands out more or fewer bytes than the object holds for the range
  without raising: a short object is a RemoteIntegrityError, and a read of the whole
  object is checked against the CRC-32C recorded when it was written;
- the listing methods (``list_objects``, ``open_object``, ``delete_objects``,
  ``list_multipart_uploads``) name objects relative to the root or prefix, exactly as
  ``object_name`` does, so an inventory can be compared with the metadata;
- ``SegmentManifest.decode`` reads bytes anyone who can produce to the metadata log
  chooses: bounded in size, every length checked against them, every value against its
  type's range; anything else is a CorruptObjectError naming the field.
"""

from __future__ import annotations

import abc
import enum
import io
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import crc32c
import msgpack

from remote.errors import (
    CorruptObjectError,
    InvalidRangeError,
    InvalidRemotePathError,
    RemoteIntegrityError,
    RemoteStorageError,
)
from rlmm.errors import ConfigError
from rlmm.model import RemoteLogSegmentMetadata, TopicIdPartition, kafka_uuid_to_str

log = logging.getLogger(__name__)


class IndexType(enum.IntEnum):
    """Kafka's RemoteStorageManager.IndexType (values are Kafka's enum ordinals)."""

    OFFSET = 0
    TIMESTAMP = 1
    PRODUCER_SNAPSHOT = 2
    TRANSACTION = 3
    LEADER_EPOCH = 4


@dataclass(frozen=True, slots=True)
class LogSegmentData:
    """The local files of one rolled segment, as Kafka hands them to copyLogSegmentData.

    Paths for the segment and its indexes; the leader epoch checkpoint comes as bytes
    (Kafka passes a ByteBuffer holding only the epochs up to the segment's end).
    """

    log_segment: Path
    offset_index: Path
    time_index: Path
    transaction_index: Path | None
    producer_snapshot_index: Path
    leader_epoch_index: bytes

    def __post_init__(self) -> None:
        for name in ("log_segment", "offset_index", "time_index", "producer_snapshot_index"):
            object.__setattr__(self, name, _as_path(name, getattr(self, name)))
        if self.transaction_index is not None:
            object.__setattr__(
                self, "transaction_index", _as_path("transaction_index", self.transaction_index)
            )
        if not isinstance(self.leader_epoch_index, bytes | bytearray | memoryview):
            raise TypeError("leader_epoch_index must be bytes")
        object.__setattr__(self, "leader_epoch_index", bytes(self.leader_epoch_index))

    def source(self, kind: IndexType | None) -> Path | bytes | None:
        """The file (or bytes) holding ``kind``; None is the log segment itself."""
        if kind is None:
            return self.log_segment
        return {
            IndexType.OFFSET: self.offset_index,
            IndexType.TIMESTAMP: self.time_index,
            IndexType.PRODUCER_SNAPSHOT: self.producer_snapshot_index,
            IndexType.TRANSACTION: self.transaction_index,
            IndexType.LEADER_EPOCH: self.leader_epoch_index,
        }[kind]


def _as_path(name: str, value: object) -> Path:
    if isinstance(value, Path):
        return value
    if isinstance(value, str):
        return Path(value)
    raise TypeError(f"{name} must be a pathlib.Path, got {type(value).__name__}")


# --- object layout -------------------------------------------------------------------

ObjectKind = IndexType | None
"""What one stored object holds: an index type, or None for the log segment."""

OBJECT_KINDS: tuple[ObjectKind, ...] = (
    None,
    IndexType.OFFSET,
    IndexType.TIMESTAMP,
    IndexType.PRODUCER_SNAPSHOT,
    IndexType.TRANSACTION,
    IndexType.LEADER_EPOCH,
)
"""Every object of a segment copy, in manifest order (log first)."""

SUFFIXES: Mapping[ObjectKind, str] = {
    None: ".log",
    IndexType.OFFSET: ".index",
    IndexType.TIMESTAMP: ".timeindex",
    IndexType.PRODUCER_SNAPSHOT: ".snapshot",
    IndexType.TRANSACTION: ".txnindex",
    IndexType.LEADER_EPOCH: ".leader-epoch-checkpoint",
}

# Kafka's legal topic characters (Topic.LEGAL_CHARS) and length; "." and ".." are illegal.
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def check_topic_name(topic: str) -> str:
    """Return ``topic`` if it is a legal Kafka topic name, else raise InvalidRemotePathError."""
    if not isinstance(topic, str) or not _LEGAL_TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise InvalidRemotePathError(
            f"topic name {topic!r} is not a legal Kafka topic name and could escape the "
            "remote storage root (allowed: 1-249 of [a-zA-Z0-9._-], not '.' or '..')"
        )
    return topic


def check_prefix(prefix: str) -> str:
    """Normalise a key prefix (no leading/trailing '/'); reject '..', '.', NUL and '//'."""
    cleaned = prefix.strip("/")
    if "\x00" in cleaned or any(p in ("", ".", "..") for p in cleaned.split("/") if cleaned):
        raise InvalidRemotePathError(f"remote storage prefix {prefix!r} is not a clean path")
    return cleaned


def check_object_name(name: str) -> str:
    """Return ``name`` if it is a clean relative object name (no '..', '.', '//', NUL)."""
    if not isinstance(name, str) or not name or check_prefix(name) != name:
        raise InvalidRemotePathError(f"object name {name!r} is not a clean relative path")
    return name


def segment_base_name(metadata: RemoteLogSegmentMetadata) -> str:
    """``<topic>-<topic_id>/<partition>/<start_offset:020>-<segment_id>`` (no suffix)."""
    segment_id = metadata.remote_log_segment_id
    tp = segment_id.topic_id_partition
    topic = check_topic_name(tp.topic)
    return (
        f"{topic}-{kafka_uuid_to_str(tp.topic_id)}/{tp.partition}/"
        f"{metadata.start_offset:020d}-{kafka_uuid_to_str(segment_id.id)}"
    )


def object_name(metadata: RemoteLogSegmentMetadata, kind: ObjectKind, prefix: str = "") -> str:
    """The key (or root-relative path) of one object of ``metadata``'s segment copy."""
    name = segment_base_name(metadata) + SUFFIXES[kind]
    return f"{prefix}/{name}" if prefix else name


def partition_prefix(tp: TopicIdPartition) -> str:
    """``<topic>-<topic_id>/<partition>/``: the names of every object of one partition."""
    return f"{check_topic_name(tp.topic)}-{kafka_uuid_to_str(tp.topic_id)}/{tp.partition}/"


# <topic>-<topic_id 22 chars>/<partition>/[.]<start:020>-<segment_id 22 chars><suffix>[...]
_OBJECT_NAME = re.compile(
    r"(?P<topic>[a-zA-Z0-9._-]{1,249})-(?P<topic_id>[A-Za-z0-9_-]{22})/(?P<partition>\d+)/"
    r"(?P<temp>\.)?(?P<start_offset>\d{20})-(?P<segment_id>[A-Za-z0-9_-]{22})"
    r"(?P<suffix>\.[a-z-]+)(?P<rest>.*)"
)


@dataclass(frozen=True, slots=True)
class ObjectName:
    """The parts of an object name in the layout of ``object_name``."""

    topic: str
    topic_id: str
    partition: int
    start_offset: int
    segment_id: str
    kind: ObjectKind
    temporary: bool  # a temp file of a copy that never published (local backend)


_KIND_OF_SUFFIX = {suffix: kind for kind, suffix in SUFFIXES.items()}


def parse_object_name(name: str) -> ObjectName | None:
    """Split ``name`` (relative to the root or prefix); None if it is not in our layout."""
    match = _OBJECT_NAME.fullmatch(name)
    if match is None or match["suffix"] not in _KIND_OF_SUFFIX:
        return None
    temporary = match["temp"] is not None
    if temporary != bool(match["rest"]):
        return None
    return ObjectName(
        topic=match["topic"],
        topic_id=match["topic_id"],
        partition=int(match["partition"]),
        start_offset=int(match["start_offset"]),
        segment_id=match["segment_id"],
        kind=_KIND_OF_SUFFIX[match["suffix"]],
        temporary=temporary,
    )


def kind_label(kind: ObjectKind) -> str:
    return "log segment" if kind is None else f"{kind.name} index"


# --- custom metadata: the manifest of a copy ------------------------------------------

_MANIFEST_VERSION = 1
MAX_ENCODED_MANIFEST_BYTES = 4096  # about 70 bytes; Kafka's default cap on custom metadata is 128


@dataclass(frozen=True, slots=True)
class ObjectChecksum:
    """Size and CRC-32C (Castagnoli) of one stored object."""

    size: int
    crc32c: int


@dataclass(frozen=True, slots=True)
class SegmentManifest:
    """What a reader needs to verify a segment copy: size and CRC-32C per object.

    Encoded as the copy's custom metadata: msgpack ``[1, [[size, crc] | nil] * 6]`` in
    OBJECT_KINDS order, about 70 bytes, under Kafka's default
    ``remote.log.metadata.custom.metadata.max.bytes`` (128).
    """

    objects: Mapping[ObjectKind, ObjectChecksum]

    def encode(self) -> bytes:
        entries = []
        for kind in OBJECT_KINDS:
            entry = self.objects.get(kind)
            entries.append(None if entry is None else [entry.size, entry.crc32c])
        return bytes(msgpack.packb([_MANIFEST_VERSION, entries]))

    @classmethod
    def decode(cls, data: bytes, name: str = "<custom metadata>") -> SegmentManifest:
        """Parse a manifest; CorruptObjectError (a ValueError) naming ``name`` and the
        field when ``data`` is not one of a known version.

        The bytes come from the metadata log, which anyone who can produce to it fills:
        at most ``MAX_ENCODED_MANIFEST_BYTES``, msgpack told that no length exceeds them,
        every size an int64 and every CRC a uint32."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise CorruptObjectError(name, "manifest", f"a {type(data).__name__}, not bytes")
        if len(data) > MAX_ENCODED_MANIFEST_BYTES:
            raise CorruptObjectError(
                name, "manifest", f"{len(data)} bytes, more than {MAX_ENCODED_MANIFEST_BYTES}"
            )
        limit = len(data)
        try:
            decoded = msgpack.unpackb(
                data,
                max_str_len=limit,
                max_bin_len=limit,
                max_array_len=limit,
                max_map_len=limit // 2,
                max_ext_len=0,
            )
        except (ValueError, TypeError, msgpack.UnpackException) as e:
            raise CorruptObjectError(name, "manifest", f"not msgpack: {e}") from e
        if not isinstance(decoded, list) or len(decoded) != 2:
            raise CorruptObjectError(name, "manifest", "not a [version, entries] array")
        version, entries = decoded
        if type(version) is not int or version != _MANIFEST_VERSION:
            raise CorruptObjectError(
                name, "version", f"unknown segment manifest version {version!r}"
            )
        if not isinstance(entries, list) or len(entries) != len(OBJECT_KINDS):
            count = len(entries) if isinstance(entries, list) else type(entries).__name__
            raise CorruptObjectError(name, "entries", f"{count} entries, expected 6")
        objects: dict[ObjectKind, ObjectChecksum] = {}
        for kind, entry in zip(OBJECT_KINDS, entries, strict=True):
            if entry is None:
                continue
            if (
                not isinstance(entry, list)
                or len(entry) != 2
                or not all(type(v) is int for v in entry)
                or not (0 <= entry[0] < 2**63 and 0 <= entry[1] < 2**32)
            ):
                raise CorruptObjectError(
                    name,
                    f"{kind_label(kind)} entry",
                    f"{entry!r:.60} is not [size (int64 >= 0), CRC-32C (uint32)]",
                )
            objects[kind] = ObjectChecksum(entry[0], entry[1])
        return cls(objects)

    @classmethod
    def of(cls, metadata: RemoteLogSegmentMetadata) -> SegmentManifest | None:
        """The manifest in ``metadata.custom_metadata``, or None when absent or foreign."""
        if metadata.custom_metadata is None:
            return None
        try:
            return cls.decode(metadata.custom_metadata)
        except ValueError as e:
            # Another plugin's custom metadata: nothing to verify against, not an error.
            log.debug("custom metadata of %s is not ours: %s", metadata.remote_log_segment_id, e)
            return None


def crc32c_of(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    return int(crc32c.crc32c(data, value=value))


def verify_object(
    name: str, data: bytes, expected: ObjectChecksum | None, what: str = "manifest"
) -> None:
    """Raise RemoteIntegrityError naming ``name`` when ``data`` does not match ``expected``."""
    if expected is None:
        return
    if len(data) != expected.size:
        raise RemoteIntegrityError(
            f"{name}: size {len(data)} does not match {expected.size} recorded in the {what}"
        )
    actual = crc32c_of(data)
    if actual != expected.crc32c:
        raise RemoteIntegrityError(
            f"{name}: CRC-32C {actual:08x} does not match {expected.crc32c:08x} "
            f"recorded in the {what}"
        )


# --- byte ranges and the verifying stream ----------------------------------------------


def check_range(
    metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None
) -> None:
    """Validate a fetch range (``end_position`` inclusive, like Kafka's)."""
    if isinstance(start_position, bool) or not isinstance(start_position, int):
        raise InvalidRangeError(
            f"start_position must be an int for {metadata.remote_log_segment_id}"
        )
    if start_position < 0:
        raise InvalidRangeError(
            f"start_position {start_position} < 0 for segment {metadata.remote_log_segment_id}"
        )
    if end_position is not None and (
        isinstance(end_position, bool)
        or not isinstance(end_position, int)
        or end_position < start_position
    ):
        raise InvalidRangeError(
            f"end_position {end_position!r} < start_position {start_position} for segment "
            f"{metadata.remote_log_segment_id}"
        )


def resolve_range(
    name: str, size: int, start_position: int, end_position: int | None
) -> tuple[int, int]:
    """(start, length) of an inclusive range clamped to an object of ``size`` bytes."""
    if start_position >= size and not (size == 0 and start_position == 0):
        raise InvalidRangeError(
            f"{name}: start_position {start_position} is past the end of the {size}-byte object"
        )
    end = size - 1 if end_position is None else min(end_position, size - 1)
    return start_position, max(0, end - start_position + 1)


class _VerifyingRaw(io.RawIOBase):
    """Hands out exactly ``length`` bytes from ``read``; checks the CRC when it covers all."""

    def __init__(
        self,
        name: str,
        read: Callable[[int], bytes],
        release: Callable[[], None],
        length: int,
        expected_crc32c: int | None,
        translate: Callable[[Exception], Exception] | None,
    ) -> None:
        super().__init__()
        self._name = name
        self._read = read
        self._release = release
        self._length = length
        self._remaining = length
        self._expected = expected_crc32c
        self._translate = translate
        self._crc = 0

    def readable(self) -> bool:
        return True

    def _next(self, n: int) -> bytes:
        try:
            data = self._read(n)
        except RemoteStorageError:
            raise
        except Exception as e:
            if self._translate is None:
                raise
            raise self._translate(e) from e
        if not data:
            raise RemoteIntegrityError(
                f"{self._name}: stream ended after {self._length - self._remaining} of "
                f"{self._length} bytes"
            )
        if len(data) > self._remaining:
            data = data[: self._remaining]
        self._remaining -= len(data)
        if self._expected is not None:
            self._crc = crc32c_of(data, self._crc)
            if self._remaining == 0 and self._crc != self._expected:
                raise RemoteIntegrityError(
                    f"{self._name}: CRC-32C {self._crc:08x} of the fetched object does not "
                    f"match {self._expected:08x} recorded when it was written"
                )
        return data

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self._remaining == 0 or len(view) == 0:
            return 0
        data = self._next(min(len(view), self._remaining))
        view[: len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        # One large read instead of RawIOBase's 8 KiB loop (fast ranged fetches).
        chunks = []
        while self._remaining > 0:
            chunks.append(self._next(self._remaining))
        return b"".join(chunks)

    def close(self) -> None:
        if not self.closed:
            try:
                self._release()
            finally:
                super().close()


def verifying_stream(
    name: str,
    read: Callable[[int], bytes],
    release: Callable[[], None],
    length: int,
    expected_crc32c: int | None = None,
    translate: Callable[[Exception], Exception] | None = None,
) -> BinaryIO:
    """A buffered binary stream over ``read`` limited to ``length`` bytes (see _VerifyingRaw)."""
    raw = _VerifyingRaw(name, read, release, length, expected_crc32c, translate)
    return io.BufferedReader(raw, buffer_size=256 * 1024)


# --- inventory ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RemoteObject:
    """One stored object: its name relative to the root or prefix, size, last write."""

    name: str
    size: int
    last_modified_ms: int


@dataclass(frozen=True, slots=True)
class MultipartUpload:
    """An open (never completed or aborted) multipart upload of an object store."""

    name: str
    upload_id: str
    initiated_ms: int


# --- the contract ----------------------------------------------------------------------


class RemoteStorageManager(abc.ABC):
    """Kafka's RemoteStorageManager: copies segments to, and reads them from, remote storage.

    Methods are synchronous and thread-safe (the broker calls them from its copy,
    expire and fetch thread pools). Objects are write-once: a second copy of the same
    segment id with identical content succeeds, with different content raises
    RemoteObjectExistsError.
    """

    @abc.abstractmethod
    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None:
        """Copy the segment and its indexes; return custom metadata for the RLMM.

        On failure nothing of this copy is left visible and the error is raised.
        """

    @abc.abstractmethod
    def fetch_log_segment(
        self,
        metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        """Stream the segment's bytes from ``start_position`` to ``end_position`` (inclusive,
        clamped to the end of the segment; None = to the end). The caller closes it."""

    @abc.abstractmethod
    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """The whole index of ``index_type``, verified; RemoteResourceNotFoundError if absent."""

    @abc.abstractmethod
    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete every object of the segment copy (idempotent: absent objects are fine)."""

    # --- inventory (not part of Kafka's interface: for verification and repair) ---------

    @abc.abstractmethod
    def list_objects(
        self, topic_id_partition: TopicIdPartition | None = None
    ) -> Iterator[RemoteObject]:
        """Every object stored under one partition's directory, or under the whole root or
        prefix, sorted by name (temp files of unpublished copies included)."""

    @abc.abstractmethod
    def open_object(self, name: str) -> BinaryIO:
        """The stored bytes of object ``name`` as they are, unverified (the caller checks
        them); RemoteResourceNotFoundError if absent. The caller closes the stream."""

    @abc.abstractmethod
    def delete_objects(self, names: Iterable[str]) -> None:
        """Delete the named objects (absent ones are fine)."""

    def list_multipart_uploads(self) -> list[MultipartUpload]:
        """Open multipart uploads under the prefix (object stores only; none by default)."""
        return []

    def abort_multipart_upload(self, upload: MultipartUpload) -> None:
        """Abort one open multipart upload (absent ones are fine)."""
        raise RemoteStorageError(f"{self!r} has no multipart uploads to abort ({upload.name})")

    def close(self) -> None:  # noqa: B027 - optional hook, backends override when they hold resources
        """Release resources; idempotent."""

    def __enter__(self) -> RemoteStorageManager:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def load_remote_storage_manager(config: Mapping[str, Any]) -> RemoteStorageManager:
    """Build the configured backend: ``config["type"]`` is ``local`` (default) or ``s3``.

    The other keys are the backend's constructor arguments (``root`` for local;
    ``bucket``, ``prefix``, ``endpoint_url``, ... for s3). Backends import lazily, so
    boto3 is only loaded when S3 is used.
    """
    options = dict(config)
    kind = options.pop("type", "local")
    factory: Callable[..., RemoteStorageManager]
    if kind == "local":
        from remote.local import LocalRemoteStorageManager

        factory = LocalRemoteStorageManager
        if "root" in options:
            options["root"] = Path(options["root"])
    elif kind == "s3":
        try:
            from remote.s3 import S3RemoteStorageManager
        except ImportError as e:  # pragma: no cover - boto3 is a core dependency
            raise ConfigError(
                f"remote storage type 's3' needs boto3 (pip install rlmm): {e}"
            ) from e
        factory = S3RemoteStorageManager
    else:
        raise ConfigError(f"unknown remote storage type {kind!r} (expected local or s3)")
    try:
        return factory(**options)
    except TypeError as e:
        raise ConfigError(f"bad remote storage config for type {kind!r}: {e}") from e


__all__ = [
    "OBJECT_KINDS",
    "SUFFIXES",
    "IndexType",
    "LogSegmentData",
    "MultipartUpload",
    "ObjectChecksum",
    "ObjectName",
    "RemoteObject",
    "RemoteStorageManager",
    "SegmentManifest",
    "load_remote_storage_manager",
    "object_name",
    "parse_object_name",
    "partition_prefix",
]
