"""KIP-405 remote log metadata model: immutable, validated value types.

Invariant: every instance is valid once constructed (offsets, epochs and states are
checked in ``__post_init__``) and never changes; the legal state machines live here,
in :func:`is_valid_segment_transition` and :func:`is_valid_partition_delete_transition`,
and every other module asks these two functions.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from rlmm.errors import InvalidStateTransitionError


class RemoteLogSegmentState(enum.IntEnum):
    """State of one remote log segment copy (Kafka's ids)."""

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


class RemotePartitionDeleteState(enum.IntEnum):
    """State of the deletion of a whole user partition from remote storage (Kafka's ids)."""

    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


_S = RemoteLogSegmentState
_SEGMENT_TRANSITIONS: dict[RemoteLogSegmentState | None, frozenset[RemoteLogSegmentState]] = {
    None: frozenset({_S.COPY_SEGMENT_STARTED}),
    _S.COPY_SEGMENT_STARTED: frozenset(
        {_S.COPY_SEGMENT_STARTED, _S.COPY_SEGMENT_FINISHED, _S.DELETE_SEGMENT_STARTED}
    ),
    _S.COPY_SEGMENT_FINISHED: frozenset({_S.COPY_SEGMENT_FINISHED, _S.DELETE_SEGMENT_STARTED}),
    _S.DELETE_SEGMENT_STARTED: frozenset({_S.DELETE_SEGMENT_STARTED, _S.DELETE_SEGMENT_FINISHED}),
    _S.DELETE_SEGMENT_FINISHED: frozenset({_S.DELETE_SEGMENT_FINISHED}),
}
_P = RemotePartitionDeleteState
_PARTITION_TRANSITIONS: dict[
    RemotePartitionDeleteState | None, frozenset[RemotePartitionDeleteState]
] = {
    None: frozenset({_P.DELETE_PARTITION_MARKED}),
    _P.DELETE_PARTITION_MARKED: frozenset(
        {_P.DELETE_PARTITION_MARKED, _P.DELETE_PARTITION_STARTED}
    ),
    _P.DELETE_PARTITION_STARTED: frozenset(
        {_P.DELETE_PARTITION_STARTED, _P.DELETE_PARTITION_FINISHED}
    ),
    _P.DELETE_PARTITION_FINISHED: frozenset({_P.DELETE_PARTITION_FINISHED}),
}


def is_valid_segment_transition(
    source: RemoteLogSegmentState | None, target: RemoteLogSegmentState
) -> bool:
    """True when a segment may move from ``source`` (None = unknown segment) to ``target``."""
    return target in _SEGMENT_TRANSITIONS[source]


def is_valid_partition_delete_transition(
    source: RemotePartitionDeleteState | None, target: RemotePartitionDeleteState
) -> bool:
    """True when a partition delete may move from ``source`` (None = none yet) to ``target``."""
    return target in _PARTITION_TRANSITIONS[source]


def check_segment_transition(
    source: RemoteLogSegmentState | None, target: RemoteLogSegmentState, what: object
) -> None:
    """Raise InvalidStateTransitionError naming ``what`` unless the transition is legal."""
    if not is_valid_segment_transition(source, target):
        src = source.name if source is not None else "<new>"
        raise InvalidStateTransitionError(
            f"illegal segment state transition {src} -> {target.name} for {what}"
        )


def check_partition_delete_transition(
    source: RemotePartitionDeleteState | None, target: RemotePartitionDeleteState, what: object
) -> None:
    """Raise InvalidStateTransitionError naming ``what`` unless the transition is legal."""
    if not is_valid_partition_delete_transition(source, target):
        src = source.name if source is not None else "<none>"
        raise InvalidStateTransitionError(
            f"illegal partition delete state transition {src} -> {target.name} for {what}"
        )


def kafka_uuid_to_str(value: uuid.UUID) -> str:
    """Kafka's text form of a Uuid: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def kafka_uuid_from_str(text: str) -> uuid.UUID:
    """Parse Kafka's base64 Uuid text (``Bp9TDduJRGa9Q5rlvCJOxg``) or a dashed uuid."""
    if len(text) == 22:
        try:
            raw = base64.urlsafe_b64decode(text + "==")
        except (binascii.Error, ValueError) as e:
            raise ValueError(f"not a Kafka uuid: {text!r}") from e
        if len(raw) == 16:
            return uuid.UUID(bytes=raw)
    try:
        return uuid.UUID(text)
    except ValueError as e:
        raise ValueError(f"not a Kafka uuid: {text!r}") from e


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _check_int(name: str, value: object, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise ValueError(f"{name}={value} out of range [{lo}, {hi}]")


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True, slots=True, eq=False)
class TopicIdPartition:
    """A user partition; equality and hash use (topic_id, partition) only, as in Kafka."""

    topic_id: uuid.UUID
    topic: str
    partition: int
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _require(isinstance(self.topic_id, uuid.UUID), "topic_id must be a uuid.UUID")
        _require(isinstance(self.topic, str), "topic must be a str")
        _check_int("partition", self.partition, 0, INT32_MAX)
        # Hashed on every cache lookup: compute once.
        object.__setattr__(self, "_hash", hash((self.topic_id.int, self.partition)))

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, TopicIdPartition):
            return NotImplemented
        return self.partition == other.partition and self.topic_id == other.topic_id

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> Any:
        return (TopicIdPartition, (self.topic_id, self.topic, self.partition))

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition} ({kafka_uuid_to_str(self.topic_id)})"


@dataclass(frozen=True, slots=True, eq=False)
class RemoteLogSegmentId:
    """One copy attempt of one segment: a fresh uuid per attempt."""

    topic_id_partition: TopicIdPartition
    id: uuid.UUID
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _require(
            isinstance(self.topic_id_partition, TopicIdPartition),
            "topic_id_partition must be a TopicIdPartition",
        )
        _require(isinstance(self.id, uuid.UUID), "id must be a uuid.UUID")
        # The key of every cache dict: hash once (the uuid alone is unique enough).
        object.__setattr__(self, "_hash", hash(self.id.int))

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, RemoteLogSegmentId):
            return NotImplemented
        return self.id == other.id and self.topic_id_partition == other.topic_id_partition

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> Any:
        return (RemoteLogSegmentId, (self.topic_id_partition, self.id))

    @classmethod
    def generate_new(cls, topic_id_partition: TopicIdPartition) -> RemoteLogSegmentId:
        return cls(topic_id_partition, uuid.uuid4())

    def __str__(self) -> str:
        # Kafka's id text (base64url), as Kafka's tools and rlmm's CLI print ids.
        return f"{self.topic_id_partition}/{kafka_uuid_to_str(self.id)}"


# rlmm's segment-id signature: the last 4 of the 16 bytes are a keyed BLAKE2b digest of
# the first 12, so rlmm knows its own copies (even one left STARTED before any upload)
# from those of Kafka's RemoteLogManager in a shared metadata topic. A random id
# carries it by chance once in 2**32.
_SIGNATURE_KEY = b"rlmm offload segment id v1"
_SIGNED_BYTES = 12


def _signature(head: bytes) -> bytes:
    return hashlib.blake2b(head, digest_size=16 - _SIGNED_BYTES, key=_SIGNATURE_KEY).digest()


def new_rlmm_segment_id(topic_id_partition: TopicIdPartition) -> RemoteLogSegmentId:
    """A fresh random segment id (a version-4 uuid) carrying rlmm's signature."""
    while True:
        head = bytearray(os.urandom(_SIGNED_BYTES))
        head[6] = (head[6] & 0x0F) | 0x40  # version 4
        head[8] = (head[8] & 0x3F) | 0x80  # RFC 4122 variant
        value = uuid.UUID(bytes=bytes(head) + _signature(bytes(head)))
        # As Kafka's Uuid.randomUuid: never an id whose text starts with "-" (Kafka's
        # tools would read it as an option).
        if not kafka_uuid_to_str(value).startswith("-"):
            return RemoteLogSegmentId(topic_id_partition, value)


def is_rlmm_segment_id(segment_id: RemoteLogSegmentId) -> bool:
    """True when ``segment_id`` was made by ``new_rlmm_segment_id``."""
    return is_rlmm_segment_uuid(segment_id.id.bytes)


def is_rlmm_segment_uuid(raw: bytes) -> bool:
    """``is_rlmm_segment_id`` of a segment id whose uuid's 16 bytes are ``raw``."""
    return raw[_SIGNED_BYTES:] == _signature(raw[:_SIGNED_BYTES])


def _frozen_epochs(epochs: Mapping[int, int]) -> Mapping[int, int]:
    items = sorted(dict(epochs).items())
    for epoch, offset in items:
        _check_int("leader epoch", epoch, 0, INT32_MAX)
        _check_int("leader epoch start offset", offset, 0, INT64_MAX)
    return MappingProxyType(dict(items))


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    """Metadata of one remote log segment (offsets inclusive at both ends)."""

    remote_log_segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: Mapping[int, int]
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    custom_metadata: bytes | None = None
    txn_index_empty: bool = False

    def __post_init__(self) -> None:
        _require(
            isinstance(self.remote_log_segment_id, RemoteLogSegmentId),
            "remote_log_segment_id must be a RemoteLogSegmentId",
        )
        _check_int("start_offset", self.start_offset, 0, INT64_MAX)
        _check_int("end_offset", self.end_offset, 0, INT64_MAX)
        if self.end_offset < self.start_offset:
            raise ValueError(
                f"end_offset {self.end_offset} < start_offset {self.start_offset} "
                f"for segment {self.remote_log_segment_id}"
            )
        _check_int("max_timestamp_ms", self.max_timestamp_ms, INT64_MIN, INT64_MAX)
        _check_int("broker_id", self.broker_id, INT32_MIN, INT32_MAX)
        _check_int("event_timestamp_ms", self.event_timestamp_ms, INT64_MIN, INT64_MAX)
        _check_int("segment_size_in_bytes", self.segment_size_in_bytes, 0, INT32_MAX)
        if not isinstance(self.segment_leader_epochs, Mapping) or not self.segment_leader_epochs:
            raise ValueError(
                "segment_leader_epochs must be a non-empty mapping for "
                f"{self.remote_log_segment_id}"
            )
        object.__setattr__(
            self, "segment_leader_epochs", _frozen_epochs(self.segment_leader_epochs)
        )
        object.__setattr__(self, "state", RemoteLogSegmentState(self.state))
        _require(
            self.custom_metadata is None or isinstance(self.custom_metadata, bytes),
            "custom_metadata must be bytes or None",
        )
        _require(isinstance(self.txn_index_empty, bool), "txn_index_empty must be a bool")

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition

    def create_with_updates(
        self, update: RemoteLogSegmentMetadataUpdate
    ) -> RemoteLogSegmentMetadata:
        """This segment with the update's state, broker, timestamp and custom metadata."""
        if update.remote_log_segment_id != self.remote_log_segment_id:
            raise ValueError(
                f"update for {update.remote_log_segment_id} applied to {self.remote_log_segment_id}"
            )
        return RemoteLogSegmentMetadata(
            remote_log_segment_id=self.remote_log_segment_id,
            start_offset=self.start_offset,
            end_offset=self.end_offset,
            max_timestamp_ms=self.max_timestamp_ms,
            broker_id=update.broker_id,
            event_timestamp_ms=update.event_timestamp_ms,
            segment_size_in_bytes=self.segment_size_in_bytes,
            segment_leader_epochs=self.segment_leader_epochs,
            state=update.state,
            custom_metadata=update.custom_metadata,
            txn_index_empty=self.txn_index_empty,
        )

    def __reduce__(self) -> Any:
        # MappingProxyType cannot be pickled; rebuild from a plain dict (Spark ships these).
        return (
            RemoteLogSegmentMetadata,
            (
                self.remote_log_segment_id,
                self.start_offset,
                self.end_offset,
                self.max_timestamp_ms,
                self.broker_id,
                self.event_timestamp_ms,
                self.segment_size_in_bytes,
                dict(self.segment_leader_epochs),
                self.state,
                self.custom_metadata,
                self.txn_index_empty,
            ),
        )


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataUpdate:
    """A state change of an existing remote log segment."""

    remote_log_segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    custom_metadata: bytes | None
    state: RemoteLogSegmentState
    broker_id: int

    def __post_init__(self) -> None:
        _require(
            isinstance(self.remote_log_segment_id, RemoteLogSegmentId),
            "remote_log_segment_id must be a RemoteLogSegmentId",
        )
        _check_int("event_timestamp_ms", self.event_timestamp_ms, INT64_MIN, INT64_MAX)
        _check_int("broker_id", self.broker_id, INT32_MIN, INT32_MAX)
        object.__setattr__(self, "state", RemoteLogSegmentState(self.state))
        _require(
            self.custom_metadata is None or isinstance(self.custom_metadata, bytes),
            "custom_metadata must be bytes or None",
        )
        if self.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED:
            raise InvalidStateTransitionError(
                f"an update cannot set COPY_SEGMENT_STARTED (segment {self.remote_log_segment_id});"
                " add the segment instead"
            )

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition


@dataclass(frozen=True, slots=True)
class RemotePartitionDeleteMetadata:
    """A state change of the deletion of a whole user partition."""

    topic_id_partition: TopicIdPartition
    state: RemotePartitionDeleteState
    event_timestamp_ms: int
    broker_id: int

    def __post_init__(self) -> None:
        _require(
            isinstance(self.topic_id_partition, TopicIdPartition),
            "topic_id_partition must be a TopicIdPartition",
        )
        object.__setattr__(self, "state", RemotePartitionDeleteState(self.state))
        _check_int("event_timestamp_ms", self.event_timestamp_ms, INT64_MIN, INT64_MAX)
        _check_int("broker_id", self.broker_id, INT32_MIN, INT32_MAX)


RemoteLogMetadata = (
    RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate | RemotePartitionDeleteMetadata
)
"""Any event of the metadata log."""

__all__ = [
    "RemoteLogMetadata",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentMetadataUpdate",
    "RemoteLogSegmentState",
    "RemotePartitionDeleteMetadata",
    "RemotePartitionDeleteState",
    "TopicIdPartition",
    "check_partition_delete_transition",
    "check_segment_transition",
    "is_rlmm_segment_id",
    "is_rlmm_segment_uuid",
    "is_valid_partition_delete_transition",
    "is_valid_segment_transition",
    "kafka_uuid_from_str",
    "kafka_uuid_to_str",
    "new_rlmm_segment_id",
]
