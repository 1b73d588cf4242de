"""Objects in Aiven's S3 layout, written by these tests from real Kafka segment files.

For the reader's unit and bad-input tests (chunk boundaries, every manifest shape,
corruption). It follows our reading of the plugin's format; test_aiven_s3.py also
checks the reader against objects the plugin itself wrote (tests/data/aiven-tiered).
"""

from __future__ import annotations

import base64
import json
import os
import struct
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import cramjam

from remote.segments import PartitionDir, PartitionDirWriter, generate_records
from remote.storage import IndexType
from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
    kafka_uuid_to_str,
)
from tests.remote.conftest import TOPIC_ID

INDEX_ORDER = [
    (IndexType.OFFSET, "offset"),
    (IndexType.TIMESTAMP, "timestamp"),
    (IndexType.PRODUCER_SNAPSHOT, "producerSnapshot"),
    (IndexType.LEADER_EPOCH, "leaderEpoch"),
    (IndexType.TRANSACTION, "transaction"),
]


def encode_chunk_sizes(values: list[int]) -> str:
    """The plugin's variable chunk-size codec, zstd-framed and base64-encoded."""
    if len(values) <= 1:
        raw = struct.pack(">i", len(values)) + b"".join(struct.pack(">i", v) for v in values)
    else:
        base = min(values[:-1])
        width = max(max((v - base).bit_length() for v in values[:-1]) + 7, 8) // 8
        raw = struct.pack(">iib", len(values), base, width)
        raw += b"".join((v - base).to_bytes(width, "big") for v in values[:-1])
        raw += struct.pack(">i", values[-1])
    return base64.b64encode(bytes(cramjam.zstd.compress(raw))).decode()


@dataclass
class Written:
    metadata: RemoteLogSegmentMetadata
    log: bytes
    indexes: dict[IndexType, bytes]
    keys: dict[str, str]  # suffix -> object key


def real_segment(
    tmp: Path, records: int = 600
) -> tuple[RemoteLogSegmentMetadata, bytes, dict[IndexType, bytes]]:
    """A rolled segment written in Kafka's format, with its indexes and metadata."""
    with PartitionDirWriter(tmp / "logs", "orders", 0, segment_records=records) as w:
        w.append_records(generate_records(records + 10, value_size=300), batch_records=7)
    pdir = PartitionDir(tmp / "logs" / "orders-0")
    segment = pdir.segments()[0]
    summary = segment.summary()
    tp = TopicIdPartition(TOPIC_ID, "orders", 0)
    import uuid

    metadata = RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(tp, uuid.uuid4()),
        start_offset=summary.base_offset,
        end_offset=summary.end_offset,
        max_timestamp_ms=summary.max_timestamp_ms,
        broker_id=1,
        event_timestamp_ms=summary.max_timestamp_ms,
        segment_size_in_bytes=summary.size_in_bytes,
        segment_leader_epochs={0: summary.base_offset},
        state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        txn_index_empty=True,
    )
    assert summary.producer_snapshot_path is not None
    indexes = {
        IndexType.OFFSET: segment.offset_index_path.read_bytes(),
        IndexType.TIMESTAMP: segment.time_index_path.read_bytes(),
        IndexType.PRODUCER_SNAPSHOT: summary.producer_snapshot_path.read_bytes(),
        IndexType.LEADER_EPOCH: b"0\n1\n0 0\n",
    }
    return metadata, segment.log_path.read_bytes(), indexes


def _encrypt(data: bytes, key: bytes, aad: bytes) -> bytes:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    iv = os.urandom(12)
    return iv + AESGCM(key).encrypt(iv, data, aad)


def wrap_key(data_key: bytes, public_pem: bytes) -> bytes:
    """RSA-OAEP with SHA3-512 (hash and MGF1), RFC 8017 7.1.1, as the plugin wraps keys."""
    import hashlib

    from cryptography.hazmat.primitives import serialization

    from remote.layouts._aiven_transforms import mgf1_sha3_512

    public = serialization.load_pem_public_key(public_pem).public_numbers()  # type: ignore[union-attr]
    k, h = (public.n.bit_length() + 7) // 8, 64
    db = hashlib.sha3_512(b"").digest() + bytes(k - len(data_key) - 2 * h - 2) + b"\x01" + data_key
    seed = os.urandom(h)
    masked_db = bytes(a ^ b for a, b in zip(db, mgf1_sha3_512(seed, k - h - 1), strict=True))
    masked_seed = bytes(a ^ b for a, b in zip(seed, mgf1_sha3_512(masked_db, h), strict=True))
    em = b"\x00" + masked_seed + masked_db
    return pow(int.from_bytes(em, "big"), public.e, public.n).to_bytes(k, "big")


def write_aiven(
    client: Any,
    bucket: str,
    prefix: str,
    metadata: RemoteLogSegmentMetadata,
    log: bytes,
    indexes: dict[IndexType, bytes],
    *,
    chunk_size: int = 4096,
    compression: bool = True,
    encryption: tuple[str, bytes] | None = None,  # (key pair id, public PEM)
) -> Written:
    """Put the three objects of one segment copy, as the plugin lays them out."""
    tp = metadata.topic_id_partition
    main = (
        f"{prefix}{tp.topic}-{kafka_uuid_to_str(tp.topic_id)}/{tp.partition}/"
        f"{metadata.start_offset:020d}-{kafka_uuid_to_str(metadata.remote_log_segment_id.id)}"
    )
    data_key = os.urandom(32) if encryption else None
    aad = os.urandom(32) if encryption else None
    chunks = []
    for i in range(0, len(log), chunk_size):
        chunk = log[i : i + chunk_size]
        if compression:
            chunk = bytes(cramjam.zstd.compress(chunk))
        if data_key is not None and aad is not None:
            chunk = _encrypt(chunk, data_key, aad)
        chunks.append(chunk)
    sizes = [len(c) for c in chunks]
    if compression:
        chunk_index: dict[str, Any] = {
            "type": "variable",
            "originalChunkSize": chunk_size,
            "originalFileSize": len(log),
            "transformedChunks": encode_chunk_sizes(sizes),
        }
    else:
        chunk_index = {
            "type": "fixed",
            "originalChunkSize": chunk_size,
            "originalFileSize": len(log),
            "transformedChunkSize": sizes[0],
            "finalTransformedChunkSize": sizes[-1],
        }
    packed, positions, position = b"", {}, 0
    for kind, name in INDEX_ORDER:
        if kind not in indexes:
            positions[name] = None
            continue
        data = indexes[kind]
        if data and data_key is not None and aad is not None:
            data = _encrypt(data, data_key, aad)
        positions[name] = {"position": position, "size": len(data)}
        packed += data
        position += len(data)
    manifest: dict[str, Any] = {
        "version": "1",
        "chunkIndex": chunk_index,
        "segmentIndexes": positions,
        "compression": compression,
    }
    if encryption is not None and data_key is not None and aad is not None:
        key_id, public_pem = encryption
        wrapped = base64.b64encode(wrap_key(data_key, public_pem)).decode()
        manifest["encryption"] = {
            "dataKey": f"{key_id}:{wrapped}",
            "aad": base64.b64encode(aad).decode(),
        }
    keys = {s: f"{main}.{s}" for s in ("log", "indexes", "rsm-manifest")}
    client.put_object(Bucket=bucket, Key=keys["log"], Body=b"".join(chunks))
    client.put_object(Bucket=bucket, Key=keys["indexes"], Body=packed)
    client.put_object(Bucket=bucket, Key=keys["rsm-manifest"], Body=json.dumps(manifest).encode())
    return Written(replace(metadata), log, indexes, keys)


def rsa_key_pair(directory: Path, key_id: str) -> tuple[Path, bytes]:
    """(private key file, public PEM) of a fresh RSA 2048 key pair."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = directory / f"{key_id}-private.pem"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public
