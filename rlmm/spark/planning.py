"""Driver-side planning of a kafka-archive read: options -> archive slices -> input partitions.

Job: load the rlmm configuration the options name, open the metadata view (the
metadata log's, or with ``fromStore`` the remote store's alone), check the subscription
against the archive (at ``load()``), and plan through ``rlmm.archive.plan_slices``, with
``minPartitions`` and ``maxRecordsPerPartition`` met first by planning smaller slices
(cut at offset-index positions, so no byte is fetched twice) and, where one index
interval is still too many records, by cutting a slice's offset range (those pieces
share a byte range; each keeps only its own offsets). Then ``rlmm.archive.pack_slices``
groups consecutive slices into Spark input partitions (Spark's file-source rule, with
``maxBytesPerPartition`` as the group size), so small segments are not a task each.

Invariants: the slices returned tile each partition's requested offsets, in order,
without overlap (no record twice); a local remote storage root is made absolute
here, because executors do not share the driver's working directory; nothing here
runs on an executor.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlmm.config import RlmmConfig, load_config
from rlmm.errors import ConfigError
from rlmm.spark.errors import KafkaArchiveOptionError
from rlmm.spark.options import KafkaArchiveOptions

if TYPE_CHECKING:
    from rlmm.archive import MetadataView, ReadRequest, RowBounds, Slice

log = logging.getLogger(__name__)


def rlmm_config(options: KafkaArchiveOptions) -> RlmmConfig:
    """The configuration of the ``config`` file under the ``spark.rlmm.*`` Spark conf
    under the ``rlmm.*`` options."""
    settings = options.settings()
    try:
        return load_config(options.config_path, overrides=settings)
    except ConfigError as e:
        text = str(e)
        # The setting the message is about: quoted ('remote.bucket') or a bare word.
        named = [
            key for key in settings if re.search(rf"(?<![\w.]){re.escape(key)}(?![\w.])", text)
        ]
        option = options.setting_name(named[0]) if named else "config"
        raise KafkaArchiveOptionError(option, text) from e


def remote_options(config: RlmmConfig) -> dict[str, Any]:
    """``config.remote_options()`` as executors get them: a local root (or LocalTieredStorage
    dir) made absolute on the driver, and no secret (they travel in every pickled input
    partition): an executor reads them again from the same config file, or uses its
    own credentials (the AWS chain)."""
    from remote.registry import remote_type
    from rlmm.secrets import SECRETS_FROM, without_secrets

    out, removed = without_secrets(config.remote_options())
    for key in remote_type(out.get("type", "local")).paths:
        if key in out:
            out[key] = str(Path(out[key]).resolve())
    if removed and config.source != "defaults":
        out[SECRETS_FROM] = str(Path(config.source).resolve())
    return out


def read_request(
    options: KafkaArchiveOptions, max_slice_bytes: int, where: RowBounds | None = None
) -> ReadRequest:
    from rlmm.archive import ArchiveError, ReadRequest

    try:
        return ReadRequest(
            topics=options.topics,
            pattern=options.pattern,
            partitions=options.assign,
            starting_offsets=options.starting_offsets,
            ending_offsets=options.ending_offsets,
            starting_timestamp_ms=options.starting_timestamp_ms,
            ending_timestamp_ms=options.ending_timestamp_ms,
            starting_timestamp_strategy=options.starting_timestamp_strategy,
            fail_on_data_loss=options.fail_on_data_loss,
            max_slice_bytes=max_slice_bytes,
            isolation_level=options.isolation_level,
            include_headers=options.include_headers,
            where=where,
        )
    except ArchiveError as e:  # parse_options checks the same rules first
        raise KafkaArchiveOptionError(options.subscription, str(e)) from e


# How a Spark user reads the archive from the store alone.
FROM_STORE_REMEDY = '.option("fromStore", "true")'


def metadata_option(options: KafkaArchiveOptions) -> str:
    """The option that names the metadata log: ``config``, or the ``rlmm.*`` (or
    ``spark.rlmm.*``) setting of it given without a config file."""
    if options.config_path is None:
        settings = options.settings()
        placing = ("eventlog.dir", "eventlog.bootstrap_servers", "data_dir", "eventlog.type")
        for key in [*placing, *sorted(settings)]:
            if key in settings and (key == "data_dir" or key.startswith("eventlog.")):
                return options.setting_name(key)
    return "config"


def open_view(options: KafkaArchiveOptions, config: RlmmConfig) -> MetadataView:
    """The read's metadata view: the metadata log's, or with ``fromStore`` the remote
    store's alone (of the topics named, or all with a pattern). A metadata log that
    cannot be read, or lists nothing beside a store of segments, is a
    KafkaArchiveOptionError naming the option of the config and ``fromStore``."""
    from rlmm.archive import StoreRemedyError, open_archive_view

    topics = options.requested_topics() or None
    try:
        return open_archive_view(config, from_store=options.from_store, topics=topics)
    except StoreRemedyError as e:
        option = "fromStore" if options.from_store else metadata_option(options)
        raise KafkaArchiveOptionError(option, e.with_remedy(FROM_STORE_REMEDY)) from e


def check_subscription(options: KafkaArchiveOptions) -> None:
    """At ``load()``: the topics (and partitions) named are in the archive."""
    from rlmm.archive import ArchiveError, select_partitions

    config = rlmm_config(options)
    request = read_request(options, options.max_bytes_per_partition)
    try:
        with open_view(options, config) as view:
            selected = select_partitions(view, request)
    except KafkaArchiveOptionError:
        raise  # open_view's: it names its option
    except ArchiveError as e:
        raise KafkaArchiveOptionError(options.subscription, str(e)) from e
    except ConfigError as e:
        raise KafkaArchiveOptionError("config", str(e)) from e
    have = {(tp.topic, tp.partition) for tp in selected}
    for option, key in options.offset_keys():
        if key not in have:
            raise KafkaArchiveOptionError(
                option, f"names {key[0]}-{key[1]}, which is not in the archive"
            )


def plan(options: KafkaArchiveOptions, where: RowBounds | None = None) -> list[Slice]:
    """The slices of one read, split as minPartitions / maxRecordsPerPartition ask;
    ``where`` (the query's pushed filters) prunes what the query would drop anyway."""
    from rlmm.archive import plan_slices

    config = rlmm_config(options)
    remote = remote_options(config)
    side_index = config.side_index_location()
    limit = options.max_bytes_per_partition
    with open_view(options, config) as view:
        request = read_request(options, limit, where)
        slices = plan_slices(view, request, remote, side_index=side_index)
        smaller = _smaller_limit(slices, options)
        if smaller is not None and smaller < limit:
            slices = _replan(view, options, remote, smaller, where, side_index)
    return split_by_offsets(slices, options)


def plan_groups(
    options: KafkaArchiveOptions, where: RowBounds | None = None
) -> list[tuple[Slice, ...]]:
    """The slices of one read (``plan``) grouped into Spark input partitions."""
    from rlmm.archive import OPEN_COST_BYTES, pack_slices

    open_cost = options.open_cost_in_bytes
    return pack_slices(
        plan(options, where),
        options.max_bytes_per_partition,
        min_groups=options.min_partitions or 1,
        max_group_records=options.max_records_per_partition,
        open_cost_bytes=OPEN_COST_BYTES if open_cost is None else open_cost,
    )


def _replan(
    view: MetadataView,
    options: KafkaArchiveOptions,
    remote: Mapping[str, Any],
    limit: int,
    where: RowBounds | None,
    side_index: str | None,
) -> list[Slice]:
    from rlmm.archive import plan_slices

    log.info("kafka-archive: planning again with slices of at most %d bytes", limit)
    request = read_request(options, limit, where)
    return plan_slices(view, request, remote, side_index=side_index)


def _records(piece: Slice) -> int:
    return piece.until_offset - piece.from_offset


def _smaller_limit(slices: list[Slice], options: KafkaArchiveOptions) -> int | None:
    """A slice size that meets minPartitions and maxRecordsPerPartition (None: fine)."""
    limits: list[int] = []
    total = sum(s.size_in_bytes for s in slices)
    if options.min_partitions and len(slices) < options.min_partitions and total:
        limits.append(max(1, total // options.min_partitions))
    most = options.max_records_per_partition
    if most:
        for s in slices:
            if _records(s) > most:
                limits.append(max(1, s.size_in_bytes * most // _records(s)))
    return min(limits) if limits else None


def _cut(piece: Slice, pieces: int) -> list[Slice]:
    """``piece`` as ``pieces`` slices of its offset range over the same bytes."""
    span = _records(piece)
    pieces = max(1, min(pieces, span))
    bounds = [piece.from_offset + span * i // pieces for i in range(pieces + 1)]
    out = []
    for lo, hi in itertools.pairwise(bounds):
        txns = tuple(t for t in piece.aborted_transactions if t[2] >= lo and t[1] < hi)
        out.append(
            dataclasses.replace(piece, from_offset=lo, until_offset=hi, aborted_transactions=txns)
        )
    return out


def split_by_offsets(slices: list[Slice], options: KafkaArchiveOptions) -> list[Slice]:
    """Cut slices by offsets where index-aligned slices could not get small enough."""
    most = options.max_records_per_partition
    out: list[Slice] = []
    for s in slices:
        out.extend(_cut(s, -(-_records(s) // most)) if most and _records(s) > most else [s])
    want = options.min_partitions or 0
    while len(out) < want:
        biggest = max(range(len(out)), key=lambda i: _records(out[i]), default=None)
        if biggest is None or _records(out[biggest]) < 2:
            break
        more = want - len(out) + 1
        out[biggest : biggest + 1] = _cut(out[biggest], more)
    return out


__all__ = [
    "FROM_STORE_REMEDY",
    "check_subscription",
    "metadata_option",
    "open_view",
    "plan",
    "plan_groups",
    "remote_options",
    "rlmm_config",
    "split_by_offsets",
]
