"""Aiven's segment manifest, chunk index and custom metadata, decoded (no I/O).

Aiven's tiered-storage plugin (``tiered-storage-for-apache-kafka``) stores a segment's
log in chunks of ``originalChunkSize`` bytes, each compressed (one zstd frame) and/or
encrypted (AES-256-GCM: a 12-byte IV, then the ciphertext and its 16-byte tag, with
the segment's AAD) in that order, and describes them in a JSON manifest
(``"version": "1"``): the chunk index (``fixed``: every transformed chunk the same size
but the last; ``variable``: the sizes, zstd-compressed and base64-encoded in the
plugin's binary codec), where each index sits in the ``.indexes`` object (indexes are
encrypted, never compressed), whether chunks are compressed, and the AES data key,
wrapped with an RSA key pair (OAEP, SHA3-512) named by its id. The transforms
themselves are in ``_aiven_transforms``.

Invariant: these bytes come from a bucket anyone with write access can fill, so every
count, size and position is checked against its bound (below) or against the bytes
actually there before anything is allocated or looped over, and nothing is allocated
per chunk of a fixed index (its chunks are arithmetic). Every decoding failure is a
CorruptObjectError naming the object (``name``) and the field; no other exception
type, no allocation beyond a small multiple of the input or of a stated bound.
Bounds: a manifest of at most ``MAX_MANIFEST_BYTES`` with at most ``MAX_JSON_CONTAINERS``
objects and arrays; file, chunk, index sizes and positions are Java ints (0 ..
2**31 - 1) as the plugin writes them; a chunk's original size is at most
``MAX_CHUNK_BYTES``; a variable index decodes to at most ``MAX_CHUNK_SIZES_BYTES``;
zstd output stops at the size declared for it (a chunk's original size), so a
decompression bomb is an error, not gigabytes.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import itertools
import json
import struct
import sys
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from remote.layouts._aiven_transforms import MAX_CHUNK_BYTES, naming, zstd_decompress
from remote.layouts._aiven_transforms import corrupt as _bad
from remote.storage import IndexType

_INDEX_FIELDS = {
    IndexType.OFFSET: "offset",
    IndexType.TIMESTAMP: "timestamp",
    IndexType.PRODUCER_SNAPSHOT: "producerSnapshot",
    IndexType.LEADER_EPOCH: "leaderEpoch",
    IndexType.TRANSACTION: "transaction",
}
JAVA_INT_MAX = 2**31 - 1  # the plugin's sizes and positions are Java ints, Kafka's too
MAX_CHUNK_SIZES_BYTES = 10 * 1024 * 1024  # the plugin's own cap on a variable index
MAX_MANIFEST_BYTES = 16 * 1024 * 1024  # a variable index of MAX_CHUNK_SIZES_BYTES fits
MAX_JSON_CONTAINERS = 256  # a manifest has about 15 objects and no arrays


def _in_range(value: int, field: str, low: int = 0, high: int = JAVA_INT_MAX) -> int:
    if not low <= value <= high:
        raise _bad(field, f"{value} is out of range [{low}, {high}]")
    return value


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk: where it sits in the original log and in the stored object."""

    number: int
    original_position: int
    original_size: int
    transformed_position: int
    transformed_size: int


class ChunkIndex:
    """The chunks of one log object.

    A variable index holds its transformed sizes and their start positions in two int64
    arrays (16 bytes a chunk, bounded by the decoded index); a fixed index holds two
    numbers and computes every chunk, whatever the count. Construction checks the count
    against the original file size and every size against its range.
    """

    __slots__ = (
        "_count",
        "_fixed",
        "_sizes",
        "_starts",
        "original_chunk_size",
        "original_file_size",
    )

    def __init__(
        self,
        original_chunk_size: int,
        original_file_size: int,
        transformed_sizes: Sequence[int] | None = None,
        *,
        fixed: tuple[int, int] | None = None,
    ) -> None:
        """``transformed_sizes`` (variable), or ``fixed`` = (every chunk's transformed
        size, the final chunk's)."""
        self.original_chunk_size = _in_range(original_chunk_size, "chunkIndex.originalChunkSize", 1)
        self.original_file_size = _in_range(original_file_size, "chunkIndex.originalFileSize")
        largest = min(original_chunk_size, original_file_size)
        if largest > MAX_CHUNK_BYTES:
            raise _bad(
                "chunkIndex.originalChunkSize",
                f"chunks of {largest} bytes, more than {MAX_CHUNK_BYTES}",
            )
        count = self._count = -(-original_file_size // original_chunk_size)
        self._fixed: tuple[int, int] | None = None
        self._sizes: array[int] | None = None
        self._starts: array[int] | None = None
        if fixed is not None:
            size, final = fixed
            # A chunk holds at least one original byte, so at least one stored byte.
            _in_range(size, "chunkIndex.transformedChunkSize", 1 if count > 1 else 0)
            _in_range(final, "chunkIndex.finalTransformedChunkSize", 1 if count else 0)
            self._fixed = (size, final) if count else (0, 0)
            return
        if transformed_sizes is None:
            raise TypeError("a ChunkIndex needs transformed_sizes or fixed")
        if len(transformed_sizes) != count:
            raise _bad(
                "chunkIndex.transformedChunks",
                f"{len(transformed_sizes)} chunk sizes for {original_file_size} bytes in chunks"
                f" of {original_chunk_size} (expected {count})",
            )
        try:
            sizes = array("q", transformed_sizes)
        except OverflowError:
            sizes = array("q", [-1])
        if sizes and not 1 <= min(sizes) <= max(sizes) <= JAVA_INT_MAX:
            raise _bad(
                "chunkIndex.transformedChunks", f"a chunk size is out of range [1, {JAVA_INT_MAX}]"
            )
        self._sizes = sizes
        self._starts = array("q", itertools.accumulate(sizes, initial=0))

    def __repr__(self) -> str:
        kind = f"fixed={self._fixed}" if self._fixed is not None else "variable"
        return (
            f"ChunkIndex({self.original_chunk_size}, {self.original_file_size}, {kind},"
            f" {self._count} chunks)"
        )

    @property
    def chunk_count(self) -> int:
        return self._count

    @property
    def transformed_file_size(self) -> int:
        """The size the stored log object must have."""
        if self._fixed is not None:
            size, final = self._fixed
            return size * (self._count - 1) + final if self._count else 0
        assert self._starts is not None
        return self._starts[-1]

    def transformed_size(self, number: int) -> int:
        if self._fixed is not None:
            return self._fixed[1] if number == self._count - 1 else self._fixed[0]
        assert self._sizes is not None
        return self._sizes[number]

    def chunk(self, number: int) -> Chunk:
        if not 0 <= number < self._count:
            raise IndexError(f"chunk {number} of {self._count}")
        original = number * self.original_chunk_size
        size = min(self.original_chunk_size, self.original_file_size - original)
        if self._fixed is not None:
            position = number * self._fixed[0]
        else:
            assert self._starts is not None
            position = self._starts[number]
        return Chunk(number, original, size, position, self.transformed_size(number))

    def chunks_for_range(self, first: int, last: int) -> ChunkRange:
        """The chunks holding original bytes ``first..last`` (inclusive), in order."""
        if first < 0 or last < first:
            raise ValueError(f"bad range {first}..{last}")
        last = min(last, self.original_file_size - 1)
        if first > last:
            return ChunkRange(self, range(0))
        lo, hi = first // self.original_chunk_size, last // self.original_chunk_size
        return ChunkRange(self, range(lo, hi + 1))

    def chunk_at_transformed(self, position: int) -> int:
        """The number of the chunk stored at byte ``position`` of the object."""
        if self._fixed is not None:
            size = self._fixed[0]
            if self._count == 0:
                return 0
            return min(position // size, self._count - 1) if size else self._count - 1
        assert self._starts is not None
        return max(0, min(bisect.bisect_right(self._starts, position), self._count) - 1)


class ChunkRange(Sequence[Chunk]):
    """Consecutive chunks of a ChunkIndex, built one at a time when asked for."""

    __slots__ = ("_index", "_numbers")

    def __init__(self, index: ChunkIndex, numbers: range) -> None:
        self._index = index
        self._numbers = numbers

    def __len__(self) -> int:
        return len(self._numbers)

    @overload
    def __getitem__(self, i: int) -> Chunk: ...
    @overload
    def __getitem__(self, i: slice) -> ChunkRange: ...
    def __getitem__(self, i: int | slice) -> Chunk | ChunkRange:
        if isinstance(i, slice):
            return ChunkRange(self._index, self._numbers[i])
        return self._index.chunk(self._numbers[i])

    def __iter__(self) -> Iterator[Chunk]:
        chunk = self._index.chunk
        return (chunk(n) for n in self._numbers)

    def __repr__(self) -> str:
        return f"ChunkRange({self._numbers.start}..{self._numbers.stop - 1})"


@dataclass(frozen=True, slots=True)
class IndexSlice:
    """Where one index sits in the ``.indexes`` object (its stored, transformed bytes)."""

    position: int
    size: int


@dataclass(frozen=True, slots=True)
class Encryption:
    """The manifest's encryption section: the wrapped AES data key and the AAD."""

    key_pair_id: str
    wrapped_data_key: bytes = field(repr=False)
    aad: bytes = field(repr=False)


@dataclass(frozen=True)
class AivenManifest:
    chunk_index: ChunkIndex
    indexes: Mapping[IndexType, IndexSlice | None]
    compression: bool
    encryption: Encryption | None

    @property
    def indexes_object_size(self) -> int:
        """The size the ``.indexes`` object must have (its indexes lie back to back)."""
        return max((s.position + s.size for s in self.indexes.values() if s), default=0)

    @property
    def log_stored_as_is(self) -> bool:
        return not self.compression and self.encryption is None


def _int(obj: Mapping[str, Any], name: str, where: str) -> int:
    value = obj.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(f"{where}.{name}", f"{_short(value)} is not an integer")
    return _in_range(value, f"{where}.{name}")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."


def decode_chunk_sizes(text: str) -> array[int]:
    """A variable chunk index's ``transformedChunks``: base64 of a zstd frame holding
    count (i32), then for count > 1 base (i32), bytes per value (i8), count - 1 values
    of that width (big-endian, added to base) and the last value in full (i32)."""
    what = "chunkIndex.transformedChunks"
    try:
        packed = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise _bad(what, f"not base64: {e}") from None
    raw = bytes(zstd_decompress(packed, MAX_CHUNK_SIZES_BYTES, what))
    if len(raw) < 4:
        raise _bad(what, f"{len(raw)} bytes hold no chunk count")
    (count,) = struct.unpack_from(">i", raw, 0)
    if count < 0:
        raise _bad(what, f"chunk count {count} is negative")
    if count == 0:
        expected = 4
    elif count == 1:
        expected = 8
    else:
        if len(raw) < 9:
            raise _bad(what, f"{len(raw)} bytes hold no base and width for {count} chunks")
        base, width = struct.unpack_from(">ib", raw, 4)
        if not 1 <= width <= 4:
            raise _bad(what, f"{width} bytes per chunk size (1 to 4 expected)")
        # Checked before any loop: count - 1 values of width bytes, then the last in full.
        if count - 1 > (len(raw) - 13) // width:
            raise _bad(what, f"chunk count {count} needs more than the {len(raw)} bytes there")
        expected = 9 + (count - 1) * width + 4
    if len(raw) != expected:
        raise _bad(what, f"{len(raw)} bytes where {count} chunk sizes take {expected}")
    if count == 0:
        return array("q")
    if count == 1:
        return array("q", struct.unpack_from(">i", raw, 4))
    values = _big_endian(raw[9 : expected - 4], width)
    if base:
        values = array("q", map(base.__add__, values))
    values.append(struct.unpack_from(">i", raw, expected - 4)[0])
    return values


def _big_endian(raw: bytes, width: int) -> array[int]:
    """Unsigned big-endian integers of ``width`` bytes (1 to 4), converted in C."""
    if width == 3:
        wide = bytearray(len(raw) // 3 * 4)
        for i in range(3):
            wide[i + 1 :: 4] = raw[i::3]
        raw, width = bytes(wide), 4
    values = array({1: "B", 2: "H", 4: "I"}[width], raw)
    if sys.byteorder == "little" and width > 1:
        values.byteswap()
    return array("q", values)


def _chunk_index(obj: object) -> ChunkIndex:
    if not isinstance(obj, dict):
        raise _bad("chunkIndex", "not an object")
    kind = obj.get("type")
    chunk_size = _int(obj, "originalChunkSize", "chunkIndex")
    file_size = _int(obj, "originalFileSize", "chunkIndex")
    if kind == "fixed":
        size = _int(obj, "transformedChunkSize", "chunkIndex")
        final = _int(obj, "finalTransformedChunkSize", "chunkIndex")
        return ChunkIndex(chunk_size, file_size, fixed=(size, final))
    if kind == "variable":
        text = obj.get("transformedChunks")
        if not isinstance(text, str):
            raise _bad("chunkIndex.transformedChunks", "not a string")
        return ChunkIndex(chunk_size, file_size, decode_chunk_sizes(text))
    raise _bad("chunkIndex.type", f"{_short(kind)} is neither 'fixed' nor 'variable'")


def _indexes(obj: object) -> dict[IndexType, IndexSlice | None]:
    if not isinstance(obj, dict):
        raise _bad("segmentIndexes", "not an object")
    out: dict[IndexType, IndexSlice | None] = {}
    for kind, name in _INDEX_FIELDS.items():
        entry = obj.get(name)
        where = f"segmentIndexes.{name}"
        if entry is None:
            if kind != IndexType.TRANSACTION:
                raise _bad(where, "missing")
            out[kind] = None
            continue
        if not isinstance(entry, dict):
            raise _bad(where, "not an object")
        position = _int(entry, "position", where)
        size = _int(entry, "size", where)
        _in_range(position + size, f"{where}.position + size")
        out[kind] = IndexSlice(position, size)
    return out


def _encryption(obj: object) -> Encryption | None:
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise _bad("encryption", "not an object")
    key, aad = obj.get("dataKey"), obj.get("aad")
    if not isinstance(key, str) or key.count(":") != 1 or not isinstance(aad, str):
        raise _bad("encryption", "dataKey must be '<key pair id>:<base64>' and aad base64")
    key_pair_id, wrapped = key.split(":")
    try:
        return Encryption(key_pair_id, base64.b64decode(wrapped), base64.b64decode(aad))
    except (binascii.Error, ValueError) as e:
        raise _bad("encryption", f"not base64: {e}") from None


def parse_manifest(
    data: bytes, name: str = "<bytes>", object_name: str | None = None
) -> AivenManifest:
    """Decode a ``.rsm-manifest`` object; CorruptObjectError about ``name`` if bad."""
    with naming(name, object_name):
        return _parse_manifest(data)


def _parse_manifest(data: bytes) -> AivenManifest:
    if len(data) > MAX_MANIFEST_BYTES:
        raise _bad("manifest", f"{len(data)} bytes, more than {MAX_MANIFEST_BYTES}")
    # Objects and arrays are what JSON turns a few bytes into many: a manifest has a
    # handful, so more is not one (and nesting never nears the recursion limit).
    containers = data.count(b"{") + data.count(b"[")
    if containers > MAX_JSON_CONTAINERS:
        raise _bad("manifest", f"{containers} JSON objects and arrays, more than a manifest has")
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise _bad("manifest", f"not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise _bad("manifest", "not a JSON object")
    if doc.get("version") != "1":
        raise _bad(
            "version",
            f"unknown segment manifest version {_short(doc.get('version'))} (expected '1')",
        )
    compression = doc.get("compression")
    if not isinstance(compression, bool):
        raise _bad("compression", f"{_short(compression)} is not a boolean")
    return AivenManifest(
        _chunk_index(doc.get("chunkIndex")),
        _indexes(doc.get("segmentIndexes")),
        compression,
        _encryption(doc.get("encryption")),
    )


# --- custom metadata (Kafka's tagged fields) -------------------------------------------------

REMOTE_SIZE, OBJECT_PREFIX, OBJECT_KEY = 0, 1, 2
# a field's value: the remote size, or an object prefix or key (None: a null string)
CustomField = int | str | None
_FIELD_NAMES = {
    REMOTE_SIZE: "remote_size",
    OBJECT_PREFIX: "object_prefix",
    OBJECT_KEY: "object_key",
}


def _uvarint(data: bytes, pos: int, field: str, max_bytes: int = 10) -> tuple[int, int]:
    value = shift = 0
    start = pos
    while True:
        if pos >= len(data):
            raise _bad(field, f"truncated varint at byte {start}")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if pos - start >= max_bytes:
            raise _bad(field, f"varint at byte {start} is longer than {max_bytes} bytes")


def decode_custom_metadata(
    data: bytes | None, name: str = "<custom metadata>", object_name: str | None = None
) -> dict[int, CustomField]:
    """The plugin's custom metadata (a Kafka tagged-fields block: remote size as a
    zigzag varlong, object prefix and object key as compact strings); {} when empty.

    Every count and length is checked against the bytes left before it is used."""
    if not data:
        return {}
    with naming(name, object_name):
        return _decode_custom_metadata(bytes(data))


def _decode_custom_metadata(data: bytes) -> dict[int, CustomField]:
    count, pos = _uvarint(data, 0, "tagged field count", 5)
    if count > (len(data) - pos) // 2:  # a field takes at least a tag and a size byte
        raise _bad("tagged field count", f"{count} fields in {len(data) - pos} bytes")
    out: dict[int, CustomField] = {}
    for _ in range(count):
        tag, pos = _uvarint(data, pos, "tag", 5)
        what = _FIELD_NAMES.get(tag, f"tag {tag}")
        size, pos = _uvarint(data, pos, f"{what} size", 5)
        if size > len(data) - pos:
            raise _bad(what, f"{size} bytes claimed, {len(data) - pos} left")
        body, pos = data[pos : pos + size], pos + size
        if tag == REMOTE_SIZE:
            raw, at = _uvarint(body, 0, what)
            if at != len(body):
                raise _bad(what, f"{len(body) - at} bytes after the varlong")
            out[tag] = (raw >> 1) ^ -(raw & 1)
        elif tag in (OBJECT_PREFIX, OBJECT_KEY):
            length, at = _uvarint(body, 0, what, 5)
            if length and length - 1 != len(body) - at:
                raise _bad(what, f"a string of {length - 1} bytes in {len(body) - at}")
            try:
                out[tag] = None if length == 0 else body[at:].decode()
            except UnicodeDecodeError as e:
                raise _bad(what, f"not UTF-8: {e.reason} at byte {e.start}") from None
    if pos != len(data):
        raise _bad("tagged fields", f"{len(data) - pos} trailing bytes")
    return out


__all__ = [
    "MAX_CHUNK_SIZES_BYTES",
    "MAX_MANIFEST_BYTES",
    "AivenManifest",
    "Chunk",
    "ChunkIndex",
    "ChunkRange",
    "Encryption",
    "IndexSlice",
    "decode_chunk_sizes",
    "decode_custom_metadata",
    "parse_manifest",
]
