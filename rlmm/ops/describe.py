"""Plain, JSON-ready descriptions of the metadata model, with KIP-405's names in snake_case.

Invariant: the field names produced here are the stable vocabulary of every tool
output (``rlmm --json``, event dumps): ``topic``, ``partition``, ``topic_id``,
``segment_id`` (Kafka's base64 uuid text), ``start_offset``, ``end_offset``,
``segment_leader_epochs``, ``segment_size_in_bytes``, ``max_timestamp_ms``,
``event_timestamp_ms``, ``broker_id``, ``state`` (Kafka's constant name),
``smallest_timestamp_ms`` (the smallest record timestamp rlmm's manifest recorded;
null when the writer recorded none). Adding a field is fine; renaming one breaks
operators' scripts.
"""

from __future__ import annotations

import base64
from typing import Any

from remote.manifest import SegmentManifest
from rlmm.model import (
    RemoteLogMetadata,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
    kafka_uuid_to_str,
)


def partition_fields(tp: TopicIdPartition) -> dict[str, Any]:
    return {
        "topic": tp.topic,
        "partition": tp.partition,
        "topic_id": kafka_uuid_to_str(tp.topic_id),
    }


def custom_metadata_text(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def smallest_timestamp_ms(m: RemoteLogSegmentMetadata) -> int | None:
    """The smallest record timestamp in rlmm's manifest (version 2), else None."""
    manifest = SegmentManifest.of(m)
    return None if manifest is None else manifest.smallest_timestamp_ms


def segment_fields(m: RemoteLogSegmentMetadata) -> dict[str, Any]:
    """Every field of one segment's metadata."""
    return {
        **partition_fields(m.topic_id_partition),
        "segment_id": kafka_uuid_to_str(m.remote_log_segment_id.id),
        "start_offset": m.start_offset,
        "end_offset": m.end_offset,
        "segment_leader_epochs": {str(e): o for e, o in m.segment_leader_epochs.items()},
        "segment_size_in_bytes": m.segment_size_in_bytes,
        "max_timestamp_ms": m.max_timestamp_ms,
        "smallest_timestamp_ms": smallest_timestamp_ms(m),
        "event_timestamp_ms": m.event_timestamp_ms,
        "broker_id": m.broker_id,
        "state": m.state.name,
        "txn_index_empty": m.txn_index_empty,
        "custom_metadata": custom_metadata_text(m.custom_metadata),
    }


def event_fields(event: RemoteLogMetadata) -> dict[str, Any]:
    """One metadata event: ``type`` (Kafka's class name) and its fields."""
    if isinstance(event, RemoteLogSegmentMetadata):
        return {"type": "RemoteLogSegmentMetadata", **segment_fields(event)}
    if isinstance(event, RemoteLogSegmentMetadataUpdate):
        sid = event.remote_log_segment_id
        return {
            "type": "RemoteLogSegmentMetadataUpdate",
            **partition_fields(sid.topic_id_partition),
            "segment_id": kafka_uuid_to_str(sid.id),
            "state": event.state.name,
            "event_timestamp_ms": event.event_timestamp_ms,
            "broker_id": event.broker_id,
            "custom_metadata": custom_metadata_text(event.custom_metadata),
        }
    if isinstance(event, RemotePartitionDeleteMetadata):
        return {
            "type": "RemotePartitionDeleteMetadata",
            **partition_fields(event.topic_id_partition),
            "state": event.state.name,
            "event_timestamp_ms": event.event_timestamp_ms,
            "broker_id": event.broker_id,
        }
    raise TypeError(f"not a remote log metadata event: {type(event).__name__}")


__all__ = ["custom_metadata_text", "event_fields", "partition_fields", "segment_fields"]
