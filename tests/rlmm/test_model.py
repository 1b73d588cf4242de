"""Model validation, state machines and Kafka uuid text."""

from __future__ import annotations

import pickle
import uuid

import pytest

from rlmm.errors import InvalidStateTransitionError
from rlmm.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
    TopicIdPartition,
    check_segment_transition,
    is_valid_partition_delete_transition,
    is_valid_segment_transition,
    kafka_uuid_from_str,
    kafka_uuid_to_str,
)
from tests.rlmm.factories import S, segment, tp, update


def test_topic_id_partition_equality_ignores_topic_name() -> None:
    a = TopicIdPartition(uuid.UUID(int=1), "a", 0)
    b = TopicIdPartition(uuid.UUID(int=1), "renamed", 0)
    assert a == b and hash(a) == hash(b)
    assert a != TopicIdPartition(uuid.UUID(int=1), "a", 1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start": -1, "end": 5}, "start_offset"),
        ({"start": 10, "end": 5}, "end_offset 5 < start_offset 10"),
        ({"epochs": {}}, "non-empty"),
    ],
)
def test_segment_metadata_is_validated(kwargs: dict, message: str) -> None:
    args = {"start": 0, "end": 10, "epochs": {0: 0}} | kwargs
    with pytest.raises(ValueError, match=message):
        segment(tp(), args["start"], args["end"], args["epochs"])


def test_segment_metadata_is_immutable_and_picklable() -> None:
    m = segment(tp(), 0, 10, {2: 5, 0: 0})
    assert list(m.segment_leader_epochs) == [0, 2]  # sorted by epoch
    with pytest.raises(AttributeError):
        m.start_offset = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        m.segment_leader_epochs[1] = 1  # type: ignore[index]
    assert pickle.loads(pickle.dumps(m)) == m


def test_create_with_updates_takes_update_fields() -> None:
    m = segment(tp(), 0, 10, {0: 0})
    u = RemoteLogSegmentMetadataUpdate(
        m.remote_log_segment_id, 99, b"x", S.COPY_SEGMENT_FINISHED, 7
    )
    n = m.create_with_updates(u)
    assert (n.state, n.event_timestamp_ms, n.custom_metadata, n.broker_id) == (
        S.COPY_SEGMENT_FINISHED,
        99,
        b"x",
        7,
    )
    assert n.start_offset == 0 and n.segment_leader_epochs == m.segment_leader_epochs
    other = segment(tp(), 0, 10, {0: 0})
    with pytest.raises(ValueError, match="applied to"):
        other.create_with_updates(u)


def test_update_cannot_be_started() -> None:
    m = segment(tp(), 0, 10, {0: 0})
    with pytest.raises(InvalidStateTransitionError):
        update(m, S.COPY_SEGMENT_STARTED)


LEGAL = {
    (None, S.COPY_SEGMENT_STARTED),
    (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED),
    (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED),
    (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED),
    (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED),
} | {(s, s) for s in RemoteLogSegmentState}


@pytest.mark.parametrize("source", [None, *RemoteLogSegmentState])
@pytest.mark.parametrize("target", list(RemoteLogSegmentState))
def test_segment_transitions(
    source: RemoteLogSegmentState | None, target: RemoteLogSegmentState
) -> None:
    legal = (source, target) in LEGAL
    assert is_valid_segment_transition(source, target) is legal
    if not legal:
        with pytest.raises(InvalidStateTransitionError, match=target.name):
            check_segment_transition(source, target, "seg-x")


def test_partition_delete_transitions() -> None:
    P = RemotePartitionDeleteState
    assert is_valid_partition_delete_transition(None, P.DELETE_PARTITION_MARKED)
    assert not is_valid_partition_delete_transition(None, P.DELETE_PARTITION_STARTED)
    assert is_valid_partition_delete_transition(
        P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED
    )
    assert not is_valid_partition_delete_transition(
        P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_FINISHED
    )
    assert is_valid_partition_delete_transition(
        P.DELETE_PARTITION_STARTED, P.DELETE_PARTITION_FINISHED
    )
    assert not is_valid_partition_delete_transition(
        P.DELETE_PARTITION_FINISHED, P.DELETE_PARTITION_MARKED
    )


def test_kafka_uuid_text() -> None:
    u = kafka_uuid_from_str("Bp9TDduJRGa9Q5rlvCJOxg")
    assert kafka_uuid_to_str(u) == "Bp9TDduJRGa9Q5rlvCJOxg"
    assert kafka_uuid_from_str(str(u)) == u
    with pytest.raises(ValueError, match="not a Kafka uuid"):
        kafka_uuid_from_str("nope")


def test_segment_id_generate_new_is_unique() -> None:
    a = RemoteLogSegmentId.generate_new(tp())
    b = RemoteLogSegmentId.generate_new(tp())
    assert a != b and a.topic_id_partition == b.topic_id_partition


def test_metadata_rejects_wrong_types() -> None:
    with pytest.raises(ValueError, match="remote_log_segment_id"):
        RemoteLogSegmentMetadata("x", 0, 1, 0, 0, 0, 0, {0: 0})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="custom_metadata"):
        RemoteLogSegmentMetadata(
            RemoteLogSegmentId.generate_new(tp()),
            0,
            1,
            0,
            0,
            0,
            0,
            {0: 0},
            custom_metadata="s",  # type: ignore[arg-type]
        )
