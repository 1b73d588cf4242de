"""Aiven's chunk transforms (zstd, AES-GCM, the RSA-wrapped data key), bounded (no I/O).

Each chunk of a log object is one zstd frame and/or AES-256-GCM ciphertext (a 12-byte
IV, then the ciphertext and its 16-byte tag, with the segment's AAD); the AES data key
is wrapped with RSA-OAEP over SHA3-512.

Invariant: no transform produces more than the size declared for its output: zstd
output stops at the limit it is given (a chunk's original size, at most
``MAX_CHUNK_BYTES``), so a decompression bomb is a CorruptObjectError, not gigabytes;
the output buffer grows with what the frame really holds (at most four times it), never
with what a header claims beyond the limit (remote._decompress). Every failure on
stored bytes is a CorruptObjectError naming the object and the field (``naming`` puts
the caller's key on it).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from remote import _decompress
from remote.errors import CorruptObjectError, DecompressionError

if TYPE_CHECKING:
    from remote.layouts._aiven_manifest import Chunk

IV_SIZE = 12
GCM_TAG_SIZE = 16
MAX_CHUNK_BYTES = 256 * 1024 * 1024  # a chunk's original size (the plugin's default is 4 MiB)


@contextlib.contextmanager
def naming(name: str, object_name: str | None = None) -> Iterator[None]:
    """Re-raise the CorruptObjectError of a parser of bare bytes as one about ``name``."""
    try:
        yield
    except CorruptObjectError as e:
        if e.name == name and e.object_name == object_name:
            raise
        raise e.renamed(name, object_name) from e.__cause__


def corrupt(field: str, reason: str) -> CorruptObjectError:
    return CorruptObjectError("<bytes>", field, reason)


def zstd_decompress(data: bytes | bytearray | memoryview, limit: int, field: str) -> bytearray:
    """The content of the zstd frame ``data``, at most ``limit`` bytes (remote._decompress:
    the buffer grows with what the frame really holds), else CorruptObjectError."""
    try:
        return _decompress.zstd(bytes(data), limit)
    except DecompressionError as e:
        bomb = " (a decompression bomb)" if e.limit_exceeded else ""
        raise corrupt(field, f"the zstd frame {e}{bomb}") from None


# --- transforms ----------------------------------------------------------------------------


def decrypt(data: bytes, data_key: bytes, aad: bytes, field: str = "chunk") -> bytes:
    """One AES-GCM-encrypted chunk or index: IV, then ciphertext and tag."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    if len(data) < IV_SIZE + GCM_TAG_SIZE:
        raise corrupt(field, f"{len(data)} bytes is too short for AES-GCM (IV and tag)")
    try:
        return AESGCM(data_key).decrypt(data[:IV_SIZE], data[IV_SIZE:], aad)
    except InvalidTag:
        raise corrupt(field, "AES-GCM authentication failed (wrong key or altered bytes)") from None


def detransform_chunk(
    data: bytes,
    chunk: Chunk,
    compression: bool,
    data_key: bytes | None,
    aad: bytes | None,
    name: str = "<bytes>",
    object_name: str | None = None,
) -> bytes | bytearray:
    """A stored chunk back to its original bytes (decrypt, then decompress); at most
    ``chunk.original_size`` bytes are ever produced (a bigger frame is an error)."""
    with naming(name, object_name):
        what = f"chunk {chunk.number}"
        if len(data) != chunk.transformed_size:
            raise corrupt(what, f"{len(data)} bytes, the chunk index says {chunk.transformed_size}")
        if not 0 <= chunk.original_size <= MAX_CHUNK_BYTES:
            raise corrupt(what, f"original size {chunk.original_size} is out of range")
        plain = data
        if data_key is not None:
            assert aad is not None
            plain = decrypt(data, data_key, aad, what)
        out = zstd_decompress(plain, chunk.original_size, what) if compression else plain
        if len(out) != chunk.original_size:
            raise corrupt(
                what, f"holds {len(out)} bytes, the chunk index says {chunk.original_size}"
            )
        return out


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


__all__ = [
    "GCM_TAG_SIZE",
    "IV_SIZE",
    "MAX_CHUNK_BYTES",
    "corrupt",
    "decrypt",
    "detransform_chunk",
    "mgf1_sha3_512",
    "naming",
    "unwrap_data_key",
    "zstd_decompress",
]
