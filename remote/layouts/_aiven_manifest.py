"""Aiven's segment manifest, chunk index and chunk transforms, decoded (no I/O).

Aiven's tiered-storage plugin (``tiered-storage-for-apache-kafka``) stores a segment's
log in chunks of ``originalChunkSize`` bytes, each compressed (one zstd frame) and/or
encrypted (AES-256-GCM: a 12-byte IV, then the ciphertext and its 16-byte tag, with
the segment's AAD) in that order, and describes them in a JSON manifest
(``"version": "1"``): the chunk index (``fixed``: every transformed chunk the same size
but the last; ``variable``: the sizes, zstd-compressed and base64-encoded in the
plugin's binary codec), where each index sits in the ``.indexes`` object (indexes are
encrypted, never compressed), whether chunks are compressed, and the AES data key,
wrapped with an RSA key pair (OAEP, SHA3-512) named by its id.

Invariant: every decoding error is a ValueError saying what is wrong; callers add the
object key. Detransformed chunks are checked for their original size.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import hashlib
import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import cramjam

from remote.storage import IndexType

IV_SIZE = 12
GCM_TAG_SIZE = 16
_INDEX_FIELDS = {
    IndexType.OFFSET: "offset",
    IndexType.TIMESTAMP: "timestamp",
    IndexType.PRODUCER_SNAPSHOT: "producerSnapshot",
    IndexType.LEADER_EPOCH: "leaderEpoch",
    IndexType.TRANSACTION: "transaction",
}
_MAX_CHUNK_SIZES_BYTES = 10 * 1024 * 1024  # the plugin's own cap


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk: where it sits in the original log and in the stored object."""

    number: int
    original_position: int
    original_size: int
    transformed_position: int
    transformed_size: int


@dataclass(frozen=True)
class ChunkIndex:
    """The chunks of one log object (``transformed_sizes[i]`` is chunk i's stored size)."""

    original_chunk_size: int
    original_file_size: int
    transformed_sizes: tuple[int, ...]
    _starts: list[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.original_chunk_size <= 0:
            raise ValueError(f"originalChunkSize {self.original_chunk_size} is not positive")
        if self.original_file_size < 0:
            raise ValueError(f"originalFileSize {self.original_file_size} is negative")
        expected = -(-self.original_file_size // self.original_chunk_size)
        if len(self.transformed_sizes) != expected:
            raise ValueError(
                f"{len(self.transformed_sizes)} chunk sizes for {self.original_file_size} bytes"
                f" in chunks of {self.original_chunk_size} (expected {expected})"
            )
        if any(size < 0 for size in self.transformed_sizes):
            raise ValueError("a transformed chunk size is negative")
        starts, total = [], 0
        for size in self.transformed_sizes:
            starts.append(total)
            total += size
        object.__setattr__(self, "_starts", starts)

    @property
    def chunk_count(self) -> int:
        return len(self.transformed_sizes)

    @property
    def transformed_file_size(self) -> int:
        """The size the stored log object must have."""
        return sum(self.transformed_sizes)

    def chunk(self, number: int) -> Chunk:
        original = number * self.original_chunk_size
        size = min(self.original_chunk_size, self.original_file_size - original)
        return Chunk(number, original, size, self._starts[number], self.transformed_sizes[number])

    def chunks_for_range(self, first: int, last: int) -> list[Chunk]:
        """The chunks holding original bytes ``first..last`` (inclusive), in order."""
        if first < 0 or last < first:
            raise ValueError(f"bad range {first}..{last}")
        last = min(last, self.original_file_size - 1)
        if first > last:
            return []
        lo, hi = first // self.original_chunk_size, last // self.original_chunk_size
        return [self.chunk(i) for i in range(lo, hi + 1)]

    def chunk_at_transformed(self, position: int) -> int:
        """The number of the chunk stored at byte ``position`` of the object."""
        return max(0, bisect.bisect_right(self._starts, position) - 1)


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
        raise ValueError(f"{where}.{name} is {value!r}, not an integer")
    return value


def decode_chunk_sizes(text: str) -> tuple[int, ...]:
    """A variable chunk index's ``transformedChunks``: base64 of a zstd frame holding
    count (i32), then for count > 1 base (i32), bytes per value (i8), count - 1 values
    of that width (big-endian, added to base) and the last value in full (i32)."""
    try:
        packed = base64.b64decode(text, validate=True)
        raw = bytes(cramjam.zstd.decompress(packed))
    except (binascii.Error, ValueError, cramjam.DecompressionError) as e:
        raise ValueError(f"chunkIndex.transformedChunks is not base64 of zstd data: {e}") from e
    if len(raw) > _MAX_CHUNK_SIZES_BYTES:
        raise ValueError(f"chunkIndex.transformedChunks decodes to {len(raw)} bytes")
    try:
        (count,) = struct.unpack_from(">i", raw, 0)
        if count < 0:
            raise ValueError(f"chunk count {count}")
        if count == 0:
            return ()
        if count == 1:
            return (struct.unpack_from(">i", raw, 4)[0],)
        base, width = struct.unpack_from(">ib", raw, 4)
        if not 1 <= width <= 4:
            raise ValueError(f"{width} bytes per chunk size")
        pos, values = 9, []
        for _ in range(count - 1):
            values.append(base + int.from_bytes(raw[pos : pos + width], "big"))
            pos += width
        values.append(struct.unpack_from(">i", raw, pos)[0])
        if pos + 4 != len(raw):
            raise ValueError(f"{len(raw) - pos - 4} trailing bytes")
        return tuple(values)
    except struct.error as e:
        raise ValueError(f"chunkIndex.transformedChunks is truncated: {e}") from e


def _chunk_index(obj: Any) -> ChunkIndex:
    if not isinstance(obj, dict):
        raise ValueError("chunkIndex is not an object")
    kind = obj.get("type")
    chunk_size = _int(obj, "originalChunkSize", "chunkIndex")
    file_size = _int(obj, "originalFileSize", "chunkIndex")
    if kind == "fixed":
        count = -(-file_size // chunk_size) if chunk_size > 0 else 0
        size = _int(obj, "transformedChunkSize", "chunkIndex")
        final = _int(obj, "finalTransformedChunkSize", "chunkIndex")
        sizes = (size,) * (count - 1) + (final,) if count else ()
    elif kind == "variable":
        text = obj.get("transformedChunks")
        if not isinstance(text, str):
            raise ValueError("chunkIndex.transformedChunks is not a string")
        sizes = decode_chunk_sizes(text)
    else:
        raise ValueError(f"chunkIndex.type {kind!r} is neither 'fixed' nor 'variable'")
    return ChunkIndex(chunk_size, file_size, sizes)


def _indexes(obj: Any) -> dict[IndexType, IndexSlice | None]:
    if not isinstance(obj, dict):
        raise ValueError("segmentIndexes is not an object")
    out: dict[IndexType, IndexSlice | None] = {}
    for kind, name in _INDEX_FIELDS.items():
        entry = obj.get(name)
        if entry is None:
            if kind != IndexType.TRANSACTION:
                raise ValueError(f"segmentIndexes.{name} is missing")
            out[kind] = None
            continue
        if not isinstance(entry, dict):
            raise ValueError(f"segmentIndexes.{name} is not an object")
        position = _int(entry, "position", f"segmentIndexes.{name}")
        size = _int(entry, "size", f"segmentIndexes.{name}")
        if position < 0 or size < 0:
            raise ValueError(f"segmentIndexes.{name} has a negative position or size")
        out[kind] = IndexSlice(position, size)
    return out


def _encryption(obj: Any) -> Encryption | None:
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise ValueError("encryption is not an object")
    key, aad = obj.get("dataKey"), obj.get("aad")
    if not isinstance(key, str) or key.count(":") != 1 or not isinstance(aad, str):
        raise ValueError("encryption.dataKey must be '<key pair id>:<base64>' and aad base64")
    key_pair_id, wrapped = key.split(":")
    try:
        return Encryption(key_pair_id, base64.b64decode(wrapped), base64.b64decode(aad))
    except binascii.Error as e:
        raise ValueError(f"encryption is not base64: {e}") from e


def parse_manifest(data: bytes) -> AivenManifest:
    """Decode a ``.rsm-manifest`` object; ValueError saying what is wrong."""
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"the segment manifest is not JSON: {e}") from e
    if not isinstance(doc, dict):
        raise ValueError("the segment manifest is not a JSON object")
    if doc.get("version") != "1":
        raise ValueError(f"unknown segment manifest version {doc.get('version')!r} (expected '1')")
    compression = doc.get("compression")
    if not isinstance(compression, bool):
        raise ValueError(f"compression is {compression!r}, not a boolean")
    return AivenManifest(
        _chunk_index(doc.get("chunkIndex")),
        _indexes(doc.get("segmentIndexes")),
        compression,
        _encryption(doc.get("encryption")),
    )


# --- transforms ----------------------------------------------------------------------------


def decrypt(data: bytes, data_key: bytes, aad: bytes) -> bytes:
    """One AES-GCM-encrypted chunk or index: IV, then ciphertext and tag."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    if len(data) < IV_SIZE + GCM_TAG_SIZE:
        raise ValueError(f"{len(data)} bytes is too short for an encrypted chunk")
    try:
        return AESGCM(data_key).decrypt(data[:IV_SIZE], data[IV_SIZE:], aad)
    except InvalidTag as e:
        raise ValueError("AES-GCM authentication failed (wrong key or altered bytes)") from e


def detransform_chunk(
    data: bytes, chunk: Chunk, compression: bool, data_key: bytes | None, aad: bytes | None
) -> bytes:
    """A stored chunk back to its original bytes (decrypt, then decompress)."""
    if len(data) != chunk.transformed_size:
        raise ValueError(
            f"chunk {chunk.number} is {len(data)} bytes, the chunk index says"
            f" {chunk.transformed_size}"
        )
    if data_key is not None:
        assert aad is not None
        data = decrypt(data, data_key, aad)
    if compression:
        try:
            data = bytes(cramjam.zstd.decompress(data))
        except cramjam.DecompressionError as e:
            raise ValueError(f"chunk {chunk.number} is not a zstd frame: {e}") from e
    if len(data) != chunk.original_size:
        raise ValueError(
            f"chunk {chunk.number} holds {len(data)} bytes, the chunk index says"
            f" {chunk.original_size}"
        )
    return data


def mgf1_sha3_512(seed: bytes, length: int) -> bytes:
    """MGF1 (RFC 8017, B.2.1) over SHA3-512."""
    out = b"".join(
        hashlib.sha3_512(seed + i.to_bytes(4, "big")).digest() for i in range(-(-length // 64))
    )
    return out[:length]


def unwrap_data_key(wrapped: bytes, private_key_pem: bytes) -> bytes:
    """The AES data key, unwrapped with the key pair's private key.

    The plugin wraps it with RSA-OAEP, SHA3-512 both as the hash and in MGF1 (Bouncy
    Castle's ``OAEPWithSHA3-512AndMGF1Padding``), which OpenSSL-backed libraries do not
    offer: the RSA step uses the key's numbers, the OAEP decoding is RFC 8017 7.1.2.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = serialization.load_pem_private_key(private_key_pem, password=None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError("the private key is not an RSA key")
    numbers = key.private_numbers()
    n, d = numbers.public_numbers.n, numbers.d
    k = (n.bit_length() + 7) // 8
    h = 64
    if len(wrapped) != k or k < 2 * h + 2:
        raise ValueError(f"a wrapped data key of {len(wrapped)} bytes does not fit a {k}-byte key")
    em = pow(int.from_bytes(wrapped, "big"), d, n).to_bytes(k, "big")
    masked_seed, masked_db = em[1 : h + 1], em[h + 1 :]
    seed = bytes(a ^ b for a, b in zip(masked_seed, mgf1_sha3_512(masked_db, h), strict=True))
    db = bytes(a ^ b for a, b in zip(masked_db, mgf1_sha3_512(seed, k - h - 1), strict=True))
    rest = db[h:].lstrip(b"\x00")
    if em[0] != 0 or db[:h] != hashlib.sha3_512(b"").digest() or not rest.startswith(b"\x01"):
        raise ValueError("cannot unwrap the data key with this private key (OAEP check failed)")
    return rest[1:]


# --- custom metadata (Kafka's tagged fields) -------------------------------------------------

REMOTE_SIZE, OBJECT_PREFIX, OBJECT_KEY = 0, 1, 2


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def decode_custom_metadata(data: bytes | None) -> dict[int, Any]:
    """The plugin's custom metadata (a Kafka tagged-fields block: remote size as a
    zigzag varlong, object prefix and object key as compact strings); {} when empty."""
    if not data:
        return {}
    count, pos = _uvarint(data, 0)
    out: dict[int, Any] = {}
    for _ in range(count):
        tag, pos = _uvarint(data, pos)
        size, pos = _uvarint(data, pos)
        body, pos = data[pos : pos + size], pos + size
        if len(body) != size:
            raise ValueError("truncated tagged field")
        if tag == REMOTE_SIZE:
            raw, _ = _uvarint(body, 0)
            out[tag] = (raw >> 1) ^ -(raw & 1)
        elif tag in (OBJECT_PREFIX, OBJECT_KEY):
            length, at = _uvarint(body, 0)
            out[tag] = None if length == 0 else body[at : at + length - 1].decode()
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} trailing bytes")
    return out


__all__ = [
    "AivenManifest",
    "Chunk",
    "ChunkIndex",
    "Encryption",
    "IndexSlice",
    "decode_chunk_sizes",
    "decode_custom_metadata",
    "decrypt",
    "detransform_chunk",
    "parse_manifest",
    "unwrap_data_key",
]
