"""Errors of remote storage and of Kafka segment files.

Invariant: every error derives from rlmm.errors.RemoteStorageError (the one base of
the project's storage errors) and names the file, object key and byte position
concerned; third-party errors are translated where they enter, kept as __cause__.
"""

from __future__ import annotations

from rlmm.errors import RemoteResourceNotFoundError, RemoteStorageError


class SegmentFormatError(RemoteStorageError):
    """A Kafka segment or index file that is corrupt, truncated or not Kafka's format."""

    def __init__(self, message: str, path: str | None = None, position: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.position = position


class RemoteObjectExistsError(RemoteStorageError):
    """A write-once object already exists with different content."""


class RemoteIntegrityError(RemoteStorageError):
    """Fetched bytes do not match the checksum stored when they were written, or an
    object is there but unreadable in its layout's format; ``object_name`` names it
    (relative to the layout's root) when known."""

    def __init__(self, message: str, *, object_name: str | None = None) -> None:
        super().__init__(message)
        self.object_name = object_name


class CorruptObjectError(RemoteIntegrityError, ValueError):
    """Bytes read from remote storage (an object, or custom metadata in the metadata log)
    that break their format: a count, size or position out of range or past the bytes
    there are, a truncated field, a chunk that decompresses past its declared size.

    One line, ``<name>: <field>: <reason>``: ``name`` is the object's key, URL or file
    (``<bytes>`` when the parser was handed bare bytes), ``field`` the field's path in
    the format (``chunkIndex.originalFileSize``). A ValueError too, so callers that
    caught the parsers' ValueError still do.
    """

    def __init__(
        self, name: str, field: str, reason: str, *, object_name: str | None = None
    ) -> None:
        super().__init__(f"{name}: {field}: {reason}", object_name=object_name)
        self.name = name
        self.field = field
        self.reason = reason

    def renamed(self, name: str, object_name: str | None = None) -> CorruptObjectError:
        """The same finding about ``name`` (a parser's caller knows the key)."""
        return CorruptObjectError(name, self.field, self.reason, object_name=object_name)


class DecompressionError(RemoteStorageError, ValueError):
    """Compressed bytes that do not decompress, or (``limit_exceeded``) decompress past
    the limit their reader allows (remote._decompress; callers name the object)."""

    def __init__(self, message: str, *, limit_exceeded: bool = False) -> None:
        super().__init__(message)
        self.limit_exceeded = limit_exceeded


class MissingKeyMaterialError(RemoteStorageError):
    """An encrypted object whose key material is not configured (names the setting)."""


class InvalidRemotePathError(RemoteStorageError, ValueError):
    """A topic name, id or key that would escape the storage root or prefix."""


# --- remote storage manager errors (remote/storage.py, local.py, s3.py) ---


class RemoteStorageUnavailableError(RemoteStorageError):
    """The store failed transiently (5xx, throttling, timeout, dropped connection)
    and botocore's retries were exhausted; retrying the operation later may succeed."""

    retriable = True


class InvalidRangeError(RemoteStorageError, ValueError):
    """A byte range that is negative, inverted or starts past the end of the object."""


class InvalidSegmentDataError(RemoteStorageError, ValueError):
    """A LogSegmentData whose local files are missing or unreadable (names the path)."""


__all__ = [
    "CorruptObjectError",
    "DecompressionError",
    "InvalidRangeError",
    "InvalidRemotePathError",
    "InvalidSegmentDataError",
    "MissingKeyMaterialError",
    "RemoteIntegrityError",
    "RemoteObjectExistsError",
    "RemoteResourceNotFoundError",
    "RemoteStorageError",
    "RemoteStorageUnavailableError",
    "SegmentFormatError",
]


class UnsupportedCompressionError(SegmentFormatError):
    """A batch compressed with a codec whose library is not installed (or unknown)."""


__all__ += ["UnsupportedCompressionError"]


class SideIndexError(RemoteStorageError):
    """rlmm's side index location cannot be read or written (a read goes on without it)."""


__all__ += ["SideIndexError"]


class TopicConfigsError(RemoteStorageError):
    """A topic's configs kept in rlmm's store cannot be read, decoded or written."""


__all__ += ["TopicConfigsError"]
