"""LocalTieredStorageLayout: Kafka's own test RSM (``LocalTieredStorage``), read as it is.

Kafka's ``LocalTieredStorage`` stores each copy under ``<rsm.config.dir>/kafka-tiered-storage``
as ``<topic>-<partition>-<topic_id>/<start_offset:020>-<segment_id><suffix>`` with the
suffixes ``.log``, ``.index``, ``.timeindex``, ``.txnindex`` (only when the segment has
aborted transactions), ``.snapshot`` and ``.leader_epoch_checkpoint``; ids are Kafka's
base64url Uuid text. The files are Kafka's own segment and index files, byte for byte,
and there is no manifest: the log's size is the metadata's ``segment_size_in_bytes``.

Invariants: reads only, except ``delete_objects`` of names in that pattern (the
partition directories stay, as Kafka's own delete leaves them); a fetched range is
exactly the bytes asked for, or an error naming the file.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from remote._directory import list_files, open_file, open_range, read_file, unlink_files
from remote.errors import InvalidRemotePathError, RemoteStorageError
from remote.layouts import RemoteLayout, SegmentObject
from remote.naming import LOG_LABEL, ObjectName, SegmentNaming, index_label
from remote.storage import IndexType, RemoteObject
from remote.streams import verifying_stream
from rlmm.errors import ConfigError
from rlmm.model import RemoteLogSegmentMetadata, TopicIdPartition

ROOT_DIR_NAME = "kafka-tiered-storage"
LOG_SUFFIX = ".log"
SUFFIXES: dict[IndexType, str] = {
    IndexType.OFFSET: ".index",
    IndexType.TIMESTAMP: ".timeindex",
    IndexType.TRANSACTION: ".txnindex",
    IndexType.PRODUCER_SNAPSHOT: ".snapshot",
    IndexType.LEADER_EPOCH: ".leader_epoch_checkpoint",
}
NAMING = SegmentNaming(
    {LOG_SUFFIX: LOG_LABEL} | {s: index_label(k) for k, s in SUFFIXES.items()},
    topic_id_last=True,
)


class LocalTieredStorageLayout(RemoteLayout):
    """The files Kafka's LocalTieredStorage wrote under ``rsm_config_dir``."""

    type_name = "local-tiered-storage"

    @classmethod
    def known_options(cls) -> frozenset[str]:
        return frozenset({"dir"})

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> LocalTieredStorageLayout:
        """From ``[remote]``: ``dir``, the brokers' ``rsm.config.dir``, and nothing else."""
        if set(options) != {"dir"}:
            raise ConfigError(
                "remote.type = 'local-tiered-storage' takes one setting, remote.dir (the"
                f" brokers' rsm.config.dir); got {sorted(options)}"
            )
        return cls(Path(options["dir"]))

    def __init__(self, rsm_config_dir: Path) -> None:
        self._dir = Path(rsm_config_dir).resolve()
        self._root = self._dir / ROOT_DIR_NAME
        if not self._root.is_dir():
            hint = (
                f"; use its parent {self._dir.parent}"
                if self._dir.name == ROOT_DIR_NAME
                else " (LocalTieredStorage creates it when a broker starts)"
            )
            raise ConfigError(
                f"remote.dir = {str(self._dir)!r} holds no {ROOT_DIR_NAME} directory: it"
                f" should be the brokers' rsm.config.dir{hint}"
            )

    @property
    def root(self) -> Path:
        return self._root

    def __repr__(self) -> str:
        return f"LocalTieredStorageLayout(root={str(self._root)!r})"

    # --- naming -------------------------------------------------------------------------

    def partition_prefix(self, topic_id_partition: TopicIdPartition) -> str:
        return NAMING.partition_prefix(topic_id_partition)

    def _base(self, metadata: RemoteLogSegmentMetadata) -> str:
        return NAMING.base_name(metadata)

    def log_object_name(self, metadata: RemoteLogSegmentMetadata) -> str:
        return self._base(metadata) + LOG_SUFFIX

    def index_object_name(self, metadata: RemoteLogSegmentMetadata, kind: IndexType) -> str:
        return self._base(metadata) + SUFFIXES[IndexType(kind)]

    def segment_object_names(self, metadata: RemoteLogSegmentMetadata) -> list[str]:
        base = self._base(metadata)
        return [base + LOG_SUFFIX, *(base + s for s in SUFFIXES.values())]

    def segment_objects(self, metadata: RemoteLogSegmentMetadata) -> list[SegmentObject]:
        base = self._base(metadata)
        out = [
            SegmentObject(
                base + LOG_SUFFIX, LOG_LABEL, metadata.segment_size_in_bytes, holds_log=True
            )
        ]
        for kind, suffix in SUFFIXES.items():
            if kind == IndexType.TRANSACTION and metadata.txn_index_empty:
                continue
            out.append(SegmentObject(base + suffix, index_label(kind)))
        return out

    def parse_object_name(self, name: str) -> ObjectName | None:
        return NAMING.parse(name)

    def _path(self, name: str) -> Path:
        path = self._root / name
        if not path.resolve().is_relative_to(self._root):
            raise InvalidRemotePathError(f"{path} escapes {self._root}")
        return path

    # --- reading ------------------------------------------------------------------------

    def _open_log_range(
        self, metadata: RemoteLogSegmentMetadata, start_position: int, end_position: int | None
    ) -> BinaryIO:
        path = self._path(self.log_object_name(metadata))
        opened = open_range(
            path, f"log segment of {metadata.remote_log_segment_id}", start_position, end_position
        )
        return verifying_stream(
            str(path), opened.file.read, opened.file.close, opened.length, None, _translate
        )

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        kind = IndexType(index_type)
        path = self._path(self.index_object_name(metadata, kind))
        return read_file(path, f"{index_label(kind)} of segment {metadata.remote_log_segment_id}")

    # --- inventory ----------------------------------------------------------------------

    def list_objects(
        self, topic_id_partition: TopicIdPartition | None = None
    ) -> Iterator[RemoteObject]:
        top = self._root
        if topic_id_partition is not None:
            top = self._root / self.partition_prefix(topic_id_partition)
        return iter(list_files(self._root, top))

    def open_object(self, name: str) -> BinaryIO:
        return open_file(self._root, name)

    def _delete(self, names: list[str]) -> None:
        unlink_files(self._root, names, remove_empty=False)


def _translate(e: Exception) -> Exception:
    return RemoteStorageError(f"reading a LocalTieredStorage segment failed: {e}")


__all__ = ["ROOT_DIR_NAME", "LocalTieredStorageLayout"]
