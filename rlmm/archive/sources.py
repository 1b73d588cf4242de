"""Where a reader's segment list comes from: the metadata log, or the remote store alone.

Job: every reader of the archive (the CLI's listings, ``verify`` and ``records``, the
Spark source, ``restore``) opens its MetadataView through :func:`open_archive_view`. By
default that is the metadata log: the newest snapshot and the event log's tail
(``rlmm.archive.view``). With ``from_store``, for after a disaster that lost
``__remote_log_metadata`` with the cluster, it is rebuilt from the remote store's
objects, with rlmm's snapshots where they survive (``rlmm.archive.store_view``).

Invariants: reads only, and every layout and snapshot store opened here is closed
before the function that opened it returns. A metadata log that cannot be read raises
MetadataLogUnavailableError naming the event log, the configuration it came from and
the remedy (reading the store alone). A view that lists no segment while the remote
store holds segment objects is never handed out as an empty archive: EmptyViewError
names the store and how many objects it holds (read as it is, every object would look
like garbage to ``gc``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from remote.layouts import RemoteLayout
from rlmm.archive.errors import ArchiveError, EmptyViewError
from rlmm.archive.store_view import StoreListing, store_metadata_view
from rlmm.archive.view import MetadataView, eventlog_source, open_metadata_view
from rlmm.config import RlmmConfig
from rlmm.errors import ConfigError
from rlmm.factory import open_remote_layout, open_snapshot_source
from snapshot import SnapshotStore

log = logging.getLogger(__name__)


def store_settings(remote_options: Mapping[str, Any]) -> str:
    """The ``[remote]`` settings that say where the store is, for a message."""
    kind = remote_options.get("type", "local")
    if kind == "local":
        return f"[remote] root ({remote_options['root']})"
    if kind == "s3":
        return "[remote] bucket and prefix"
    return "the [remote] settings (remote.type, and its dir, or bucket and prefix)"


def missing_local_root(config: RlmmConfig, remote_options: Mapping[str, Any]) -> str | None:
    """The ``[remote] root`` setting, named for a message, when the store is a local
    directory that does not exist (opening it would create it, empty); None otherwise."""
    if remote_options.get("type", "local") != "local":
        return None
    root = Path(remote_options["root"])
    if root.is_dir():
        return None
    if "root" in config.remote:
        return f"[remote] root {str(root)!r}"
    return f"[remote] root (unset: data_dir/remote, {str(root)!r})"


def store_view_snapshots(config: RlmmConfig) -> SnapshotStore | None:
    """The configured snapshot store, read-only (with ``store = "s3"``: the bucket
    beside the segments); None when snapshots are off, as for the metadata view, or
    the store cannot be opened (the objects alone then give the segments)."""
    if not config.snapshot.get("enabled", True):
        return None
    try:
        return open_snapshot_source(config)
    except ConfigError as e:
        log.warning("rlmm's snapshots are not read (the store's objects are): %s", e)
        return None


def _require_local_root(config: RlmmConfig) -> None:
    """ConfigError naming ``[remote] root`` when a local store's root does not exist:
    checked before the store is opened, which would create it (an empty store, where a
    typo would then read as "no object of the topic")."""
    missing = missing_local_root(config, config.remote_options())
    if missing is not None:
        raise ConfigError(
            f"{missing} does not exist: no archive to read from the store alone; set"
            " [remote] root to the directory the offloader copies into (its own [remote] root)"
        )


@contextlib.contextmanager
def _layout(config: RlmmConfig, layout: RemoteLayout | None) -> Iterator[RemoteLayout]:
    """``layout``, or the configured one opened for the block and closed after it."""
    if layout is not None:
        yield layout
        return
    with open_remote_layout(config) as opened:
        yield opened


def open_store_view(
    config: RlmmConfig,
    topics: Iterable[str] | None = None,
    layout: RemoteLayout | None = None,
) -> tuple[MetadataView, StoreListing]:
    """The store-alone view of ``topics`` (None: every topic) and what listing the
    store found: the configured remote store's objects, with rlmm's snapshots in the
    configured ``[snapshot]`` store where they hold a copy (``layout``: the store to
    read, else the configured one, opened and closed here). No check is made of what
    it finds: see :func:`open_archive_view`."""
    _require_local_root(config)
    wanted = None if topics is None else list(topics)
    with _layout(config, layout) as store:
        snapshots = store_view_snapshots(config)
        try:
            return store_metadata_view(store, wanted, snapshots)
        finally:
            if snapshots is not None:
                snapshots.close()


def segment_objects(layout: RemoteLayout, topics: Iterable[str] | None = None) -> tuple[int, int]:
    """(objects, segment copies) of the store's ``topics`` (None: all): the objects its
    layout names as parts of a segment copy (temporary ones left out), and how many
    copies they belong to."""
    wanted = None if topics is None else set(topics)
    objects = 0
    copies: set[tuple[str, str, int]] = set()
    for obj in layout.list_objects():
        name = layout.parse_object_name(obj.name)
        if name is None or name.temporary or (wanted is not None and name.topic not in wanted):
            continue
        objects += 1
        copies.add((name.topic_id, name.segment_id, name.partition))
    return objects, len(copies)


def check_view_not_empty(
    config: RlmmConfig,
    view: MetadataView,
    layout: RemoteLayout,
    listing: StoreListing | None = None,
    topics: Iterable[str] | None = None,
) -> None:
    """EmptyViewError when ``view`` lists no segment while ``layout`` holds segment
    objects (``listing``: the view is the store-alone one of ``topics``, None: of every
    topic, and this is what listing the store found). An empty store, or a view that
    lists anything, passes."""
    if view.topic_partitions():
        return
    remote_options = config.remote_options()
    if missing_local_root(config, remote_options) is not None:
        return  # nothing there: opening it would create it
    wanted = None if topics is None else sorted(set(topics))
    objects, copies = segment_objects(layout, wanted)
    if not objects:
        return
    held = f"{layout!r} holds {objects} objects of {copies}"
    held += " segment copies" if copies != 1 else " segment copy"
    if wanted is not None:
        held += f" of {', '.join(repr(t) for t in wanted)}"
    if listing is not None:
        left_out = len(listing.skipped)
        first = f": {listing.skipped[0]}" if listing.skipped else ""
        raise EmptyViewError(
            f"{held}, but none of them is a finished copy: {left_out} left out{first}",
            remedy_applies=False,
        )
    raise EmptyViewError(
        f"the remote log metadata ({eventlog_source(config)}, and rlmm's snapshots) lists no"
        f" segment, but {held}: the metadata is not this store's (check [eventlog] and"
        " [snapshot]), or it was lost"
    )


def _check_topics(view_topics: set[str], wanted: list[str], layout: RemoteLayout) -> None:
    unknown = [t for t in wanted if t not in view_topics]
    if not unknown:
        return
    known = ", ".join(sorted(view_topics)[:20]) or "none"
    raise ArchiveError(
        f"unknown topic {unknown[0]!r}: no object of it in {layout!r} (known: {known})"
    )


def open_archive_view(
    config: RlmmConfig,
    *,
    from_store: bool = False,
    topics: Iterable[str] | None = None,
) -> MetadataView:
    """The view every reader reads: the metadata log's (snapshot + tail), or with
    ``from_store`` the remote store's alone (see the module). ``topics`` narrows what
    the store-alone view reads (None: every topic); a topic named there that the store
    holds no object of is an ArchiveError naming the topics it holds. The metadata log's
    view is always whole.

    Errors: MetadataLogUnavailableError (the metadata log cannot be read),
    EmptyViewError (the view lists nothing, the store holds segment objects),
    ArchiveError, and rlmm ConfigError for bad settings."""
    if from_store:
        wanted = None if topics is None else list(topics)
        _require_local_root(config)
        with open_remote_layout(config) as layout:
            view, listing = open_store_view(config, wanted, layout)
            if wanted:
                _check_topics(listing.topics, wanted, layout)
            check_view_not_empty(config, view, layout, listing, wanted)
        return view
    view = open_metadata_view(config)
    nothing_there = missing_local_root(config, config.remote_options()) is not None
    if not view.topic_partitions() and not nothing_there:  # (opening it would create it)
        with open_remote_layout(config) as layout:
            check_view_not_empty(config, view, layout)
    return view


__all__ = [
    "check_view_not_empty",
    "missing_local_root",
    "open_archive_view",
    "open_store_view",
    "segment_objects",
    "store_settings",
    "store_view_snapshots",
]
