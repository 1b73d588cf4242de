"""rlmm.partitioning: the same metadata partition as Kafka's RemoteLogMetadataTopicPartitioner."""

from __future__ import annotations

import struct
import uuid
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlmm.model import INT32_MAX, TopicIdPartition, kafka_uuid_from_str
from rlmm.partitioning import (
    java_objects_hash,
    metadata_partition_for,
    murmur2,
    uuid_from_kafka_base64,
    uuid_to_kafka_base64,
)

with warnings.catch_warnings():
    # kafka-python 3.0 calls the deprecated importlib.resources.read_text on import.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.partitioner.default import murmur2 as kafka_python_murmur2

KAFKA_TOPIC_ID = "Bp9TDduJRGa9Q5rlvCJOxg"


def test_kafka_vector_topic_id_partitions_0_to_4_of_5() -> None:
    topic_id = uuid_from_kafka_base64(KAFKA_TOPIC_ID)
    assert topic_id == uuid.UUID("069f530d-db89-4466-bd43-9ae5bc224ec6")
    got = [metadata_partition_for(TopicIdPartition(topic_id, "foo", p), 5) for p in range(5)]
    assert got == [2, 2, 2, 4, 3]


# apache/kafka clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java testMurmur2
@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
        (bytes([12, 42, 56, 24, 109, 111]), 274204207),
    ],
)
def test_murmur2_matches_kafka_utils_test(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_murmur2_matches_kafka_python(data: bytes) -> None:
    # kafka-python returns the unsigned 32-bit value; ours is Java's signed int.
    got = murmur2(data)
    assert -(2**31) <= got < 2**31
    assert got & 0xFFFFFFFF == kafka_python_murmur2(data)


def test_java_objects_hash_by_hand() -> None:
    # Objects.hash(1L, 2L, 3) = 31 * (31 * (31 * 1 + 1) + 2) + 3
    assert java_objects_hash(1, 2, 3) == 30817
    # Long.hashCode(-1L) = (int) (0xFFFF_FFFF_FFFF_FFFF ^ 0x0000_0000_FFFF_FFFF) = 0
    assert java_objects_hash(-1, -1, 0) == 29791
    # 32-bit wrap: Long.hashCode(Long.MIN_VALUE) = Integer.MIN_VALUE
    assert java_objects_hash(-(2**63), 0, 0) == (31 * (31 * (31 - 2**31))) % 2**32 - 2**32


def _reference_partition(topic_id: uuid.UUID, partition: int, n: int) -> int:
    """A second, struct-based transcription of the Java code, for cross-checking."""
    msb, lsb = struct.unpack(">qq", topic_id.bytes)

    def long_hash(v: int) -> int:
        hi, lo = struct.unpack(">ii", struct.pack(">q", v))
        return struct.unpack(">i", struct.pack(">I", (hi ^ lo) & 0xFFFFFFFF))[0]

    r = 1
    for x in (long_hash(lsb), long_hash(msb), partition):
        r = struct.unpack(">i", struct.pack(">I", (31 * r + x) & 0xFFFFFFFF))[0]
    m = kafka_python_murmur2(struct.pack(">i", r))
    return (m & 0x7FFFFFFF) % n


@settings(max_examples=300, deadline=None)
@given(
    st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1)),
    st.integers(0, INT32_MAX),
    st.integers(1, 1000),
)
def test_metadata_partition_matches_reference(topic_id: uuid.UUID, partition: int, n: int) -> None:
    tp = TopicIdPartition(topic_id, "t", partition)
    got = metadata_partition_for(tp, n)
    assert 0 <= got < n
    assert got == _reference_partition(topic_id, partition, n)


def test_topic_name_does_not_matter() -> None:
    topic_id = uuid_from_kafka_base64(KAFKA_TOPIC_ID)
    a = metadata_partition_for(TopicIdPartition(topic_id, "a", 11), 50)
    b = metadata_partition_for(TopicIdPartition(topic_id, "b", 11), 50)
    assert a == b


@pytest.mark.parametrize("n", [0, -1, 1.5, True, "5", None])
def test_bad_partition_count_is_a_value_error(n: object) -> None:
    tp = TopicIdPartition(uuid.uuid4(), "t", 0)
    with pytest.raises(ValueError, match="metadata partition count"):
        metadata_partition_for(tp, n)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1)))
def test_kafka_base64_round_trip(value: uuid.UUID) -> None:
    text = uuid_to_kafka_base64(value)
    assert len(text) == 22
    assert "=" not in text and "+" not in text and "/" not in text
    assert uuid_from_kafka_base64(text) == value
    assert kafka_uuid_from_str(text) == value


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Bp9TDduJRGa9Q5rlvCJOx",  # 21 chars
        "Bp9TDduJRGa9Q5rlvCJOxg==",  # padded
        "Bp9TDduJRGa9Q5rlvCJO+g",  # standard alphabet, not URL-safe
        "Bp9TDduJRGa9Q5rlvCJO g",
        "Bp9TDduJRGa9Q5rlvCJOxh",  # non-zero trailing bits: not what Kafka would print
        "069f530d-db89-4466-bd43-9ae5bc224ec6",
    ],
)
def test_bad_kafka_base64_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError, match="Kafka base64 uuid"):
        uuid_from_kafka_base64(text)
