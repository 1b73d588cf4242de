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

``load_remote_layout(options)`` picks the layout from ``options["type"]`` and imports
its module lazily (this package's ``__init__`` sits above the layout modules; no layout
module imports another).
"""

from __future__ import annotations

import abc
import inspect
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

from remote.errors import InvalidRemotePathError, RemoteStorageError
from remote.storage import IndexType, MultipartUpload, RemoteObject
from rlmm.errors import ConfigError
from rlmm.model import RemoteLogSegmentMetadata, TopicIdPartition

LOG_LABEL = "log segment"


def index_label(kind: IndexType) -> str:
    return f"{kind.name} index"


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


@dataclass(frozen=True, slots=True)
class ObjectName:
    """The parts of an object name in a layout's pattern."""

    topic: str
    topic_id: str  # Kafka's base64url text
    partition: int
    start_offset: int
    segment_id: str  # Kafka's base64url text
    label: str
    temporary: bool = False  # a temp file of a copy that never published


class RemoteLayout(abc.ABC):
    """Reads one layout of segment copies: naming, fetching, inventory (thread-safe)."""

    type_name: str = ""

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

    @abc.abstractmethod
    def parse_object_name(self, name: str) -> ObjectName | None:
        """Split ``name``; None when it is not in this layout's pattern."""

    @abc.abstractmethod
    def partition_prefix(self, topic_id_partition: TopicIdPartition) -> str:
        """The name prefix of every object of one partition."""

    # --- reading ------------------------------------------------------------------------

    @abc.abstractmethod
    def fetch_log_segment(
        self,
        metadata: RemoteLogSegmentMetadata,
        start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        """The segment's log bytes from ``start_position`` to ``end_position`` (inclusive,
        clamped to the segment's end; None = to the end), as Kafka's fetchLogSegment."""

    @abc.abstractmethod
    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        """The whole index of ``index_type``; RemoteResourceNotFoundError if absent."""

    # --- inventory ----------------------------------------------------------------------

    @abc.abstractmethod
    def list_objects(
        self, topic_id_partition: TopicIdPartition | None = None
    ) -> Iterator[RemoteObject]:
        """Every object under the layout's root (or one partition's prefix), by name."""

    @abc.abstractmethod
    def open_object(self, name: str) -> BinaryIO:
        """The stored bytes of ``name`` as they are; RemoteResourceNotFoundError if absent."""

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

    def list_multipart_uploads(self) -> list[MultipartUpload]:
        """Open multipart uploads under the root (object stores only; none by default)."""
        return []

    def abort_multipart_upload(self, upload: MultipartUpload) -> None:
        raise RemoteStorageError(f"{self!r} has no multipart uploads to abort ({upload.name})")

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources; idempotent."""

    def __enter__(self) -> RemoteLayout:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


LAYOUT_TYPES = ("local", "s3", "local-tiered-storage", "aiven-s3")

# Object name endings only one layout writes: enough to tell a misconfigured
# ``remote.type`` from a store that is merely empty or foreign.
_SIGNATURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (".rsm-manifest", ("aiven-s3",)),
    (".leader_epoch_checkpoint", ("local-tiered-storage",)),
    (".leader-epoch-checkpoint", ("local", "s3")),
)


def detect_layouts(names: Iterable[str]) -> dict[tuple[str, ...], str]:
    """The layouts (by the types that write them) whose signature some name carries,
    each with the first such name."""
    found: dict[tuple[str, ...], str] = {}
    for name in names:
        for ending, kinds in _SIGNATURES:
            if name.endswith(ending):
                found.setdefault(kinds, name)
    return found


def check_layout_matches(layout: RemoteLayout, names: Iterable[str]) -> None:
    """Raise ConfigError (one line, naming an object) when ``names`` carry another
    layout's signature and none of ``layout``'s own (a misconfigured ``remote.type``)."""
    found = detect_layouts(names)
    if not found or any(layout.type_name in kinds for kinds in found):
        return
    kinds, name = next(iter(found.items()))
    raise ConfigError(
        f"remote.type = {layout.type_name!r}, but {name} is in the {' or '.join(kinds)}"
        f" layout and nothing stored is in the {layout.type_name!r} one: set remote.type to"
        " the layout the brokers' RemoteStorageManager writes"
    )


READ_ONLY_TYPES = ("local-tiered-storage", "aiven-s3")


def _constructor_keys(factory: Any) -> set[str]:
    params = inspect.signature(factory).parameters.values()
    return {p.name for p in params if p.name != "self" and p.kind is not p.VAR_KEYWORD}


def _check_types(factory: Any, options: Mapping[str, Any]) -> None:
    """ConfigError naming the key for a value of another kind than the setting's
    default (``max_attempts = "3"`` in TOML is a string, not a number)."""
    for param in inspect.signature(factory).parameters.values():
        if param.name not in options or param.default in (None, inspect.Parameter.empty):
            continue
        value, default = options[param.name], param.default
        if isinstance(default, bool):
            ok, kind = isinstance(value, bool), "true or false"
        elif isinstance(default, int):
            ok, kind = isinstance(value, int) and not isinstance(value, bool), "a whole number"
        elif isinstance(default, float):
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            kind = "a number"
        else:
            ok, kind = isinstance(value, type(default)), type(default).__name__
        if not ok:
            raise ConfigError(
                f"remote.{param.name} must be {kind}, got {value!r}"
                + (" (unquote it in the TOML file)" if isinstance(value, str) else "")
            )


def _backend(kind: str) -> Any:
    if kind == "local":
        from remote.local import LocalRemoteStorageManager

        return LocalRemoteStorageManager
    if kind == "s3":
        from remote.s3 import S3RemoteStorageManager

        return S3RemoteStorageManager
    return None


def known_options(kind: str) -> set[str] | None:
    """The ``[remote]`` settings of one type, from its backend; None when the backend
    checks its own (Aiven's layout takes the plugin's open-ended property names)."""
    backend = _backend(kind)
    if backend is not None:
        return _constructor_keys(backend)
    if kind == "local-tiered-storage":
        return {"dir"}
    return None


def check_remote_options(options: Mapping[str, Any]) -> None:
    """ConfigError, one line naming the key and the known ones, for a ``[remote]``
    setting its type does not take (a typo, or another type's setting)."""
    kind = options.get("type", "local")
    if kind not in LAYOUT_TYPES:
        raise ConfigError(f"unknown remote.type {kind!r} (expected one of {LAYOUT_TYPES})")
    if kind == "aiven-s3":
        from remote.layouts.aiven_s3 import AivenS3Layout

        AivenS3Layout.check_options(options)
        return
    known = known_options(kind)
    assert known is not None
    for key in sorted(set(options) - known - {"type"}):
        owners = [
            k for k in ("local", "s3", "local-tiered-storage") if key in (known_options(k) or ())
        ]
        where = f" (a setting of remote.type = {owners[0]!r})" if owners else ""
        raise ConfigError(
            f"unknown setting remote.{key} for remote.type = {kind!r}{where};"
            f" known: {', '.join(sorted(known))}"
        )
    backend = _backend(kind)
    if backend is not None:
        _check_types(backend, options)


def load_remote_layout(config: Mapping[str, Any]) -> RemoteLayout:
    """Build the read side of the configured ``[remote]`` settings.

    ``type`` is ``local`` or ``s3`` (rlmm's own layout, over the RemoteStorageManager
    of that name), ``local-tiered-storage`` (``dir`` = the brokers' ``rsm.config.dir``)
    or ``aiven-s3`` (the bucket settings and the plugin's own property names).
    """
    options = dict(config)
    kind = options.get("type", "local")
    if kind in ("local", "s3"):
        from remote.layouts.rlmm import RlmmLayout
        from remote.storage import load_remote_storage_manager

        return RlmmLayout(load_remote_storage_manager(options))
    options.pop("type")
    if kind == "local-tiered-storage":
        from remote.layouts.local_tiered_storage import LocalTieredStorageLayout

        unknown = sorted(set(options) - {"dir"})
        if unknown or "dir" not in options:
            raise ConfigError(
                "remote.type = 'local-tiered-storage' takes one setting, remote.dir (the"
                f" brokers' rsm.config.dir); got {sorted(options)}"
            )
        return LocalTieredStorageLayout(Path(options["dir"]))
    if kind == "aiven-s3":
        from remote.layouts.aiven_s3 import AivenS3Layout

        return AivenS3Layout.from_options(options)
    raise ConfigError(f"unknown remote storage type {kind!r} (expected one of {LAYOUT_TYPES})")


__all__ = [
    "LAYOUT_TYPES",
    "LOG_LABEL",
    "READ_ONLY_TYPES",
    "ObjectName",
    "RemoteLayout",
    "SegmentObject",
    "check_layout_matches",
    "check_remote_options",
    "detect_layouts",
    "index_label",
    "known_options",
    "load_remote_layout",
]
