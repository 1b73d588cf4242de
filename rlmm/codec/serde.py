"""Kafka wire codec of remote log metadata events: ``encode(event)`` and ``decode(data)``.

Invariant: ``encode`` writes exactly the bytes Apache Kafka's ``RemoteLogMetadataSerde``
writes for the same event at record version 0, and ``decode`` turns any bytes into either
a valid model event or a :class:`CodecError` naming the field and byte position — never
another exception type, never a read past the input, never an allocation larger than it.

Layout (``AbstractApiMessageSerde.write``, server-common): uvarint frame version (1),
uvarint apiKey, uvarint record version, then the record body in Kafka's flexible-version
encoding. Field order, types and nullability checked against apache/kafka
``storage/src/main/resources/message/``:

* ``RemoteLogSegmentMetadataRecord.json`` (apiKey 0)
* ``RemoteLogSegmentMetadataUpdateRecord.json`` (apiKey 1)
* ``RemotePartitionDeleteMetadataRecord.json`` (apiKey 2)

(commit e3e579e7: validVersions "0", flexibleVersions "0+"; TopicIdPartitionEntry is
{Name string, Id uuid, Partition int32}; CustomMetadata is nullable bytes; TxnIndexEmpty
is tagged field 0 of the segment record). Later Kafka (commit 1acb5232) adds version 1 to
all three, which differs from version 0 only by new *tagged* fields (BrokerLeaderEpoch,
EndOffset) and which ``RemoteLogSegmentMetadataTransform`` writes as
``highestSupportedVersion()``; we write version 0 (readable by every Kafka with tiered
storage) and read versions 0 and 1, skipping the tagged fields the model has no place for.
apiKey 3 is Kafka's ``RemoteLogSegmentMetadataSnapshotRecord``, which rlmm never writes.

Decoding validates every value the way the model's ``__post_init__`` does, at the byte
where it was read, then assembles the frozen instances through rlmm.codec.build.
"""

from __future__ import annotations

import struct
from types import MappingProxyType
from typing import Final, NoReturn

import rlmm.codec.build as build
from rlmm.codec._wire import (
    MAX_STRING_LENGTH,
    encode_uvarint,
    read_compact_nullable_bytes,
    read_compact_string,
    read_tagged_count,
    read_tagged_field_header,
    read_uvarint,
    skip_tagged_fields,
    uuid_from_int,
)
from rlmm.errors import CodecError
from rlmm.model import (
    RemoteLogMetadata,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
)

FRAME_VERSION: Final = 1
SEGMENT_METADATA_API_KEY: Final = 0
SEGMENT_METADATA_UPDATE_API_KEY: Final = 1
PARTITION_DELETE_METADATA_API_KEY: Final = 2
SEGMENT_METADATA_SNAPSHOT_API_KEY: Final = 3
WRITE_VERSION: Final = 0
# Highest record version read per apiKey (see the module docstring for why 1 is safe).
HIGHEST_READ_VERSION: Final = MappingProxyType({0: 1, 1: 1, 2: 1})

_SEGMENT_RECORD: Final = "RemoteLogSegmentMetadataRecord"
_UPDATE_RECORD: Final = "RemoteLogSegmentMetadataUpdateRecord"
_DELETE_RECORD: Final = "RemotePartitionDeleteMetadataRecord"
_TXN_INDEX_EMPTY_TAG: Final = 0

# Precompiled layouts. In the encoder an "x" pad byte is a zero byte, which is exactly an
# empty tagged-field block closing a nested struct.
_ENC_SEGMENT_HEADER: Final = bytes((FRAME_VERSION, SEGMENT_METADATA_API_KEY, WRITE_VERSION))
_ENC_UPDATE_HEADER: Final = bytes((FRAME_VERSION, SEGMENT_METADATA_UPDATE_API_KEY, WRITE_VERSION))
_ENC_DELETE_HEADER: Final = bytes((FRAME_VERSION, PARTITION_DELETE_METADATA_API_KEY, WRITE_VERSION))
# TopicId, Partition, <tags>, SegmentId, <tags>, StartOffset, EndOffset, BrokerId,
# MaxTimestampMs, EventTimestampMs
_ENC_SEGMENT_FIXED: Final = struct.Struct(">16six16sxqqiqq")
_ENC_EPOCH: Final = struct.Struct(">iqx")  # LeaderEpoch, Offset, <tags>
_ENC_SIZE_NULL_STATE: Final = struct.Struct(">ixb")  # SegmentSize, null CustomMetadata, State
# TopicId, Partition, <tags>, SegmentId, <tags>, BrokerId, EventTimestampMs
_ENC_UPDATE_FIXED: Final = struct.Struct(">16six16sxiq")
# TopicId, Partition, <tags>, BrokerId, EventTimestampMs, State, <tags>
_ENC_DELETE_FIXED: Final = struct.Struct(">16sixiqbx")
_I32: Final = struct.Struct(">i")
_I8: Final = struct.Struct(">b")
_NO_TAGS: Final = b"\x00"
_NULL_BYTES: Final = b"\x00"
_TXN_INDEX_EMPTY_TRUE: Final = bytes((1, _TXN_INDEX_EMPTY_TAG, 1, 1))  # count, tag, size, true

_DEC_UUID_I32: Final = struct.Struct(">QQi")  # uuid (msb, lsb), int32
_DEC_UUID: Final = struct.Struct(">QQ")
# TopicId, Partition, <empty tags>, SegmentId, <empty tags> (pad bytes are checked first)
_DEC_SEGMENT_ID: Final = struct.Struct(">QQixQQx")
_DEC_SEGMENT_FIXED: Final = struct.Struct(">qqiqq")
_DEC_EPOCH: Final = struct.Struct(">iq")
_DEC_BROKER_TS: Final = struct.Struct(">iq")
_DEC_BROKER_TS_STATE: Final = struct.Struct(">iqb")
_MIN_EPOCH_ENTRY_BYTES: Final = _DEC_EPOCH.size + 1

_SEGMENT_STATES: Final = {s.value: s for s in RemoteLogSegmentState}
_PARTITION_DELETE_STATES: Final = {s.value: s for s in RemotePartitionDeleteState}


# ---------------------------------------------------------------------------- encode


def encode(event: RemoteLogMetadata) -> bytes:
    """The RemoteLogMetadataSerde bytes of ``event`` (record version 0)."""
    cls = type(event)
    try:
        if isinstance(event, RemoteLogSegmentMetadata):
            return _encode_segment(event)
        if isinstance(event, RemoteLogSegmentMetadataUpdate):
            return _encode_update(event)
        if isinstance(event, RemotePartitionDeleteMetadata):
            return _encode_delete(event)
    except (struct.error, AttributeError, TypeError, ValueError, OverflowError) as e:
        # Only reachable with an instance whose validation was bypassed.
        raise CodecError(f"cannot encode {cls.__name__} {_describe(event)}: {e}") from e
    raise CodecError(f"cannot encode a {cls.__name__}: not a remote log metadata event")


def _describe(event: object) -> str:
    what = getattr(event, "remote_log_segment_id", None) or getattr(
        event, "topic_id_partition", None
    )
    return f"for {what}" if what is not None else ""


def _encode_name(topic: str, event: object) -> tuple[bytes, bytes]:
    try:
        name = topic.encode("utf-8")
    except UnicodeEncodeError as e:
        raise CodecError(f"topic name {topic!r} {_describe(event)} is not valid UTF-8") from e
    length = len(name)
    if length > MAX_STRING_LENGTH:
        raise CodecError(
            f"topic name {_describe(event)} is {length} bytes in UTF-8; Kafka allows 32767"
        )
    return encode_uvarint(length + 1), name


def _encode_segment(m: RemoteLogSegmentMetadata) -> bytes:
    sid = m.remote_log_segment_id
    tp = sid.topic_id_partition
    name_length, name = _encode_name(tp.topic, m)
    epochs = m.segment_leader_epochs
    parts = [
        _ENC_SEGMENT_HEADER,
        name_length,
        name,
        _ENC_SEGMENT_FIXED.pack(
            tp.topic_id.bytes,
            tp.partition,
            sid.id.bytes,
            m.start_offset,
            m.end_offset,
            m.broker_id,
            m.max_timestamp_ms,
            m.event_timestamp_ms,
        ),
        encode_uvarint(len(epochs) + 1),
    ]
    pack_epoch = _ENC_EPOCH.pack
    # The model keeps epochs sorted, as Kafka's TreeMap does, so the array order matches.
    for epoch, offset in epochs.items():
        parts.append(pack_epoch(epoch, offset))
    custom = m.custom_metadata
    if custom is None:
        parts.append(_ENC_SIZE_NULL_STATE.pack(m.segment_size_in_bytes, m.state))
    else:
        parts.append(_I32.pack(m.segment_size_in_bytes))
        parts.append(encode_uvarint(len(custom) + 1))
        parts.append(custom)
        parts.append(_I8.pack(m.state))
    # Kafka writes a tagged field only when it differs from its default (false).
    parts.append(_TXN_INDEX_EMPTY_TRUE if m.txn_index_empty else _NO_TAGS)
    return b"".join(parts)


def _encode_update(u: RemoteLogSegmentMetadataUpdate) -> bytes:
    sid = u.remote_log_segment_id
    tp = sid.topic_id_partition
    name_length, name = _encode_name(tp.topic, u)
    fixed = _ENC_UPDATE_FIXED.pack(
        tp.topic_id.bytes, tp.partition, sid.id.bytes, u.broker_id, u.event_timestamp_ms
    )
    custom = u.custom_metadata
    if custom is None:
        return b"".join(
            (_ENC_UPDATE_HEADER, name_length, name, fixed, _NULL_BYTES, _I8.pack(u.state), _NO_TAGS)
        )
    return b"".join(
        (
            _ENC_UPDATE_HEADER,
            name_length,
            name,
            fixed,
            encode_uvarint(len(custom) + 1),
            custom,
            _I8.pack(u.state),
            _NO_TAGS,
        )
    )


def _encode_delete(d: RemotePartitionDeleteMetadata) -> bytes:
    tp = d.topic_id_partition
    name_length, name = _encode_name(tp.topic, d)
    fixed = _ENC_DELETE_FIXED.pack(
        tp.topic_id.bytes, tp.partition, d.broker_id, d.event_timestamp_ms, d.state
    )
    return b"".join((_ENC_DELETE_HEADER, name_length, name, fixed))


# ---------------------------------------------------------------------------- decode


def decode(data: bytes | bytearray | memoryview) -> RemoteLogMetadata:
    """The event encoded in ``data`` (one whole record value), or CodecError."""
    if type(data) is not bytes:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise CodecError(f"cannot decode a {type(data).__name__}: bytes expected")
        data = bytes(data)  # slices of it become the decoded custom metadata: own them
    try:
        return _decode(data)
    except CodecError:
        raise
    except Exception as e:  # safety net for the contract "CodecError and nothing else"
        raise CodecError(
            f"internal decoder error on a {len(data)}-byte record: {type(e).__name__}: {e}"
        ) from e


def _decode(data: bytes) -> RemoteLogMetadata:
    n = len(data)
    if n >= 3 and data[0] == FRAME_VERSION and data[1] < 0x80 and data[2] < 0x80:
        api_key = data[1]
        version = data[2]
        version_pos = 2
        pos = 3
    else:
        frame, pos = read_uvarint(data, 0, "frame version")
        if frame == 0:
            raise CodecError(
                "frame version 0 at byte 0 (KRaft 2.8 preview format) is not supported;"
                f" expected {FRAME_VERSION}"
            )
        if frame != FRAME_VERSION:
            raise CodecError(
                f"unknown frame version {frame} at byte 0; only {FRAME_VERSION} is supported"
            )
        api_key_pos = pos
        api_key, pos = read_uvarint(data, pos, "apiKey")
        if api_key not in HIGHEST_READ_VERSION:
            _unknown_api_key(api_key, api_key_pos)
        version_pos = pos
        version, pos = read_uvarint(data, pos, "record version")
    highest = HIGHEST_READ_VERSION.get(api_key)
    if highest is None:
        _unknown_api_key(api_key, 1)
    if version > highest:
        raise CodecError(
            f"unknown record version {version} of apiKey {api_key} at byte {version_pos};"
            f" versions 0..{highest} are supported"
        )
    event: RemoteLogMetadata
    if api_key == SEGMENT_METADATA_API_KEY:
        event, pos = _decode_segment(data, pos)
    elif api_key == SEGMENT_METADATA_UPDATE_API_KEY:
        event, pos = _decode_update(data, pos)
    else:
        event, pos = _decode_delete(data, pos)
    if pos != n:
        raise CodecError(
            f"{n - pos} trailing byte(s) at byte {pos} after a complete apiKey {api_key} record"
        )
    return event


def _unknown_api_key(api_key: int, pos: int) -> NoReturn:
    if api_key == SEGMENT_METADATA_SNAPSHOT_API_KEY:
        raise CodecError(
            f"apiKey 3 at byte {pos} is Kafka's RemoteLogSegmentMetadataSnapshotRecord,"
            " which rlmm neither produces nor consumes"
        )
    raise CodecError(f"unknown apiKey {api_key} at byte {pos}; expected 0, 1 or 2")


def _truncated(record: str, pos: int, what: str, n: int) -> CodecError:
    return CodecError(f"{record} truncated at byte {pos} reading {what} (record is {n} bytes)")


def _decode_topic_id_and_partition(
    data: bytes, pos: int, record: str, name: str
) -> tuple[int, int, int]:
    """Topic id (as int), partition, position after TopicIdPartition's tagged fields."""
    msb, lsb, partition = _DEC_UUID_I32.unpack_from(data, pos)
    if partition < 0:
        raise CodecError(f"{record}: negative Partition {partition} of {name!r} at byte {pos + 16}")
    pos += 20
    if data[pos] == 0:  # the usual empty tagged-field block
        pos += 1
    else:
        pos = skip_tagged_fields(data, pos, f"{record} TopicIdPartition")
    return (msb << 64) | lsb, partition, pos


def _decode_segment_id(data: bytes, pos: int, record: str) -> tuple[RemoteLogSegmentId, int]:
    name, pos = read_compact_string(data, pos, f"{record} TopicIdPartition.Name")
    if data[pos + 20] == 0 and data[pos + 37] == 0:
        # Both nested structs close with an empty tagged-field block (what every writer
        # produces today): one unpack covers TopicId, Partition, SegmentId.
        t_msb, t_lsb, partition, s_msb, s_lsb = _DEC_SEGMENT_ID.unpack_from(data, pos)
        if partition < 0:
            raise CodecError(
                f"{record}: negative Partition {partition} of {name!r} at byte {pos + 16}"
            )
        topic_id = (t_msb << 64) | t_lsb
        pos += _DEC_SEGMENT_ID.size
    else:
        topic_id, partition, pos = _decode_topic_id_and_partition(data, pos, record, name)
        s_msb, s_lsb = _DEC_UUID.unpack_from(data, pos)
        pos += 16
        if data[pos] == 0:
            pos += 1
        else:
            pos = skip_tagged_fields(data, pos, f"{record} RemoteLogSegmentId")
    tp = build.topic_id_partition(uuid_from_int(topic_id), name, partition)
    return build.segment_id(tp, uuid_from_int((s_msb << 64) | s_lsb)), pos


def _decode_segment(data: bytes, pos: int) -> tuple[RemoteLogSegmentMetadata, int]:
    record = _SEGMENT_RECORD
    what = "RemoteLogSegmentId"
    try:
        sid, pos = _decode_segment_id(data, pos, record)
        what = "StartOffset..EventTimestampMs"
        start, end, broker_id, max_ts, event_ts = _DEC_SEGMENT_FIXED.unpack_from(data, pos)
        if start < 0:
            raise CodecError(f"{record}: negative StartOffset {start} at byte {pos} for {sid}")
        if end < start:
            raise CodecError(
                f"{record}: EndOffset {end} < StartOffset {start} at byte {pos + 8} for {sid}"
            )
        pos += _DEC_SEGMENT_FIXED.size
        what = "SegmentLeaderEpochs"
        epochs, pos = _decode_epochs(data, pos, sid)
        what = "SegmentSizeInBytes"
        size = _I32.unpack_from(data, pos)[0]
        if size < 0:
            raise CodecError(
                f"{record}: negative SegmentSizeInBytes {size} at byte {pos} for {sid}"
            )
        pos += 4
        what = "CustomMetadata"
        custom, pos = read_compact_nullable_bytes(data, pos, f"{record} CustomMetadata")
        what = "RemoteLogSegmentState"
        state = _SEGMENT_STATES.get(data[pos])
        if state is None:
            raise CodecError(
                f"{record}: invalid RemoteLogSegmentState {_I8.unpack_from(data, pos)[0]}"
                f" at byte {pos} for {sid}"
            )
        pos += 1
        what = "tagged fields"
        txn_index_empty = False
        if data[pos] == 0:
            pos += 1
        elif data[pos : pos + 3] == _TXN_INDEX_EMPTY_TRUE[:3] and pos + 4 == len(data):
            txn_index_empty = data[pos + 3] != 0  # the one tag Kafka writes, alone
            pos += 4
        else:
            txn_index_empty, pos = _decode_segment_tags(data, pos, sid)
    except (struct.error, IndexError) as e:
        raise _truncated(record, pos, what, len(data)) from e
    return build.segment_metadata(
        sid, start, end, max_ts, broker_id, event_ts, size, epochs, state, custom, txn_index_empty
    ), pos


def _decode_epochs(data: bytes, pos: int, sid: RemoteLogSegmentId) -> tuple[dict[int, int], int]:
    record = _SEGMENT_RECORD
    start_pos = pos
    raw = data[pos]
    if raw < 0x80:
        pos += 1
    else:
        raw, pos = read_uvarint(data, pos, f"{record} SegmentLeaderEpochs length")
    if raw == 0:
        raise CodecError(f"{record}: SegmentLeaderEpochs is null at byte {start_pos} for {sid}")
    count = raw - 1
    if count == 0:
        raise CodecError(
            f"{record}: SegmentLeaderEpochs is empty at byte {start_pos} for {sid};"
            " a segment has at least one leader epoch"
        )
    if count > (len(data) - pos) // _MIN_EPOCH_ENTRY_BYTES:
        raise CodecError(
            f"{record}: SegmentLeaderEpochs at byte {start_pos} claims {count} entries,"
            f" more than the remaining {len(data) - pos} bytes can hold"
        )
    epochs: dict[int, int] = {}
    unpack_epoch = _DEC_EPOCH.unpack_from
    last = -1
    in_order = True
    negative_at = -1
    for _ in range(count):
        epoch, offset = unpack_epoch(data, pos)
        if (epoch < 0 or offset < 0) and negative_at < 0:
            negative_at = pos
        pos += 12
        if data[pos] == 0:
            pos += 1
        else:
            pos = skip_tagged_fields(data, pos, f"{record} SegmentLeaderEpochEntry")
        if epoch <= last:
            in_order = False
        last = epoch
        # A repeated epoch keeps the last offset, like Kafka's HashMap.put in the transform.
        epochs[epoch] = offset
    if negative_at >= 0:
        # Judged after repeats collapse (last wins), exactly as the model sees the map.
        for epoch, offset in epochs.items():
            if epoch < 0 or offset < 0:
                raise CodecError(
                    f"{record}: negative leader epoch entry ({epoch}, {offset})"
                    f" in the array at byte {start_pos} for {sid}"
                )
    if not in_order:
        epochs = dict(sorted(epochs.items()))
    return epochs, pos


def _decode_segment_tags(data: bytes, pos: int, sid: RemoteLogSegmentId) -> tuple[bool, int]:
    record = _SEGMENT_RECORD
    txn_index_empty = False
    count, pos = read_tagged_count(data, pos, record)
    for _ in range(count):
        tag_pos = pos
        tag, size, pos = read_tagged_field_header(data, pos, record)
        if tag == _TXN_INDEX_EMPTY_TAG:
            if size != 1:
                raise CodecError(
                    f"{record}: TxnIndexEmpty tagged field at byte {tag_pos} has size {size},"
                    f" expected 1, for {sid}"
                )
            txn_index_empty = data[pos] != 0
        pos += size  # other tags (e.g. version 1's BrokerLeaderEpoch) are skipped
    return txn_index_empty, pos


def _decode_update(data: bytes, pos: int) -> tuple[RemoteLogSegmentMetadataUpdate, int]:
    record = _UPDATE_RECORD
    what = "RemoteLogSegmentId"
    try:
        sid, pos = _decode_segment_id(data, pos, record)
        what = "BrokerId, EventTimestampMs"
        broker_id, event_ts = _DEC_BROKER_TS.unpack_from(data, pos)
        pos += _DEC_BROKER_TS.size
        what = "CustomMetadata"
        custom, pos = read_compact_nullable_bytes(data, pos, f"{record} CustomMetadata")
        what = "RemoteLogSegmentState"
        state = _SEGMENT_STATES.get(data[pos])
        if state is None or state is RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            value = _I8.unpack_from(data, pos)[0]
            reason = (
                "an update cannot set COPY_SEGMENT_STARTED"
                if state is not None
                else "invalid RemoteLogSegmentState"
            )
            raise CodecError(f"{record}: {reason} ({value}) at byte {pos} for {sid}")
        pos += 1
        what = "tagged fields"
        if data[pos] == 0:
            pos += 1
        else:
            pos = skip_tagged_fields(data, pos, record)
    except (struct.error, IndexError) as e:
        raise _truncated(record, pos, what, len(data)) from e
    return build.segment_update(sid, event_ts, custom, state, broker_id), pos


def _decode_delete(data: bytes, pos: int) -> tuple[RemotePartitionDeleteMetadata, int]:
    record = _DELETE_RECORD
    what = "TopicIdPartition"
    try:
        name, pos = read_compact_string(data, pos, f"{record} TopicIdPartition.Name")
        topic_id, partition, pos = _decode_topic_id_and_partition(data, pos, record, name)
        what = "BrokerId, EventTimestampMs, RemotePartitionDeleteState"
        broker_id, event_ts, state_id = _DEC_BROKER_TS_STATE.unpack_from(data, pos)
        state = _PARTITION_DELETE_STATES.get(state_id)
        if state is None:
            raise CodecError(
                f"{record}: invalid RemotePartitionDeleteState {state_id} at byte"
                f" {pos + _DEC_BROKER_TS.size} for {name}-{partition}"
            )
        pos += _DEC_BROKER_TS_STATE.size
        what = "tagged fields"
        if data[pos] == 0:
            pos += 1
        else:
            pos = skip_tagged_fields(data, pos, record)
    except (struct.error, IndexError) as e:
        raise _truncated(record, pos, what, len(data)) from e
    tp = build.topic_id_partition(uuid_from_int(topic_id), name, partition)
    return build.partition_delete(tp, state, event_ts, broker_id), pos
