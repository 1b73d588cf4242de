"""Kafka's storage API in Python: the RemoteStorageManager ABC and the types it speaks.

``IndexType``, ``LogSegmentData`` and ``RemoteStorageManager`` are Kafka's (in snake_case);
``RemoteObject`` and ``MultipartUpload`` are the inventory an operator's tools compare
with the metadata. ``RemoteReader`` is the read side that a RemoteStorageManager and a
``remote.layouts.RemoteLayout`` (which reads a Kafka cluster's tier) both offer.
Backends are ``remote.local`` and ``remote.s3``; ``remote.registry`` builds the
configured one.

Invariants:
- this module imports no backend and nothing of rlmm but its model and errors (it is
  the base every backend and layout imports);
- every backend stores one segment copy as write-once objects named by
  ``remote.naming.object_name``, and its listing methods (``list_objects``,
  ``open_object``, ``delete_objects``, ``list_multipart_uploads``) name objects
  relative to the root or prefix exactly so, so an inventory can be compared with the
  metadata.

Object names are ``remote.naming``'s, the manifest ``remote.manifest``'s, a range
clamped to an object and the verifying stream ``remote.streams``'s, the factory
``remote.registry``'s: import them from there. Which ranges a fetch may ask for is
checked here, in ``RemoteReader.fetch_log_segment``, before any backend or layout reads.
"""

from __future__ import annotations

import abc
import enum
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Self

from remote.errors import InvalidRangeError, RemoteStorageError
from rlmm.model import RemoteLogSegmentMetadata, TopicIdPartition


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
    ``smallest_timestamp_ms`` is ours, not Kafka's: the segment's smallest record
    timestamp when the caller already read every batch (the offloader's CRC check);
    None lets the RemoteStorageManager find it.
    """

    log_segment: Path
    offset_index: Path
    time_index: Path
    transaction_index: Path | None
    producer_snapshot_index: Path
    leader_epoch_index: bytes
    smallest_timestamp_ms: int | None = None

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


# --- fetch ranges ----------------------------------------------------------------------


def _check_range(
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


# --- the contracts ---------------------------------------------------------------------


class RemoteReader(abc.ABC):
    """What every reader of stored segment copies offers, a RemoteStorageManager or a
    RemoteLayout: ranged log fetches, whole indexes, and the inventory an operator's
    tools compare with the metadata. Methods are synchronous and thread-safe."""

    def fetch_log_segment(
        self,
        metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        """Stream the segment's bytes from ``start_position`` to ``end_position`` (inclusive,
        clamped to the end of the segment; None = to the end), as Kafka's fetchLogSegment.
        The caller closes it. InvalidRangeError for a range Kafka could not ask for."""
        # Checked here, once for every backend and layout, so none of them opens or
        # requests anything for a range that no segment could satisfy.
        _check_range(metadata, start_position, end_position)
        return self._open_log_range(metadata, start_position, end_position)

    @abc.abstractmethod
    def _open_log_range(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None
    ) -> BinaryIO:
        """``fetch_log_segment``'s stream, for a range already checked to be well formed."""

    @abc.abstractmethod
    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """The whole index of ``index_type``, verified against what the writer recorded
        (where it recorded something); RemoteResourceNotFoundError if absent."""

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

    def log_segment_file(self, metadata: RemoteLogSegmentMetadata) -> Path | None:
        """The file on this host holding the segment's log byte for byte, when the store
        keeps it so (a process on this host may then read a range of it directly: the
        broker plugin's bridge does); None for stores that do not (the default).
        RemoteResourceNotFoundError if the store keeps files and this one is absent."""
        return None

    def list_multipart_uploads(self) -> list[MultipartUpload]:
        """Open multipart uploads under the prefix (object stores only; none by default)."""
        return []

    def abort_multipart_upload(self, upload: MultipartUpload) -> None:
        """Abort one open multipart upload (absent ones are fine)."""
        raise RemoteStorageError(f"{self!r} has no multipart uploads to abort ({upload.name})")

    def close(self) -> None:  # noqa: B027 - optional hook, backends override when they hold resources
        """Release resources; idempotent."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class RemoteStorageManager(RemoteReader):
    """Kafka's RemoteStorageManager: copies segments to, and reads them from, remote storage.

    Methods are synchronous and thread-safe (the broker calls them from its copy,
    expire and fetch thread pools). Objects are write-once: a second copy of the same
    segment id with identical content succeeds, with different content raises
    RemoteObjectExistsError.
    """

    @abc.abstractmethod
    def copy_log_segment_data(
        self,
        metadata: RemoteLogSegmentMetadata,
        segment_data: LogSegmentData,
        *,
        cancelled: threading.Event | None = None,
    ) -> bytes | None:
        """Copy the segment and its indexes; return custom metadata for the RLMM.

        On failure nothing of this copy is left visible and the error is raised.
        ``cancelled``: set by a caller that gave the copy up (leadership lost, a
        shutdown); the copy then fails at its next wait. Given one, a store may wait out
        an outage of its storage for as long as it lasts rather than fail the copy, its
        caller being able to stop it; without one (Kafka's broker cannot cancel a copy
        through rlmm serve), every wait stays bounded by the store's settings.
        """

    @abc.abstractmethod
    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete every object of the segment copy (idempotent: absent objects are fine)."""

    @abc.abstractmethod
    def delete_objects(self, names: Iterable[str]) -> None:
        """Delete the named objects (absent ones are fine)."""

    def paused_for_s(self) -> float:
        """Seconds for which the store holds copies, having just been refused by its
        storage (0: it takes them now); an offloader starts no copy meanwhile."""
        return 0.0

    def paused_seconds(self) -> float:
        """Seconds the store has held its copies so far, its storage refusing them (a
        running total, for a rate; 0 for a store that never pauses)."""
        return 0.0


__all__ = [
    "IndexType",
    "LogSegmentData",
    "MultipartUpload",
    "RemoteObject",
    "RemoteReader",
    "RemoteStorageManager",
]
