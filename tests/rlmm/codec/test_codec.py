"""rlmm.codec: byte-exact Kafka RemoteLogMetadataSerde records, and CodecError on bad input.

Golden records are written out field by field from Kafka's message JSON schemas
(storage/src/main/resources/message/*Record.json), independently of the encoder.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rlmm import _fast_paths
from rlmm.codec import _wire as _codec_wire
from rlmm.codec import build as _codec_build
from rlmm.codec import decode, encode
from rlmm.errors import CodecError, InvalidStateTransitionError
from rlmm.model import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

S = RemoteLogSegmentState
P = RemotePartitionDeleteState
TOPIC_ID = uuid.UUID("069f530d-db89-4466-bd43-9ae5bc224ec6")  # Bp9TDduJRGa9Q5rlvCJOxg
SEGMENT_UUID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
TP = TopicIdPartition(TOPIC_ID, "foo", 7)
SID = RemoteLogSegmentId(TP, SEGMENT_UUID)


def h(text: str) -> bytes:
    """Hex with spaces allowed, so each golden field reads as one line."""
    return bytes.fromhex(text)


# --- golden records, field by field -------------------------------------------------

TP_BYTES = [
    h("04") + b"foo",  # Name: compact string, uvarint(3 + 1)
    h("069f530d db894466 bd439ae5 bc224ec6"),  # Id: uuid, most significant byte first
    h("00000007"),  # Partition: int32
    h("00"),  # TopicIdPartitionEntry tagged fields: none
]
SID_BYTES = [
    *TP_BYTES,
    h("00112233 44556677 8899aabb ccddeeff"),  # RemoteLogSegmentIdEntry.Id
    h("00"),  # RemoteLogSegmentIdEntry tagged fields: none
]

SEGMENT = RemoteLogSegmentMetadata(
    SID,
    start_offset=100,
    end_offset=199,
    max_timestamp_ms=0x0000018BCFE5687B,
    broker_id=3,
    event_timestamp_ms=-1,
    segment_size_in_bytes=0x00100000,
    segment_leader_epochs={0: 100, 2: 150},
    state=S.COPY_SEGMENT_FINISHED,
    custom_metadata=None,
    txn_index_empty=False,
)
SEGMENT_GOLDEN = b"".join(
    [
        h("01"),  # frame version 1
        h("00"),  # apiKey 0: RemoteLogSegmentMetadataRecord
        h("00"),  # record version 0
        *SID_BYTES,
        h("00000000 00000064"),  # StartOffset 100
        h("00000000 000000c7"),  # EndOffset 199
        h("00000003"),  # BrokerId 3
        h("0000018b cfe5687b"),  # MaxTimestampMs
        h("ffffffff ffffffff"),  # EventTimestampMs -1
        h("03"),  # SegmentLeaderEpochs: compact array, uvarint(2 + 1)
        h("00000000 00000000 00000064 00"),  # {LeaderEpoch 0, Offset 100, no tags}
        h("00000002 00000000 00000096 00"),  # {LeaderEpoch 2, Offset 150, no tags}
        h("00100000"),  # SegmentSizeInBytes 1 MiB
        h("00"),  # CustomMetadata: null
        h("01"),  # RemoteLogSegmentState COPY_SEGMENT_FINISHED
        h("00"),  # tagged fields: none (TxnIndexEmpty false is the default, not written)
    ]
)

SEGMENT_TXN = RemoteLogSegmentMetadata(
    SID,
    start_offset=0,
    end_offset=0,
    max_timestamp_ms=5,
    broker_id=1,
    event_timestamp_ms=6,
    segment_size_in_bytes=0,
    segment_leader_epochs={4: 0},
    state=S.COPY_SEGMENT_STARTED,
    custom_metadata=b"\xca\xfe",
    txn_index_empty=True,
)
SEGMENT_TXN_GOLDEN = b"".join(
    [
        h("01 00 00"),  # frame 1, apiKey 0, version 0
        *SID_BYTES,
        h("00000000 00000000"),  # StartOffset 0
        h("00000000 00000000"),  # EndOffset 0
        h("00000001"),  # BrokerId 1
        h("00000000 00000005"),  # MaxTimestampMs 5
        h("00000000 00000006"),  # EventTimestampMs 6
        h("02"),  # SegmentLeaderEpochs: one entry
        h("00000004 00000000 00000000 00"),  # {LeaderEpoch 4, Offset 0}
        h("00000000"),  # SegmentSizeInBytes 0
        h("03 cafe"),  # CustomMetadata: compact bytes, uvarint(2 + 1), data
        h("00"),  # COPY_SEGMENT_STARTED
        h("01"),  # tagged fields: 1
        h("00 01 01"),  # tag 0 (TxnIndexEmpty), size 1, true
    ]
)

UPDATE = RemoteLogSegmentMetadataUpdate(SID, 1234, b"meta", S.DELETE_SEGMENT_STARTED, 2)
UPDATE_GOLDEN = b"".join(
    [
        h("01 01 00"),  # frame 1, apiKey 1: RemoteLogSegmentMetadataUpdateRecord, version 0
        *SID_BYTES,
        h("00000002"),  # BrokerId 2
        h("00000000 000004d2"),  # EventTimestampMs 1234
        h("05") + b"meta",  # CustomMetadata: uvarint(4 + 1), data
        h("02"),  # DELETE_SEGMENT_STARTED
        h("00"),  # tagged fields: none
    ]
)
UPDATE_NULL = RemoteLogSegmentMetadataUpdate(SID, 1, None, S.COPY_SEGMENT_FINISHED, -1)
UPDATE_NULL_GOLDEN = b"".join(
    [
        h("01 01 00"),
        *SID_BYTES,
        h("ffffffff"),  # BrokerId -1
        h("00000000 00000001"),  # EventTimestampMs 1
        h("00"),  # CustomMetadata: null
        h("01"),  # COPY_SEGMENT_FINISHED
        h("00"),
    ]
)

DELETE = RemotePartitionDeleteMetadata(TP, P.DELETE_PARTITION_FINISHED, 99, 5)
DELETE_GOLDEN = b"".join(
    [
        h("01 02 00"),  # frame 1, apiKey 2: RemotePartitionDeleteMetadataRecord, version 0
        *TP_BYTES,
        h("00000005"),  # BrokerId 5
        h("00000000 00000063"),  # EventTimestampMs 99
        h("02"),  # DELETE_PARTITION_FINISHED
        h("00"),  # tagged fields: none
    ]
)

GOLDEN = [
    (SEGMENT, SEGMENT_GOLDEN),
    (SEGMENT_TXN, SEGMENT_TXN_GOLDEN),
    (UPDATE, UPDATE_GOLDEN),
    (UPDATE_NULL, UPDATE_NULL_GOLDEN),
    (DELETE, DELETE_GOLDEN),
]


def same(a: RemoteLogMetadata, b: RemoteLogMetadata) -> bool:
    """Equal, including the topic name (TopicIdPartition equality ignores it, as in Kafka)."""
    return a == b and repr(a) == repr(b)


@pytest.mark.parametrize(("event", "golden"), GOLDEN, ids=lambda v: type(v).__name__)
def test_encode_matches_golden_bytes(event: RemoteLogMetadata, golden: bytes) -> None:
    assert encode(event) == golden


@pytest.mark.parametrize(("event", "golden"), GOLDEN, ids=lambda v: type(v).__name__)
def test_decode_golden_bytes(event: RemoteLogMetadata, golden: bytes) -> None:
    decoded = decode(golden)
    assert type(decoded) is type(event)
    assert same(decoded, event)


def test_fast_paths_loaded() -> None:
    # If either is False the codec still works, but ~2x slower: fail loudly instead
    # (unless RLMM_NO_FAST_PATHS asked for the slow paths: then neither may load).
    assert _codec_build.FAST_BUILD is _fast_paths.ALLOWED
    assert _codec_wire.FAST_UUID is _fast_paths.ALLOWED


def test_decoded_segment_behaves_like_a_constructed_one() -> None:
    decoded = decode(SEGMENT_GOLDEN)
    assert isinstance(decoded, RemoteLogSegmentMetadata)
    assert hash(decoded.topic_id_partition) == hash(TP)
    assert dict(decoded.segment_leader_epochs) == {0: 100, 2: 150}
    with pytest.raises(TypeError):
        decoded.segment_leader_epochs[9] = 1  # type: ignore[index]
    assert same(decoded.create_with_updates(UPDATE), SEGMENT.create_with_updates(UPDATE))


def test_accepts_bytearray_and_memoryview() -> None:
    assert same(decode(bytearray(DELETE_GOLDEN)), DELETE)
    assert same(decode(memoryview(UPDATE_GOLDEN)), UPDATE)


# --- forward compatibility: unknown tags, record version 1 -------------------------

UNKNOWN_TAG = h("01 07 02 abcd")  # 1 field: tag 7, size 2, data


def test_unknown_tags_in_top_level_and_nested_structs_are_skipped() -> None:
    data = b"".join(
        [
            h("01 00 00"),
            h("04") + b"foo",
            h("069f530d db894466 bd439ae5 bc224ec6 00000007"),
            UNKNOWN_TAG,  # TopicIdPartitionEntry
            h("00112233 44556677 8899aabb ccddeeff"),
            h("02 05 00 09 01 ff"),  # RemoteLogSegmentIdEntry: tags 5 (empty) and 9
            h("00000000 00000064 00000000 000000c7 00000003"),
            h("0000018b cfe5687b ffffffff ffffffff"),
            h("03"),
            h("00000000 00000000 00000064") + UNKNOWN_TAG,  # SegmentLeaderEpochEntry
            h("00000002 00000000 00000096 00"),
            h("00100000 00 01"),
            h("02 00 01 00 0b 03 010203"),  # tag 0 TxnIndexEmpty=false, unknown tag 11
        ]
    )
    assert same(decode(data), SEGMENT)


def test_unknown_tags_in_update_and_delete_are_skipped() -> None:
    assert same(decode(UPDATE_GOLDEN[:-1] + UNKNOWN_TAG), UPDATE)
    assert same(decode(DELETE_GOLDEN[:-1] + UNKNOWN_TAG), DELETE)


def test_record_version_1_with_its_new_tagged_fields_is_read() -> None:
    # Kafka's v1 adds BrokerLeaderEpoch (tag 1) to the segment record, and
    # BrokerLeaderEpoch (tag 0) and EndOffset (tag 1) to the update and delete records.
    seg_v1 = h("01 00 01") + SEGMENT_TXN_GOLDEN[3:-4] + h("02 00 01 01 01 04 00000009")
    assert same(decode(seg_v1), SEGMENT_TXN)
    tags = h("02 00 04 00000009 01 08 00000000 000000c7")
    assert same(decode(h("01 01 01") + UPDATE_GOLDEN[3:-1] + tags), UPDATE)
    assert same(decode(h("01 02 01") + DELETE_GOLDEN[3:-1] + tags), DELETE)


def test_non_minimal_varints_are_read() -> None:
    # A uvarint may carry redundant continuation bytes; Kafka's reader accepts them.
    assert same(decode(h("81 00 82 00 80 00") + DELETE_GOLDEN[3:]), DELETE)


def test_unsorted_and_repeated_epochs_are_normalised_like_kafka() -> None:
    data = b"".join(
        [
            SEGMENT_GOLDEN[: SEGMENT_GOLDEN.index(h("03 00000000 00000000 00000064"))],
            h("04"),  # 3 entries, out of order, epoch 2 twice: the last one wins (HashMap.put)
            h("00000002 00000000 00000001 00"),
            h("00000000 00000000 00000064 00"),
            h("00000002 00000000 00000096 00"),
            h("00100000 00 01 00"),
        ]
    )
    decoded = decode(data)
    assert isinstance(decoded, RemoteLogSegmentMetadata)
    assert list(decoded.segment_leader_epochs.items()) == [(0, 100), (2, 150)]
    assert same(decoded, SEGMENT)


# --- bad input ----------------------------------------------------------------------


def _replace(golden: bytes, old: bytes, new: bytes) -> bytes:
    assert golden.count(old) == 1, "the field to corrupt must be unique in the record"
    return golden.replace(old, new)


EPOCHS = h("03 00000000 00000000 00000064 00 00000002 00000000 00000096 00")
BAD = {
    "empty": (b"", "truncated varint frame version at byte 0"),
    "frame 0": (h("00 00 00") + SEGMENT_GOLDEN[3:], "frame version 0 at byte 0"),
    "frame 2": (h("02") + SEGMENT_GOLDEN[1:], "unknown frame version 2 at byte 0"),
    "snapshot apiKey": (h("01 03 00 00"), "RemoteLogSegmentMetadataSnapshotRecord"),
    "unknown apiKey": (h("01 09 00") + DELETE_GOLDEN[3:], "unknown apiKey 9 at byte 1"),
    "huge apiKey": (h("01 ff ff 03 00"), "unknown apiKey 65535 at byte 1"),
    "unknown version": (h("01 00 02") + SEGMENT_GOLDEN[3:], "unknown record version 2"),
    "trailing": (DELETE_GOLDEN + h("00"), f"1 trailing byte(s) at byte {len(DELETE_GOLDEN)}"),
    "varint too long": (h("01 02 00 ffffffffff01"), "longer than 5 bytes"),
    "varint over 32 bits": (h("01 02 00 ffffffff7f"), "does not fit 32 bits"),
    "name null": (h("01 02 00 00") + DELETE_GOLDEN[7:], "is null at byte 3"),
    "name too long for buffer": (h("01 02 00 e807") + b"foo", "claims 999 bytes"),
    "name negative in java": (h("01 02 00 ffffffff0f"), "claims 4294967294 bytes"),
    "name not utf-8": (h("01 02 00 04 ff fe fd") + DELETE_GOLDEN[7:], "not valid UTF-8"),
    "negative partition": (
        _replace(DELETE_GOLDEN, h("00000007 00"), h("ffffffff 00")),
        "negative Partition -1 of 'foo' at byte 23",
    ),
    "segment state 4": (
        _replace(SEGMENT_GOLDEN, h("00100000 00 01 00"), h("00100000 00 04 00")),
        "invalid RemoteLogSegmentState 4",
    ),
    "segment state -1": (
        _replace(SEGMENT_GOLDEN, h("00100000 00 01 00"), h("00100000 00 ff 00")),
        "invalid RemoteLogSegmentState -1",
    ),
    "update to STARTED": (
        UPDATE_GOLDEN[:-2] + h("00 00"),
        "an update cannot set COPY_SEGMENT_STARTED (0) at byte 62",
    ),
    "update state 7": (UPDATE_GOLDEN[:-2] + h("07 00"), "invalid"),
    "delete state 3": (DELETE_GOLDEN[:-2] + h("03 00"), "DeleteState 3 at byte"),
    "start offset negative": (
        _replace(SEGMENT_GOLDEN, h("00000000 00000064 00000000 000000c7"), h("ff" * 16)),
        "negative StartOffset -1 at byte 45",
    ),
    "end before start": (
        _replace(SEGMENT_GOLDEN, h("00000000 000000c7"), h("00000000 00000063")),
        "EndOffset 99 < StartOffset 100 at byte 53",
    ),
    "negative size": (
        _replace(SEGMENT_GOLDEN, h("00100000"), h("80000000")),
        "negative SegmentSizeInBytes -2147483648",
    ),
    "null epochs": (_replace(SEGMENT_GOLDEN, EPOCHS, h("00")), "SegmentLeaderEpochs is null"),
    "empty epochs": (_replace(SEGMENT_GOLDEN, EPOCHS, h("01")), "SegmentLeaderEpochs is empty"),
    "absurd epoch count": (
        _replace(SEGMENT_GOLDEN, EPOCHS, h("ffffffff0f")),
        "claims 4294967294 entries",
    ),
    "negative epoch": (
        _replace(SEGMENT_GOLDEN, h("00000002 00000000 00000096"), h("fffffffe 00000000 00000096")),
        "negative leader epoch entry (-2, 150)",
    ),
    "negative epoch offset": (
        _replace(SEGMENT_GOLDEN, h("00000002 00000000 00000096"), h("00000002 ffffffff ffffffff")),
        "negative leader epoch entry (2, -1)",
    ),
    "custom metadata too long": (
        _replace(UPDATE_GOLDEN, h("05") + b"meta", h("7f") + b"meta"),
        "CustomMetadata at byte 57 claims 126 bytes",
    ),
    "txn tag size 2": (SEGMENT_TXN_GOLDEN[:-3] + h("00 02 0101"), "TxnIndexEmpty tagged field"),
    "absurd tag count": (DELETE_GOLDEN[:-1] + h("ffff03"), "tagged field count 65535"),
    "absurd tag size": (DELETE_GOLDEN[:-1] + h("01 07 7f 00"), "claims 127 bytes"),
    "truncated tag": (DELETE_GOLDEN[:-1] + h("01 07 80"), "truncated varint size of tag 7"),
}


@pytest.mark.parametrize(("data", "message"), BAD.values(), ids=BAD.keys())
def test_bad_input_raises_codec_error_naming_the_place(data: bytes, message: str) -> None:
    with pytest.raises(CodecError) as info:
        decode(data)
    assert message in str(info.value)
    assert "byte" in str(info.value) or "apiKey 3" in str(info.value)


@pytest.mark.parametrize(("event", "golden"), GOLDEN, ids=lambda v: type(v).__name__)
def test_every_truncation_is_a_codec_error_with_a_position(
    event: RemoteLogMetadata, golden: bytes
) -> None:
    for cut in range(len(golden)):
        with pytest.raises(CodecError, match=r"at byte \d+"):
            decode(golden[:cut])


def test_non_bytes_input_is_a_codec_error() -> None:
    with pytest.raises(CodecError, match="bytes expected"):
        decode("01 00 00")  # type: ignore[arg-type]


def test_encode_rejects_what_kafka_could_not_read() -> None:
    with pytest.raises(CodecError, match="not a remote log metadata event"):
        encode(TP)  # type: ignore[arg-type]
    long_name = TopicIdPartition(TOPIC_ID, "x" * 0x8000, 0)
    with pytest.raises(CodecError, match="32768 bytes in UTF-8"):
        encode(RemotePartitionDeleteMetadata(long_name, P.DELETE_PARTITION_MARKED, 0, 0))
    surrogate = TopicIdPartition(TOPIC_ID, "bad\udc80", 0)
    with pytest.raises(CodecError, match="not valid UTF-8"):
        encode(RemotePartitionDeleteMetadata(surrogate, P.DELETE_PARTITION_MARKED, 0, 0))
    # The longest name Kafka reads is fine.
    ok = TopicIdPartition(TOPIC_ID, "y" * 0x7FFF, 0)
    event = RemotePartitionDeleteMetadata(ok, P.DELETE_PARTITION_MARKED, 0, 0)
    assert same(decode(encode(event)), event)


# --- property tests -----------------------------------------------------------------

uuids = st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1))
topics = st.text(max_size=40) | st.sampled_from(["foo", "__consumer_offsets", "a.b_c-d"])
int32s = st.integers(INT32_MIN, INT32_MAX)
int64s = st.integers(INT64_MIN, INT64_MAX)
customs = st.none() | st.binary(max_size=300)
tps = st.builds(TopicIdPartition, uuids, topics, st.integers(0, INT32_MAX))
sids = st.builds(RemoteLogSegmentId, tps, uuids)


@st.composite
def segments(draw: st.DrawFn) -> RemoteLogSegmentMetadata:
    start = draw(st.integers(0, INT64_MAX))
    return RemoteLogSegmentMetadata(
        draw(sids),
        start,
        draw(st.integers(start, INT64_MAX)),
        draw(int64s),
        draw(int32s),
        draw(int64s),
        draw(st.integers(0, INT32_MAX)),
        draw(
            st.dictionaries(
                st.integers(0, INT32_MAX), st.integers(0, INT64_MAX), min_size=1, max_size=5
            )
        ),
        draw(st.sampled_from(S)),
        draw(customs),
        draw(st.booleans()),
    )


updates = st.builds(
    RemoteLogSegmentMetadataUpdate,
    sids,
    int64s,
    customs,
    st.sampled_from([s for s in S if s is not S.COPY_SEGMENT_STARTED]),
    int32s,
)
deletes = st.builds(RemotePartitionDeleteMetadata, tps, st.sampled_from(P), int64s, int32s)
events = segments() | updates | deletes


@settings(max_examples=300, deadline=None)
@given(events)
def test_round_trip(event: RemoteLogMetadata) -> None:
    data = encode(event)
    decoded = decode(data)
    assert type(decoded) is type(event)
    assert same(decoded, event)
    assert encode(decoded) == data


def _decode_or_codec_error(data: bytes) -> None:
    try:
        decoded = decode(data)
    except CodecError as e:
        assert "internal decoder error" not in str(e), str(e)
        return
    assert isinstance(
        decoded,
        RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate | RemotePartitionDeleteMetadata,
    )


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_only_raise_codec_error(data: bytes) -> None:
    _decode_or_codec_error(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120).map(lambda b: h("01") + bytes([len(b) % 3, 0]) + b))
def test_arbitrary_bodies_only_raise_codec_error(data: bytes) -> None:
    _decode_or_codec_error(data)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events, st.data())
def test_mutated_and_truncated_encodings_only_raise_codec_error(
    event: RemoteLogMetadata, data: st.DataObject
) -> None:
    raw = bytearray(encode(event))
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        at = data.draw(st.integers(0, max(len(raw) - 1, 0)))
        if kind == "flip" and raw:
            raw[at] = data.draw(st.integers(0, 255))
        elif kind == "insert":
            raw[at:at] = data.draw(st.binary(min_size=1, max_size=6))
        elif kind == "delete":
            del raw[at : at + data.draw(st.integers(1, 4))]
        else:
            del raw[at:]
    _decode_or_codec_error(bytes(raw))


# Decoding validates values itself (rlmm.codec.build skips __post_init__); this checks it
# accepts exactly what the model accepts, over the whole range of each wire type.


def _uv(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@st.composite
def raw_fields(draw: st.DrawFn) -> dict[str, object]:
    """Valid field values, except (usually) one drawn from the whole range of its wire type."""
    wide = draw(st.sampled_from([None, "partition", "start", "end", "size", "epochs", "state"]))
    epoch = st.tuples(st.integers(0, 3), st.integers(0, 5))
    wide_epoch = st.tuples(st.integers(0, 3) | int32s, st.integers(0, 5) | int64s)
    return {
        "partition": draw(int32s if wide == "partition" else st.integers(0, 9)),
        "start": draw(int64s if wide == "start" else st.integers(0, 5)),
        "end": draw(int64s if wide == "end" else st.integers(5, 9)),
        "size": draw(int32s if wide == "size" else st.integers(0, 9)),
        "epochs": draw(
            st.lists(wide_epoch, max_size=3)
            if wide == "epochs"
            else st.lists(epoch, min_size=1, max_size=3)
        ),
        "state": draw(st.integers(-128, 127) if wide == "state" else st.integers(0, 3)),
    }


@settings(max_examples=400, deadline=None)
@given(raw_fields(), st.sampled_from(["segment", "update", "delete"]))
def test_decode_accepts_exactly_what_the_model_accepts(fields: dict[str, Any], kind: str) -> None:
    partition, start, end, size, epochs, state = (
        fields[k] for k in ("partition", "start", "end", "size", "epochs", "state")
    )
    tid = SEGMENT_UUID.bytes
    tp_bytes = _uv(4) + b"foo" + tid + struct.pack(">i", partition) + b"\0"
    sid_bytes = tp_bytes + tid + b"\0"
    build: object
    if kind == "segment":
        data = (
            h("01 00 00")
            + sid_bytes
            + struct.pack(">qqiqq", start, end, 1, 2, 3)
            + _uv(len(epochs) + 1)
            + b"".join(struct.pack(">iqx", e, o) for e, o in epochs)
            + struct.pack(">ixbx", size, state)
        )

        def build() -> RemoteLogMetadata:
            tp = TopicIdPartition(SEGMENT_UUID, "foo", partition)
            sid = RemoteLogSegmentId(tp, SEGMENT_UUID)
            return RemoteLogSegmentMetadata(sid, start, end, 2, 1, 3, size, dict(epochs), state)

    elif kind == "update":
        data = h("01 01 00") + sid_bytes + struct.pack(">iqxbx", 1, 2, state)

        def build() -> RemoteLogMetadata:
            tp = TopicIdPartition(SEGMENT_UUID, "foo", partition)
            sid = RemoteLogSegmentId(tp, SEGMENT_UUID)
            return RemoteLogSegmentMetadataUpdate(sid, 2, None, state, 1)

    else:
        data = h("01 02 00") + tp_bytes + struct.pack(">iqbx", 1, 2, state)

        def build() -> RemoteLogMetadata:
            tp = TopicIdPartition(SEGMENT_UUID, "foo", partition)
            return RemotePartitionDeleteMetadata(tp, state, 2, 1)

    try:
        expected = build()
    except (ValueError, InvalidStateTransitionError):
        event(f"{kind} rejected")
        with pytest.raises(CodecError):
            decode(data)
        return
    event(f"{kind} accepted")
    decoded = decode(data)
    assert same(decoded, expected)
