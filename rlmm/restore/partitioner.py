"""Kafka's default partitioner for keyed records: ``toPositive(murmur2(key)) % partitions``.

Invariant: ``murmur2`` returns exactly what Kafka's ``Utils.murmur2`` returns (a signed
32-bit int) for any bytes, so a restore with ``--partitioner murmur2`` puts a keyed
record in the partition a Java producer would. A record without a key keeps its source
partition (modulo the target's count): Kafka spreads null keys with its sticky
partitioner, which no later run could repeat.
"""

from __future__ import annotations

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``org.apache.kafka.common.utils.Utils.murmur2`` (signed 32-bit result)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def murmur2_partition(key: bytes | None, partitions: int, source_partition: int) -> int:
    """The target partition of a record under ``--partitioner murmur2``."""
    if key is None:
        return source_partition % partitions
    # Kafka's Utils.toPositive: clear the sign bit (not abs: abs(MIN_VALUE) overflows).
    return (murmur2(key) & 0x7FFFFFFF) % partitions


__all__ = ["murmur2", "murmur2_partition"]
