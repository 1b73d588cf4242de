"""RlmmLayout: rlmm's own layout, read through the RemoteStorageManager that wrote it.

Objects are ``<topic>-<topic_id>/<partition>/<start_offset:020>-<segment_id>.<suffix>``
under the local root or the S3 prefix; the copy's custom metadata carries a manifest
(size and CRC-32C per object). Invariant: every call goes to the wrapped manager, so
reads here verify exactly as the offloader's own reads do.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from typing import BinaryIO

from remote.errors import RemoteResourceNotFoundError
from remote.layouts import RemoteLayout, SegmentObject
from remote.manifest import SegmentManifest
from remote.naming import (
    OBJECT_KINDS,
    ObjectKind,
    ObjectName,
    kind_label,
    object_name,
    parse_object_name,
    partition_prefix,
)
from remote.registry import check_layout_matches
from remote.storage import IndexType, MultipartUpload, RemoteObject, RemoteStorageManager
from rlmm.model import RemoteLogSegmentMetadata, TopicIdPartition

_MANDATORY: tuple[ObjectKind, ...] = (
    None,
    IndexType.OFFSET,
    IndexType.TIMESTAMP,
    IndexType.PRODUCER_SNAPSHOT,
    IndexType.LEADER_EPOCH,
)


class RlmmLayout(RemoteLayout):
    """rlmm's layout over a ``local`` or ``s3`` RemoteStorageManager (owned: closed here).

    ``type_name`` is the ``remote.type`` of ``rsm`` (the registry passes it)."""

    def __init__(self, rsm: RemoteStorageManager, type_name: str = "local") -> None:
        self.rsm = rsm
        self.type_name = type_name
        self._lock = threading.Lock()
        self._checked: set[TopicIdPartition] = set()

    @classmethod
    def over(cls, rsm: RemoteStorageManager, type_name: str) -> RlmmLayout:
        return cls(rsm, type_name)

    def __repr__(self) -> str:
        return repr(self.rsm)

    def smallest_timestamp(self, metadata: RemoteLogSegmentMetadata) -> int | None:
        manifest = SegmentManifest.of(metadata)
        return None if manifest is None else manifest.smallest_timestamp_ms

    def segment_objects(self, metadata: RemoteLogSegmentMetadata) -> list[SegmentObject]:
        manifest = SegmentManifest.of(metadata)
        out = []
        if manifest is not None:
            for kind, recorded in manifest.objects.items():
                out.append(
                    SegmentObject(
                        object_name(metadata, kind),
                        kind_label(kind),
                        recorded.size,
                        recorded.crc32c,
                        holds_log=kind is None,
                    )
                )
            return out
        for kind in OBJECT_KINDS:
            if kind in _MANDATORY or not metadata.txn_index_empty:
                size = metadata.segment_size_in_bytes if kind is None else None
                out.append(
                    SegmentObject(
                        object_name(metadata, kind), kind_label(kind), size, holds_log=kind is None
                    )
                )
        return out

    def log_object_name(self, metadata: RemoteLogSegmentMetadata) -> str:
        return object_name(metadata, None)

    def index_object_name(self, metadata: RemoteLogSegmentMetadata, kind: IndexType) -> str:
        return object_name(metadata, kind)

    def segment_object_names(self, metadata: RemoteLogSegmentMetadata) -> list[str]:
        return [object_name(metadata, kind) for kind in OBJECT_KINDS]

    def parse_object_name(self, name: str) -> ObjectName | None:
        return parse_object_name(name)

    def partition_prefix(self, topic_id_partition: TopicIdPartition) -> str:
        return partition_prefix(topic_id_partition)

    def _open_log_range(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None
    ) -> BinaryIO:
        if SegmentManifest.of(metadata) is None:
            # Not written by rlmm's offloader: make sure the objects are in our layout
            # before decoding another plugin's bytes as a Kafka log.
            self._check_partition_layout(metadata.topic_id_partition)
        return self.rsm.fetch_log_segment(metadata, start_position, end_position)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        try:
            return self.rsm.fetch_index(metadata, index_type)
        except RemoteResourceNotFoundError:
            self._check_partition_layout(metadata.topic_id_partition, again=True)
            raise

    def _check_partition_layout(self, tp: TopicIdPartition, *, again: bool = False) -> None:
        """ConfigError when the stored objects are in another layout (a sample of the
        partition's, or of the store's when the partition has none); once per partition."""
        with self._lock:
            if tp in self._checked and not again:
                return
        names = [o.name for o in self.rsm.list_objects(tp)]
        if not names:
            names = [o.name for o in itertools.islice(self.rsm.list_objects(), 1000)]
        check_layout_matches(self, names)
        with self._lock:
            self._checked.add(tp)

    def list_objects(
        self, topic_id_partition: TopicIdPartition | None = None
    ) -> Iterator[RemoteObject]:
        return self.rsm.list_objects(topic_id_partition)

    def open_object(self, name: str) -> BinaryIO:
        return self.rsm.open_object(name)

    def _delete(self, names: list[str]) -> None:
        self.rsm.delete_objects(names)

    def delete_segment_objects(self, metadata: RemoteLogSegmentMetadata) -> None:
        # The manager's own delete also removes temp files of crashed copies.
        self.rsm.delete_log_segment_data(metadata)

    def list_multipart_uploads(self) -> list[MultipartUpload]:
        return self.rsm.list_multipart_uploads()

    def abort_multipart_upload(self, upload: MultipartUpload) -> None:
        self.rsm.abort_multipart_upload(upload)

    def close(self) -> None:
        self.rsm.close()


__all__ = ["RlmmLayout"]
