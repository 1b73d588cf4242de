"""Which ``__remote_log_metadata`` partition carries the events of a user partition.

Invariant: :func:`metadata_partition_for` returns exactly what Kafka's
``RemoteLogMetadataTopicPartitioner.metadataPartition`` returns for the same topic id,
partition and partition count, so a Python and a Java broker sharing one metadata topic
agree on where every user partition's events live.

Checked against apache/kafka
``storage/src/main/java/org/apache/kafka/server/log/remote/metadata/storage/
RemoteLogMetadataTopicPartitioner.java`` (commit 30884080)::

    hash = Objects.hash(topicId.getLeastSignificantBits(),
                        topicId.getMostSignificantBits(), partition)
    Utils.toPositive(Utils.murmur2(<hash as 4 big-endian bytes>)) % numMetadataTopicPartitions

and ``Utils.murmur2`` (seed 0x9747b28c, m 0x5bd1e995, r 24, little-endian 4-byte blocks).
Everything here is pure and stateless: nothing is cached, so nothing can go stale.
"""

from __future__ import annotations

import base64
import binascii
import uuid

from rlmm.model import TopicIdPartition, kafka_uuid_to_str

_MASK32 = 0xFFFFFFFF
_MURMUR_SEED = 0x9747B28C
_MURMUR_M = 0x5BD1E995
_MURMUR_R = 24


def _to_int32(value: int) -> int:
    """The signed 32-bit integer Java holds for the low 32 bits of ``value``."""
    value &= _MASK32
    return value - 0x1_0000_0000 if value & 0x8000_0000 else value


def _to_int64(value: int) -> int:
    """The signed 64-bit integer Java holds for the low 64 bits of ``value``."""
    value &= 0xFFFF_FFFF_FFFF_FFFF
    return value - (1 << 64) if value & (1 << 63) else value


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data``, as the signed 32-bit int Java returns."""
    length = len(data)
    m = _MURMUR_M
    h = (_MURMUR_SEED ^ length) & _MASK32
    full = length & ~3
    for i in range(0, full, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & _MASK32
        k ^= k >> _MURMUR_R  # k is non-negative here, so >> is Java's >>>
        k = (k * m) & _MASK32
        h = ((h * m) & _MASK32) ^ k
    # The tail falls through like Java's switch: 3 bytes also do the 2- and 1-byte steps.
    extra = length & 3
    if extra >= 3:
        h ^= data[full + 2] << 16
    if extra >= 2:
        h ^= data[full + 1] << 8
    if extra >= 1:
        h ^= data[full]
        h = (h * m) & _MASK32
    h ^= h >> 13
    h = (h * m) & _MASK32
    h ^= h >> 15
    return _to_int32(h)


def _java_long_hash(value: int) -> int:
    """``Long.hashCode(value)`` = ``(int) (value ^ (value >>> 32))``."""
    unsigned = value & 0xFFFF_FFFF_FFFF_FFFF
    return _to_int32(unsigned ^ (unsigned >> 32))


def java_objects_hash(lsb: int, msb: int, partition: int) -> int:
    """``Objects.hash(Long lsb, Long msb, Integer partition)`` with Java's 32-bit wrap."""
    result = 1
    for element in (_java_long_hash(lsb), _java_long_hash(msb), _to_int32(partition)):
        result = _to_int32(31 * result + element)
    return result


def metadata_partition_for(tp: TopicIdPartition, n: int) -> int:
    """The metadata partition (0..n-1) for user partition ``tp`` in a topic of ``n`` partitions."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise ValueError(f"metadata partition count must be an int, got {type(n).__name__}")
    if n <= 0:
        raise ValueError(f"metadata partition count must be positive, got {n} (for {tp})")
    topic_id = tp.topic_id.int
    msb = _to_int64(topic_id >> 64)
    lsb = _to_int64(topic_id)
    h = java_objects_hash(lsb, msb, tp.partition)
    return (murmur2((h & _MASK32).to_bytes(4, "big")) & 0x7FFF_FFFF) % n


def uuid_from_kafka_base64(text: str) -> uuid.UUID:
    """Parse Kafka's text form of a Uuid (URL-safe base64 of 16 bytes, no padding).

    Stricter than :func:`rlmm.model.kafka_uuid_from_str`: only the 22-character base64 form
    is accepted, so a typo cannot silently parse as some other uuid syntax.
    """
    if not isinstance(text, str) or len(text) != 22:
        raise ValueError(f"not a Kafka base64 uuid (22 characters expected): {text!r}")
    try:
        raw = base64.b64decode(text + "==", altchars=b"-_", validate=True)
    except (binascii.Error, ValueError) as e:
        raise ValueError(f"not a Kafka base64 uuid: {text!r}") from e
    if len(raw) != 16:  # pragma: no cover - 22 valid base64 chars always give 16 bytes
        raise ValueError(f"not a Kafka base64 uuid: {text!r}")
    value = uuid.UUID(bytes=raw)
    # 22 chars carry 132 bits; the last 4 must be zero or the text is not canonical.
    if uuid_to_kafka_base64(value) != text:
        raise ValueError(f"not a canonical Kafka base64 uuid: {text!r}")
    return value


def uuid_to_kafka_base64(value: uuid.UUID) -> str:
    """Kafka's text form of ``value`` (``Uuid.toString()``)."""
    return kafka_uuid_to_str(value)


__all__ = [
    "java_objects_hash",
    "metadata_partition_for",
    "murmur2",
    "uuid_from_kafka_base64",
    "uuid_to_kafka_base64",
]
