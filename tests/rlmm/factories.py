"""Builders of model objects for tests (one place, so tests read as scenarios)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)

S = RemoteLogSegmentState
TOPIC_ID = uuid.UUID("069f530d-db89-4466-bd43-9ae5bc224ec6")


def tp(partition: int = 0, topic: str = "foo", topic_id: uuid.UUID = TOPIC_ID) -> TopicIdPartition:
    return TopicIdPartition(topic_id, topic, partition)


def segment(
    partition: TopicIdPartition,
    start: int,
    end: int,
    epochs: Mapping[int, int],
    *,
    size: int = 1024,
    txn_index_empty: bool = False,
    broker_id: int = 0,
) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate_new(partition),
        start,
        end,
        max_timestamp_ms=end,
        broker_id=broker_id,
        event_timestamp_ms=1,
        segment_size_in_bytes=size,
        segment_leader_epochs=epochs,
        state=S.COPY_SEGMENT_STARTED,
        txn_index_empty=txn_index_empty,
    )


def update(
    metadata: RemoteLogSegmentMetadata,
    state: RemoteLogSegmentState,
    custom: bytes | None = None,
) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(
        metadata.remote_log_segment_id, 2, custom, state, metadata.broker_id
    )
