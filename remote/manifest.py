"""The manifest of a segment copy: size and CRC-32C of each object, as custom metadata.

``copy_log_segment_data`` returns it and Kafka stores it with the segment's metadata,
so a reader can verify every object it fetches against what was written. Version 2
adds the segment's smallest record timestamp (KIP-917's custom metadata is where Kafka
lets a plugin keep what its metadata lacks), so a planner can skip a segment wholly
after a time window; version 1 (without it) is still written when the smallest
timestamp is unknown, and always decoded.

Invariant: ``SegmentManifest.decode`` reads bytes anyone who can produce to the metadata
log chooses: bounded in size, every length checked against them, every value against its
type's range; anything else is a CorruptObjectError naming the field.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import crc32c
import msgpack

from remote.errors import CorruptObjectError, RemoteIntegrityError
from remote.naming import OBJECT_KINDS, ObjectKind, kind_label
from rlmm.model import RemoteLogSegmentMetadata

log = logging.getLogger(__name__)

_V1 = 1  # [1, entries]
_V2 = 2  # [2, entries, smallest timestamp (int64 >= -1)]
_VERSIONS = {_V1: 2, _V2: 3}  # version -> array length
MAX_ENCODED_MANIFEST_BYTES = 4096  # about 80 bytes; Kafka's default cap on custom metadata is 128
# Kafka's default remote.log.metadata.custom.metadata.max.bytes: a broker refuses a copy
# whose custom metadata is larger. Every manifest encodes to at most 102 bytes.
KAFKA_CUSTOM_METADATA_MAX_BYTES = 128


@dataclass(frozen=True, slots=True)
class ObjectChecksum:
    """Size and CRC-32C (Castagnoli) of one stored object."""

    size: int
    crc32c: int


@dataclass(frozen=True, slots=True)
class SegmentManifest:
    """What a reader needs to verify a segment copy: size and CRC-32C per object, and
    the smallest record timestamp of the segment when the copy learned it.

    Encoded as the copy's custom metadata: msgpack ``[1, [[size, crc] | nil] * 6]`` in
    OBJECT_KINDS order, about 70 bytes, or ``[2, entries, smallest_timestamp_ms]`` (at
    most 102 bytes), under Kafka's default ``remote.log.metadata.custom.metadata.max.bytes``
    (128). ``smallest_timestamp_ms`` is -1 (Kafka's NO_TIMESTAMP) when a record has no
    timestamp (it then bounds nothing), None when unknown.
    """

    objects: Mapping[ObjectKind, ObjectChecksum]
    smallest_timestamp_ms: int | None = None

    def encode(self) -> bytes:
        entries = []
        for kind in OBJECT_KINDS:
            entry = self.objects.get(kind)
            entries.append(None if entry is None else [entry.size, entry.crc32c])
        if self.smallest_timestamp_ms is None:
            # Version 1 when there is nothing more to say: readers of rlmm releases
            # before version 2 keep verifying these copies.
            return bytes(msgpack.packb([_V1, entries]))
        return bytes(msgpack.packb([_V2, entries, self.smallest_timestamp_ms]))

    @classmethod
    def decode(cls, data: bytes, name: str = "<custom metadata>") -> SegmentManifest:
        """Parse a manifest; CorruptObjectError (a ValueError) naming ``name`` and the
        field when ``data`` is not one of a known version.

        The bytes come from the metadata log, which anyone who can produce to it fills:
        at most ``MAX_ENCODED_MANIFEST_BYTES``, msgpack told that no length exceeds them,
        every size an int64, every CRC a uint32 and the smallest timestamp an int64 of at
        least -1."""
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
        if not isinstance(decoded, list) or not decoded:
            raise CorruptObjectError(name, "manifest", "not a [version, entries, ...] array")
        version = decoded[0]
        if type(version) is not int or version not in _VERSIONS:
            raise CorruptObjectError(
                name, "version", f"unknown segment manifest version {version!r:.40}"
            )
        if len(decoded) != _VERSIONS[version]:
            raise CorruptObjectError(
                name,
                "manifest",
                f"a version {version} manifest has {_VERSIONS[version]} fields, not {len(decoded)}",
            )
        entries = decoded[1]
        smallest = None
        if version == _V2:
            smallest = decoded[2]
            if type(smallest) is not int or not -1 <= smallest < 2**63:
                raise CorruptObjectError(
                    name,
                    "smallest timestamp",
                    f"{smallest!r:.40} is not a timestamp (int64 >= -1)",
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
        return cls(objects, smallest)

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


__all__ = [
    "KAFKA_CUSTOM_METADATA_MAX_BYTES",
    "MAX_ENCODED_MANIFEST_BYTES",
    "ObjectChecksum",
    "SegmentManifest",
    "crc32c_of",
    "verify_object",
]
