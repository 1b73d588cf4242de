"""Kafka's default partitioner for keyed records: ``toPositive(murmur2(key)) % partitions``.

Invariant: ``murmur2`` (the core's, which also places metadata partitions) returns
exactly what Kafka's ``Utils.murmur2`` returns (a signed 32-bit int) for any bytes, so
a restore with ``--partitioner murmur2`` puts a keyed record in the partition a Java
producer would. A record without a key keeps its source partition (modulo the
target's count): Kafka spreads null keys with its sticky partitioner, which no later
run could repeat.
"""

from __future__ import annotations

from rlmm.partitioning import murmur2


def murmur2_partition(key: bytes | None, partitions: int, source_partition: int) -> int:
    """The target partition of a record under ``--partitioner murmur2``."""
    if key is None:
        return source_partition % partitions
    # Kafka's Utils.toPositive: clear the sign bit (not abs: abs(MIN_VALUE) overflows).
    return (murmur2(key) & 0x7FFFFFFF) % partitions


__all__ = ["murmur2", "murmur2_partition"]
