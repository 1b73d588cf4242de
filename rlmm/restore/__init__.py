"""Restore: bring a topic back from the remote tier into a live cluster, exactly once.

The library side of ``rlmm restore``. The source is the archive as the other readers
see it (``[remote]`` names the layout: rlmm's own, Kafka's LocalTieredStorage or
Aiven's S3), with its segment list from ``__remote_log_metadata`` (``[eventlog]``) or,
after a disaster, rebuilt from the store alone (``from_store``: its objects, and rlmm's
snapshots in the configured ``[snapshot]`` store where they hold a copy). The target
is any Kafka cluster; data and progress commit in one transaction there. A target the
restore creates gets the source topic's configs that `rlmm offload` kept in the store
(``rlmm.restore.topic_configs`` says which, and why not the others); where each source
offset went is kept in the target cluster (``rlmm.restore.offset_map``), and
``translate_restored_offsets`` moves a consumer group's offsets through it.

Invariant: :func:`restore` and :func:`restore_topics` (several topics, one after
another) write nothing before every check of every topic has passed, and close every
client, reader and layout they opened before they return.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from remote.topic_configs import TopicConfigs, TopicConfigStore
from rlmm.archive import (
    StoreListing,
    check_view_not_empty,
    close_remote_storage,
    list_store_segments,
    open_archive_view,
    open_store_view,
    remote_storage_for,
    store_metadata_view,
    store_settings,
)
from rlmm.archive.sources import missing_local_root
from rlmm.config import RlmmConfig
from rlmm.errors import ConfigError
from rlmm.factory import open_topic_config_store
from rlmm.restore.errors import (
    MissingSegmentsError,
    PartitionCountMismatchError,
    RangeOutsideArchiveError,
    RestoreError,
    RestoreInputError,
    ResumeMismatchError,
    SharedTargetError,
    TargetClusterError,
    TargetNotEmptyError,
    TopicConfigError,
    UnknownSourceError,
)
from rlmm.restore.offset_map import OFFSETS_TOPIC, OffsetMap, Translation
from rlmm.restore.offsets import OffsetTranslations, read_offset_map, translate_offsets
from rlmm.restore.partitioner import murmur2, murmur2_partition
from rlmm.restore.plan import (
    IDENTITY,
    MURMUR2,
    PARTITIONERS,
    PartitionPlan,
    RestorePlan,
    RestoreSelection,
    build_plan,
    select_topics,
)
from rlmm.restore.progress import PROGRESS_TOPIC, Progress, read_progress
from rlmm.restore.report import (
    PartitionResult,
    ProgressCallback,
    RestoreOptions,
    RestoreReport,
    transactional_id,
)
from rlmm.restore.run import PlanFor, run_restore, run_restores
from rlmm.restore.topic_configs import ConfigLookup, TopicConfigChoice, choose_configs


def client_settings(bootstrap_servers: str, properties: Mapping[str, str] | None = None) -> dict:
    """aiokafka keyword arguments for the target cluster from Kafka's client property
    names (``security.protocol``, ``sasl.*``, ``ssl.*``), as the sidecar takes them."""
    from eventlog.errors import EventLogConfigError
    from eventlog.kafka_client import client_settings_from_properties

    props = {**(properties or {}), "bootstrap.servers": bootstrap_servers}
    try:
        return client_settings_from_properties(props)
    except EventLogConfigError as e:
        raise ConfigError(f"bad target cluster settings: {e}") from e


def _check_local_root(config: RlmmConfig, remote_options: Mapping[str, Any]) -> None:
    """UnknownSourceError naming ``[remote] root`` when a local store's root does not
    exist: checked before the store is opened, which would create it (an empty store,
    where a typo would then read as "no object of the topic")."""
    missing = missing_local_root(config, remote_options)
    if missing is None:
        return
    raise UnknownSourceError(
        f"{missing} does not exist: no archive to restore from; set [remote] root to the"
        " directory the offloader copies into (its own [remote] root)"
    )


def restore(
    config: RlmmConfig,
    selection: RestoreSelection,
    client: Mapping[str, Any],
    *,
    from_store: bool = False,
    options: RestoreOptions | None = None,
    on_progress: ProgressCallback | None = None,
) -> RestoreReport:
    """Restore ``selection`` from the configured archive into the cluster ``client``
    reaches (see rlmm.restore.run for the guarantees)."""

    def per_topic(_topic: str) -> ProgressCallback | None:
        return on_progress

    (report,) = restore_topics(
        config, [selection], client, from_store=from_store, options=options,
        on_progress=per_topic,
    )  # fmt: skip
    return report


def restore_topics(
    config: RlmmConfig,
    selections: Sequence[RestoreSelection],
    client: Mapping[str, Any],
    *,
    from_store: bool = False,
    options: RestoreOptions | None = None,
    on_progress: Callable[[str], ProgressCallback | None] | None = None,
) -> list[RestoreReport]:
    """Restore several selections (one per source topic, see ``select_topics``), one
    report each: every one is planned and checked before anything is written for any,
    then each is restored in turn (``on_progress(source_topic)`` gives each topic's
    callback). See rlmm.restore.run.run_restores for the guarantees."""
    remote_options = config.remote_options()
    topics = [s.topic for s in selections]
    _check_local_root(config, remote_options)
    try:
        layout = remote_storage_for(remote_options)
        if from_store:
            view, listing = open_store_view(config, topics, layout)
            unknown = [t for t in topics if t not in listing.topics]
            if unknown and not listing.topics:
                raise UnknownSourceError(
                    f"unknown topic {unknown[0]!r}: {layout!r} holds no segment of any topic:"
                    f" check {store_settings(remote_options)}"
                )
            if unknown:
                known = ", ".join(sorted(listing.topics)[:20])
                raise UnknownSourceError(
                    f"unknown topic {unknown[0]!r}: no object of it in {layout!r} (known: {known})"
                )
            check_view_not_empty(config, view, layout, listing, topics)
            source = "store"
        else:
            view = open_archive_view(config)
            source = "metadata"

        def planner(selection: RestoreSelection) -> PlanFor:
            def plan_for(resume_from: Mapping[int, int] | None) -> RestorePlan:
                return build_plan(
                    view, layout, remote_options, selection,
                    metadata_source=source, resume_from=resume_from,
                )  # fmt: skip

            return plan_for

        plan_fors = [planner(s) for s in selections]
        store = open_topic_config_store(config)
        try:
            lookup = _config_lookup(store, remote_options)
            return asyncio.run(run_restores(plan_fors, client, options, on_progress, lookup))
        finally:
            if store is not None:
                store.close()
    finally:
        close_remote_storage()


def translate_restored_offsets(
    client: Mapping[str, Any], target_topic: str, **kwargs: Any
) -> OffsetTranslations:
    """Source offsets of a restored topic translated through its offset map (a
    consumer group's, given, or from Kafka's offsets CSV); see
    rlmm.restore.offsets.translate_offsets for the arguments."""
    return asyncio.run(translate_offsets(client, target_topic, **kwargs))


def _config_lookup(
    store: TopicConfigStore | None, remote_options: Mapping[str, Any]
) -> ConfigLookup:
    """The configs `rlmm offload` kept for a source topic id, and where (or why none)."""

    def lookup(topic: str, topic_id: str) -> tuple[TopicConfigs | None, str]:
        if store is None:
            kind = remote_options.get("type")
            return None, (
                f"none kept: [remote] is a Kafka cluster's own tier (remote.type = {kind!r}),"
                " where rlmm keeps no topic configs"
            )
        found = store.read(topic, topic_id)
        if found is None:
            return None, (
                f"none kept at {store.where(topic, topic_id)} (the topic was tiered by the"
                " broker plugin, or by `rlmm offload` without a cluster or before it kept"
                " them)"
            )
        return found, store.where(topic, topic_id)

    return lookup


__all__ = [
    "IDENTITY",
    "MURMUR2",
    "OFFSETS_TOPIC",
    "PARTITIONERS",
    "PROGRESS_TOPIC",
    "MissingSegmentsError",
    "OffsetMap",
    "OffsetTranslations",
    "PartitionCountMismatchError",
    "PartitionPlan",
    "PartitionResult",
    "PlanFor",
    "Progress",
    "ProgressCallback",
    "RangeOutsideArchiveError",
    "RestoreError",
    "RestoreInputError",
    "RestoreOptions",
    "RestorePlan",
    "RestoreReport",
    "RestoreSelection",
    "ResumeMismatchError",
    "SharedTargetError",
    "StoreListing",
    "TargetClusterError",
    "TargetNotEmptyError",
    "TopicConfigChoice",
    "TopicConfigError",
    "Translation",
    "UnknownSourceError",
    "build_plan",
    "choose_configs",
    "client_settings",
    "list_store_segments",
    "murmur2",
    "murmur2_partition",
    "read_offset_map",
    "read_progress",
    "restore",
    "restore_topics",
    "run_restore",
    "run_restores",
    "select_topics",
    "store_metadata_view",
    "transactional_id",
    "translate_offsets",
    "translate_restored_offsets",
]
