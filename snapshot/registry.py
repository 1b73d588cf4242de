"""The snapshot store registry: every snapshot store type and its class.

``SNAPSHOT_STORE_BACKENDS`` maps each type name to its class (``module:Class``); the
factory (``load_snapshot_store``) and rlmm's config check (``SNAPSHOT_STORE_TYPES``)
read it: a new store is one module plus one entry here.

Invariant: this module imports no backend at import time (s3 pulls in botocore); a
bad type or setting is a SnapshotConfigError naming it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from snapshot.errors import SnapshotConfigError

if TYPE_CHECKING:
    from snapshot.store import SnapshotStore

SNAPSHOT_STORE_BACKENDS: Mapping[str, str] = {
    "local": "snapshot.local:LocalSnapshotStore",
    "s3": "snapshot.s3:S3SnapshotStore",
}
SNAPSHOT_STORE_TYPES = tuple(SNAPSHOT_STORE_BACKENDS)


def backend(kind: str) -> type[SnapshotStore]:
    """The class of one snapshot store type (its module imported on first use)."""
    path = SNAPSHOT_STORE_BACKENDS.get(kind)
    if path is None:
        raise SnapshotConfigError(
            f"unknown snapshot store type {kind!r} (expected {' or '.join(SNAPSHOT_STORE_TYPES)})"
        )
    module, _, name = path.partition(":")
    cls: type[SnapshotStore] = getattr(importlib.import_module(module), name)
    return cls


def load_snapshot_store(options: Mapping[str, Any]) -> SnapshotStore:
    """Build the configured store: ``options["type"]`` is ``local`` (default) or ``s3``.

    The other keys are the backend's constructor arguments: ``directory``, ``keep``,
    ``read_only`` for local; ``client`` (a boto3 S3 client), ``bucket``, ``prefix``,
    ``owner``, ``keep``, ``read_only`` for s3.
    """
    kwargs = dict(options)
    kind = kwargs.pop("type", "local")
    factory = backend(kind)
    try:
        return factory(**kwargs)
    except TypeError as e:
        raise SnapshotConfigError(f"bad snapshot store settings for type {kind!r}: {e}") from e


__all__ = ["SNAPSHOT_STORE_BACKENDS", "SNAPSHOT_STORE_TYPES", "backend", "load_snapshot_store"]
