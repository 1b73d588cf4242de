"""Remote layouts: where and how one segment copy's log and indexes are stored (read side).

A Kafka cluster's remote tier is laid out by whichever RemoteStorageManager plugin its
brokers load: rlmm's own layout (``local`` / ``s3``), Kafka's ``LocalTieredStorage``
directory tree, or Aiven's S3 plugin (chunked, optionally compressed or encrypted log
objects, a JSON manifest, the indexes packed in one object). Every read-side tool of
rlmm (the archive reader and planner, ``rlmm segments show``, ``verify``, ``gc``)
goes through this ABC, so each of them works on all of these layouts.

Invariants:
- a layout never writes except ``delete_objects``, and that only for names its own
  ``parse_object_name`` accepts (a key outside the layout's pattern is refused);
- names are relative to the layout's root (directory or bucket prefix), exactly as
  ``list_objects`` reports them and ``segment_objects`` names them;
- errors name the object key: ``RemoteResourceNotFoundError`` for an absent object,
  ``RemoteIntegrityError`` (with ``object_name``) for one that is there but unreadable
  as the layout's format.

This module is the layouts' base: the ABC and what it speaks (``SegmentObject``, and
``ObjectName`` from ``remote.naming``). It imports no layout module, and no layout module
imports another; ``remote.registry`` names each layout's module and builds the
configured one (``remote.registry.load_remote_layout``).
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from remote.errors import InvalidRemotePathError
from remote.naming import LOG_LABEL, ObjectName, index_label
from remote.storage import IndexType, RemoteReader, RemoteStorageManager
from rlmm.model import RemoteLogSegmentMetadata, TopicIdPartition


@dataclass(frozen=True, slots=True)
class SegmentObject:
    """One object a finished segment copy must (or may) have in a layout.

    ``recorded_size`` / ``recorded_crc32c`` are what the writer recorded (a manifest),
    None when it recorded nothing; ``holds_log`` says the object's stored bytes are
    the segment's log bytes as they are (so a deep check can walk its batches in the
    same pass that hashes it).
    """

    name: str
    label: str
    recorded_size: int | None = None
    recorded_crc32c: int | None = None
    required: bool = True
    holds_log: bool = False


class RemoteLayout(RemoteReader):
    """Reads one layout of segment copies: naming, fetching, inventory (thread-safe)."""

    type_name: str = ""  # the remote.type it reads

    # --- construction (remote.registry builds a layout with one of these) ---------------

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> RemoteLayout:
        """A layout read on its own (a Kafka cluster's tier), from its ``[remote]``
        settings without ``type``; ConfigError naming a bad one."""
        raise NotImplementedError(f"{cls.__name__} is read through a RemoteStorageManager")

    @classmethod
    def over(cls, rsm: RemoteStorageManager, type_name: str) -> RemoteLayout:
        """The layout read through the RemoteStorageManager that writes it (owned)."""
        raise NotImplementedError(f"{cls.__name__} is read on its own, not over an RSM")

    @classmethod
    def known_options(cls) -> frozenset[str] | None:
        """The settings ``from_options`` takes; None when they are open-ended and
        ``check_options`` checks them."""
        return frozenset()

    @classmethod
    def check_options(cls, options: Mapping[str, Any]) -> None:
        """ConfigError, one line naming the key and the known ones, for a setting an
        open-ended layout does not take (``known_options`` is None)."""

    # --- naming -------------------------------------------------------------------------

    @abc.abstractmethod
    def segment_objects(self, metadata: RemoteLogSegmentMetadata) -> list[SegmentObject]:
        """The objects of ``metadata``'s copy with what the writer recorded about them.

        May read a manifest object; raises RemoteResourceNotFoundError (manifest absent)
        or RemoteIntegrityError (manifest unreadable), each naming the key."""

    @abc.abstractmethod
    def log_object_name(self, metadata: RemoteLogSegmentMetadata) -> str:
        """The name of the object holding the segment's log data (no I/O)."""

    def index_object_name(self, metadata: RemoteLogSegmentMetadata, kind: IndexType) -> str:
        """The name of the object holding index ``kind`` (no I/O; for messages)."""
        return self.log_object_name(metadata)

    def smallest_timestamp(self, metadata: RemoteLogSegmentMetadata) -> int | None:
        """The segment's smallest record timestamp as its writer recorded it (rlmm's
        manifest version 2); None when the writer recorded none (Kafka's own plugins)."""
        return None

    @abc.abstractmethod
    def parse_object_name(self, name: str) -> ObjectName | None:
        """Split ``name``; None when it is not in this layout's pattern."""

    @abc.abstractmethod
    def partition_prefix(self, topic_id_partition: TopicIdPartition) -> str:
        """The name prefix of every object of one partition."""

    # --- deleting (reading and the inventory: RemoteReader's) ---------------------------

    @abc.abstractmethod
    def _delete(self, names: list[str]) -> None:
        """Delete the named objects (absent ones are fine); names are already checked."""

    def delete_objects(self, names: Iterable[str]) -> None:
        """Delete objects by name; refuses (before deleting anything) a name outside the
        layout's own pattern."""
        checked = list(names)
        for name in checked:
            if self.parse_object_name(name) is None:
                raise InvalidRemotePathError(
                    f"{name!r} is not in the {self.type_name} layout's pattern: not deleted"
                )
        if checked:
            self._delete(checked)

    def delete_segment_objects(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete every object of ``metadata``'s copy (absent ones are fine)."""
        self.delete_objects(self.segment_object_names(metadata))

    def segment_object_names(self, metadata: RemoteLogSegmentMetadata) -> list[str]:
        """Every name a copy of ``metadata`` may have (no I/O: for deletes)."""
        return [self.log_object_name(metadata)]


__all__ = [
    "LOG_LABEL",
    "ObjectName",
    "RemoteLayout",
    "SegmentObject",
    "index_label",
]
