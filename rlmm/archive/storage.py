"""One RemoteLayout per process and configuration, for planners and slice readers.

Job: an executor reading many slices must not build (and leak) a boto3 client per
slice: :func:`remote_storage_for` hands out one shared layout reader per distinct
``remote_options`` dict (RemoteLayout methods are thread-safe). The layout is the
one ``[remote] type`` names: rlmm's own, Kafka's LocalTieredStorage or Aiven's S3;
``rlmm.factory.remote_layout_from_options`` builds it, this module only keeps it.

Invariant: every layout built here is closed once, at interpreter exit or by
:func:`close_remote_storage`; a closed one is never handed out again.
"""

from __future__ import annotations

import atexit
import json
import threading
from collections.abc import Mapping
from typing import Any

from remote.layouts import RemoteLayout
from rlmm.factory import remote_layout_from_options

_lock = threading.Lock()
_managers: dict[str, RemoteLayout] = {}


def _key(options: Mapping[str, Any]) -> str:
    return json.dumps(dict(options), sort_keys=True, default=str)


def remote_storage_for(options: Mapping[str, Any]) -> RemoteLayout:
    """The process's layout reader for these options (built on first use). Options that
    left their secrets behind (Spark input partitions) get them again from the config
    file they name, when this process can read it."""
    key = _key(options)
    with _lock:
        rsm = _managers.get(key)
        if rsm is None:
            rsm = _managers[key] = remote_layout_from_options(options)
        return rsm


def close_remote_storage() -> None:
    """Close every cached manager (idempotent; also runs at exit)."""
    with _lock:
        managers = list(_managers.values())
        _managers.clear()
    for rsm in managers:
        rsm.close()


atexit.register(close_remote_storage)

__all__ = ["close_remote_storage", "remote_storage_for"]
