"""Build rlmm.model instances for the decoder, skipping ``__post_init__`` when that is safe.

Invariant: the decoder (rlmm.codec) performs every check the model's ``__post_init__``
performs, on the decoded values, before calling these builders; the builders then only
assemble the frozen instances. That halves the cost of a decode (model validation was
~13 us per segment event, the whole budget is 10 us per round trip).

Safety net: the fast builders are used only if each model class still has exactly the
fields listed here (checked at import) and ``RLMM_NO_FAST_PATHS`` is not set; otherwise
every builder calls the public constructor, which validates again. ``FAST_BUILD`` says
which path loaded; the test suite fails if the fast path silently did not load, and a
property test checks that decode accepts exactly what the model constructors accept.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from rlmm import _fast_paths
from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

_EXPECTED_FIELDS: Final[dict[type, tuple[str, ...]]] = {
    TopicIdPartition: ("topic_id", "topic", "partition", "_hash"),
    RemoteLogSegmentId: ("topic_id_partition", "id", "_hash"),
    RemoteLogSegmentMetadata: (
        "remote_log_segment_id",
        "start_offset",
        "end_offset",
        "max_timestamp_ms",
        "broker_id",
        "event_timestamp_ms",
        "segment_size_in_bytes",
        "segment_leader_epochs",
        "state",
        "custom_metadata",
        "txn_index_empty",
    ),
    RemoteLogSegmentMetadataUpdate: (
        "remote_log_segment_id",
        "event_timestamp_ms",
        "custom_metadata",
        "state",
        "broker_id",
    ),
    RemotePartitionDeleteMetadata: (
        "topic_id_partition",
        "state",
        "event_timestamp_ms",
        "broker_id",
    ),
}


def _model_unchanged() -> bool:
    for cls, names in _EXPECTED_FIELDS.items():
        if tuple(f.name for f in dataclasses.fields(cls)) != names:
            return False
        if not hasattr(cls, "__slots__"):
            return False
    return True


FAST_BUILD: Final = _fast_paths.ALLOWED and _model_unchanged()

_new = object.__new__
_set = object.__setattr__


def topic_id_partition(topic_id: uuid.UUID, topic: str, partition: int) -> TopicIdPartition:
    if not FAST_BUILD:
        return TopicIdPartition(topic_id, topic, partition)
    o: TopicIdPartition = _new(TopicIdPartition)
    _set(o, "topic_id", topic_id)
    _set(o, "topic", topic)
    _set(o, "partition", partition)
    _set(o, "_hash", hash((topic_id.int, partition)))  # as TopicIdPartition.__post_init__
    return o


def segment_id(tp: TopicIdPartition, id_: uuid.UUID) -> RemoteLogSegmentId:
    if not FAST_BUILD:
        return RemoteLogSegmentId(tp, id_)
    o: RemoteLogSegmentId = _new(RemoteLogSegmentId)
    _set(o, "topic_id_partition", tp)
    _set(o, "id", id_)
    _set(o, "_hash", hash(id_.int))  # as RemoteLogSegmentId.__post_init__
    return o


def segment_metadata(
    sid: RemoteLogSegmentId,
    start_offset: int,
    end_offset: int,
    max_timestamp_ms: int,
    broker_id: int,
    event_timestamp_ms: int,
    segment_size_in_bytes: int,
    segment_leader_epochs: dict[int, int],
    state: RemoteLogSegmentState,
    custom_metadata: bytes | None,
    txn_index_empty: bool,
) -> RemoteLogSegmentMetadata:
    """``segment_leader_epochs`` must be sorted by epoch already (the model's invariant)."""
    if not FAST_BUILD:
        return RemoteLogSegmentMetadata(
            sid,
            start_offset,
            end_offset,
            max_timestamp_ms,
            broker_id,
            event_timestamp_ms,
            segment_size_in_bytes,
            segment_leader_epochs,
            state,
            custom_metadata,
            txn_index_empty,
        )
    o: RemoteLogSegmentMetadata = _new(RemoteLogSegmentMetadata)
    _set(o, "remote_log_segment_id", sid)
    _set(o, "start_offset", start_offset)
    _set(o, "end_offset", end_offset)
    _set(o, "max_timestamp_ms", max_timestamp_ms)
    _set(o, "broker_id", broker_id)
    _set(o, "event_timestamp_ms", event_timestamp_ms)
    _set(o, "segment_size_in_bytes", segment_size_in_bytes)
    epochs: Mapping[int, int] = MappingProxyType(segment_leader_epochs)
    _set(o, "segment_leader_epochs", epochs)
    _set(o, "state", state)
    _set(o, "custom_metadata", custom_metadata)
    _set(o, "txn_index_empty", txn_index_empty)
    return o


def segment_update(
    sid: RemoteLogSegmentId,
    event_timestamp_ms: int,
    custom_metadata: bytes | None,
    state: RemoteLogSegmentState,
    broker_id: int,
) -> RemoteLogSegmentMetadataUpdate:
    if not FAST_BUILD:
        return RemoteLogSegmentMetadataUpdate(
            sid, event_timestamp_ms, custom_metadata, state, broker_id
        )
    o: RemoteLogSegmentMetadataUpdate = _new(RemoteLogSegmentMetadataUpdate)
    _set(o, "remote_log_segment_id", sid)
    _set(o, "event_timestamp_ms", event_timestamp_ms)
    _set(o, "custom_metadata", custom_metadata)
    _set(o, "state", state)
    _set(o, "broker_id", broker_id)
    return o


def partition_delete(
    tp: TopicIdPartition,
    state: RemotePartitionDeleteState,
    event_timestamp_ms: int,
    broker_id: int,
) -> RemotePartitionDeleteMetadata:
    if not FAST_BUILD:
        return RemotePartitionDeleteMetadata(tp, state, event_timestamp_ms, broker_id)
    o: RemotePartitionDeleteMetadata = _new(RemotePartitionDeleteMetadata)
    _set(o, "topic_id_partition", tp)
    _set(o, "state", state)
    _set(o, "event_timestamp_ms", event_timestamp_ms)
    _set(o, "broker_id", broker_id)
    return o
