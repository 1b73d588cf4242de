"""Object names: how every layout names one segment copy's objects, and the one parser.

Every layout we know (rlmm's own, Kafka's LocalTieredStorage, Aiven's S3 plugin) names
an object ``<partition dir><start_offset:020>-<segment_id><suffix>``; only the partition
directory and the suffixes differ. ``SegmentNaming`` holds one layout's choice of both,
builds names from metadata and parses them back into the one ``ObjectName``.

Invariants:
- a topic name that could leave the root raises InvalidRemotePathError before any name
  is built (``check_topic_name``);
- ``parse`` accepts exactly the names ``base_name + suffix`` builds (and, where the
  layout has them, the temp files of unpublished copies), and nothing else;
- rlmm's own layout is ``RLMM_NAMING``: ``<topic>-<topic_id>/<partition>/`` directories
  and the suffixes of ``SUFFIXES``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from remote.errors import InvalidRemotePathError
from remote.storage import IndexType
from rlmm.model import RemoteLogSegmentMetadata, TopicIdPartition, kafka_uuid_to_str

ObjectKind = IndexType | None
"""What one stored object holds: an index type, or None for the log segment."""

OBJECT_KINDS: tuple[ObjectKind, ...] = (
    None,
    IndexType.OFFSET,
    IndexType.TIMESTAMP,
    IndexType.PRODUCER_SNAPSHOT,
    IndexType.TRANSACTION,
    IndexType.LEADER_EPOCH,
)
"""Every object of a segment copy, in manifest order (log first)."""

SUFFIXES: Mapping[ObjectKind, str] = {
    None: ".log",
    IndexType.OFFSET: ".index",
    IndexType.TIMESTAMP: ".timeindex",
    IndexType.PRODUCER_SNAPSHOT: ".snapshot",
    IndexType.TRANSACTION: ".txnindex",
    IndexType.LEADER_EPOCH: ".leader-epoch-checkpoint",
}
"""rlmm's suffix of each object of a segment copy."""

LOG_LABEL = "log segment"


def index_label(kind: IndexType) -> str:
    return f"{kind.name} index"


def kind_label(kind: ObjectKind) -> str:
    """How messages name what an object holds: ``log segment``, ``OFFSET index``, ..."""
    return LOG_LABEL if kind is None else index_label(kind)


# Kafka's legal topic characters (Topic.LEGAL_CHARS) and length; "." and ".." are illegal.
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def check_topic_name(topic: str) -> str:
    """Return ``topic`` if it is a legal Kafka topic name, else raise InvalidRemotePathError."""
    if not isinstance(topic, str) or not _LEGAL_TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise InvalidRemotePathError(
            f"topic name {topic!r} is not a legal Kafka topic name and could escape the "
            "remote storage root (allowed: 1-249 of [a-zA-Z0-9._-], not '.' or '..')"
        )
    return topic


def check_prefix(prefix: str) -> str:
    """Normalise a key prefix (no leading/trailing '/'); reject '..', '.', NUL and '//'."""
    cleaned = prefix.strip("/")
    if "\x00" in cleaned or any(p in ("", ".", "..") for p in cleaned.split("/") if cleaned):
        raise InvalidRemotePathError(f"remote storage prefix {prefix!r} is not a clean path")
    return cleaned


def check_object_name(name: str) -> str:
    """Return ``name`` if it is a clean relative object name (no '..', '.', '//', NUL)."""
    if not isinstance(name, str) or not name or check_prefix(name) != name:
        raise InvalidRemotePathError(f"object name {name!r} is not a clean relative path")
    return name


@dataclass(frozen=True, slots=True)
class ObjectName:
    """The parts of one stored object's name, in whichever layout wrote it."""

    topic: str
    topic_id: str  # Kafka's base64url text
    partition: int
    start_offset: int
    segment_id: str  # Kafka's base64url text
    suffix: str  # as stored: ".log", ".timeindex", ".indexes", ...
    label: str  # for messages: "log segment", "OFFSET index", "manifest", ...
    temporary: bool = False  # a temp file of a copy that never published (local backend)


_TOPIC = r"(?P<topic>[a-zA-Z0-9._-]{1,249})"
_TOPIC_ID = r"(?P<topic_id>[A-Za-z0-9_-]{22})"
_PARTITION = r"(?P<partition>\d+)"


class SegmentNaming:
    """One layout's names: its partition directories and its suffix of each object.

    ``labels`` maps each suffix to what the object holds (for messages);
    ``topic_id_last``: ``<topic>-<partition>-<topic_id>/`` (Kafka's LocalTieredStorage)
    instead of ``<topic>-<topic_id>/<partition>/``; ``temporary``: the layout leaves temp
    files ``.<name>.<anything>`` of copies that never published (rlmm's local backend).
    """

    def __init__(
        self, labels: Mapping[str, str], *, topic_id_last: bool = False, temporary: bool = False
    ) -> None:
        self.labels = dict(labels)
        self._topic_id_last = topic_id_last
        directory = (
            f"{_TOPIC}-{_PARTITION}-{_TOPIC_ID}/"
            if topic_id_last
            else f"{_TOPIC}-{_TOPIC_ID}/{_PARTITION}/"
        )
        # Longest first, so that no suffix is taken for a shorter one it starts with.
        suffixes = "|".join(re.escape(s) for s in sorted(self.labels, key=len, reverse=True))
        self._pattern = re.compile(
            directory
            + (r"(?P<temp>\.)?" if temporary else "")
            + r"(?P<start_offset>\d{20})-(?P<segment_id>[A-Za-z0-9_-]{22})"
            + f"(?P<suffix>{suffixes})"
            + (r"(?P<rest>\..*)?" if temporary else "")
        )

    def partition_prefix(self, tp: TopicIdPartition) -> str:
        """The directory of every object of one partition (ends with '/')."""
        topic, topic_id = check_topic_name(tp.topic), kafka_uuid_to_str(tp.topic_id)
        if self._topic_id_last:
            return f"{topic}-{tp.partition}-{topic_id}/"
        return f"{topic}-{topic_id}/{tp.partition}/"

    def base_name(self, metadata: RemoteLogSegmentMetadata) -> str:
        """``<partition dir><start_offset:020>-<segment_id>``: a name without its suffix."""
        segment_id = metadata.remote_log_segment_id
        return (
            f"{self.partition_prefix(segment_id.topic_id_partition)}"
            f"{metadata.start_offset:020d}-{kafka_uuid_to_str(segment_id.id)}"
        )

    def parse(self, name: str) -> ObjectName | None:
        """Split ``name`` (relative to the root or prefix); None if not in this layout."""
        match = self._pattern.fullmatch(name)
        if match is None:
            return None
        groups = match.groupdict()
        temporary = groups.get("temp") is not None
        if temporary != bool(groups.get("rest")):
            return None
        return ObjectName(
            topic=match["topic"],
            topic_id=match["topic_id"],
            partition=int(match["partition"]),
            start_offset=int(match["start_offset"]),
            segment_id=match["segment_id"],
            suffix=match["suffix"],
            label=self.labels[match["suffix"]],
            temporary=temporary,
        )


RLMM_NAMING = SegmentNaming(
    {suffix: kind_label(kind) for kind, suffix in SUFFIXES.items()}, temporary=True
)
"""rlmm's own layout (the ``local`` and ``s3`` RemoteStorageManagers)."""


def segment_base_name(metadata: RemoteLogSegmentMetadata) -> str:
    """``<topic>-<topic_id>/<partition>/<start_offset:020>-<segment_id>`` (no suffix)."""
    return RLMM_NAMING.base_name(metadata)


def object_name(metadata: RemoteLogSegmentMetadata, kind: ObjectKind, prefix: str = "") -> str:
    """The key (or root-relative path) of one object of ``metadata``'s segment copy."""
    name = RLMM_NAMING.base_name(metadata) + SUFFIXES[kind]
    return f"{prefix}/{name}" if prefix else name


def partition_prefix(tp: TopicIdPartition) -> str:
    """``<topic>-<topic_id>/<partition>/``: the names of every object of one partition."""
    return RLMM_NAMING.partition_prefix(tp)


def parse_object_name(name: str) -> ObjectName | None:
    """Split a name of rlmm's layout (relative to the root or prefix); None if foreign."""
    return RLMM_NAMING.parse(name)


__all__ = [
    "LOG_LABEL",
    "OBJECT_KINDS",
    "RLMM_NAMING",
    "SUFFIXES",
    "ObjectKind",
    "ObjectName",
    "SegmentNaming",
    "check_object_name",
    "check_prefix",
    "check_topic_name",
    "index_label",
    "kind_label",
    "object_name",
    "parse_object_name",
    "partition_prefix",
    "segment_base_name",
]
