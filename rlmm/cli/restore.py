"""`rlmm restore`: topics from the remote tier back into a live cluster, exactly once;
`rlmm restore-offsets`: consumer groups' offsets moved to the restored topic.

Invariant: a thin layer: parse, call ``rlmm.restore.restore_topics`` (or
``translate_restored_offsets``) once (the loop over several ``--topic`` is the
library's), hand the result to the run's Output; bad input is the library's
RestoreInputError, rendered as one line with exit 2 like every error. Progress goes to
stderr (a rich bar on a terminal only).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from rlmm.cli.session import common_options, session
from rlmm.cli.units import human_bytes
from rlmm.topics import RESTORE_OFFSETS_TOPIC, RESTORE_PROGRESS_TOPIC

if TYPE_CHECKING:
    from rich.progress import TaskID

    from rlmm.restore import ProgressCallback


def _partitions(value: str | None) -> tuple[int, ...]:
    if not value:
        return ()
    try:
        out = tuple(int(p) for p in value.split(",") if p.strip())
    except ValueError:
        raise click.BadParameter(
            f"{value!r}: expected numbers like 0,1,3", param_hint="'--partitions'"
        ) from None
    if any(p < 0 for p in out):
        raise click.BadParameter(f"{value!r}: partitions are >= 0", param_hint="'--partitions'")
    return out


def _timestamp(value: str | None, name: str) -> int | None:
    """Milliseconds since the epoch, or an ISO-8601 time (UTC unless it says)."""
    if value is None:
        return None
    if value.lstrip("-").isdigit():
        return int(value)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r}: expected milliseconds or an ISO-8601 time", param_hint=name
        ) from None
    if parsed.tzinfo is None:
        from datetime import UTC

        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def _properties(path: Path | None, pairs: tuple[str, ...]) -> dict[str, str]:
    """Kafka client properties: a properties file (Kafka tools' --command-config) and
    -X key=value pairs over it."""
    props: dict[str, str] = {}
    if path is not None:
        for line in path.read_text().splitlines():
            line = line.strip()
            if not line or line[0] in "#!":
                continue
            cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
            if cut <= 0:
                raise click.BadParameter(f"{path}: not a key=value line: {line!r}")
            key, value = line[:cut], line[cut + 1 :]
            props[key.strip()] = value.strip()
    props.update(_pairs(pairs, "-X"))
    return props


def _pairs(pairs: tuple[str, ...], option: str) -> dict[str, str]:
    """``key=value`` arguments of ``option``, the last of a key winning."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected key=value, got {pair!r}", param_hint=option)
        out[key.strip()] = value.strip()
    return out


@contextmanager
def _partition_bars() -> Iterator[Callable[[str], ProgressCallback | None] | None]:
    """One rich bar per source topic-partition on stderr when it is a terminal (offsets
    done, records written, bytes read, time left); None (no reporting) otherwise."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}% {task.fields[records]} records {task.fields[read]}"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        tasks: dict[tuple[str, int], TaskID] = {}

        def for_topic(topic: str) -> ProgressCallback:
            def on_progress(
                partition: int, offsets: int, total: int, records: int, read: int
            ) -> None:
                if (topic, partition) not in tasks:
                    tasks[topic, partition] = bar.add_task(
                        f"{topic}-{partition}", total=total, records=0, read=""
                    )
                bar.update(tasks[topic, partition], completed=offsets, total=total,
                           records=records, read=human_bytes(read))  # fmt: skip

            return on_progress

        yield for_topic


@click.command("restore")
@click.option(
    "--topic",
    "topics",
    required=True,
    multiple=True,
    help="an archived topic to restore (repeat for several, restored in turn)",
)
@click.option("--partitions", help="source partitions, e.g. 0,1,3 (default: all)")
@click.option("--from-offset", type=click.IntRange(min=0), help="first offset (default: earliest)")
@click.option("--to-offset", type=click.IntRange(min=0),
              help="end offset, exclusive (default: the archive's end)")  # fmt: skip
@click.option("--from-timestamp", help="from the first record with this timestamp or later"
              " (ms, or ISO-8601; UTC unless given)")  # fmt: skip
@click.option("--to-timestamp", help="up to, excluding, the first record with this timestamp"
              " or later")  # fmt: skip
@click.option(
    "--target-topic", help="topic to write, one --topic only (default: the source topic's name)"
)
@click.option("--target-prefix", help="write each topic to this prefix + its name")
@click.option("--bootstrap-server", required=True, help="the target cluster")
@click.option(
    "--command-config",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Kafka client properties for the target (security.protocol, sasl.*, ssl.*)",
)
@click.option(
    "-X",
    "properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="one Kafka client property for the target (over --command-config)",
)
@click.option(
    "--from-store",
    is_flag=True,
    help="list segments from the store's objects alone (no __remote_log_metadata)",
)
@click.option(
    "--partitioner",
    type=click.Choice(["identity", "murmur2"]),
    default="identity",
    show_default=True,
    help="identity: partition p to p; murmur2: by key, as Kafka's producer",
)
@click.option("--resume", is_flag=True, help="continue the restore whose progress the target holds")
@click.option("--dry-run", is_flag=True, help="print the plan; write nothing")
@click.option(
    "--skip-missing",
    is_flag=True,
    help="go on past missing segments (default: stop at the first gap)",
)
@click.option(
    "--topic-config",
    "topic_configs",
    multiple=True,
    metavar="KEY=VALUE",
    help="a config of a target topic the restore creates, over the source's (repeat)",
)
@click.option(
    "--no-topic-configs",
    is_flag=True,
    help="create the target without the source topic's configs kept in the store",
)
@click.option(
    "--progress-topic",
    default=RESTORE_PROGRESS_TOPIC,
    show_default=True,
    help="compacted topic of the target holding the restore's progress",
)
@click.option(
    "--offsets-topic",
    default=RESTORE_OFFSETS_TOPIC,
    show_default=True,
    help="compacted topic of the target holding the offset map (rlmm restore-offsets)",
)
@click.option(
    "--transaction-records",
    type=click.IntRange(min=1),
    default=10_000,
    show_default=True,
    help="records per transaction (a transaction commits once it holds this many)",
)
@click.option(
    "--partitions-in-flight",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="source partitions read and sent at once",
)
@common_options
def restore(
    topics: tuple[str, ...], partitions: str | None, from_offset: int | None,
    to_offset: int | None, from_timestamp: str | None, to_timestamp: str | None,
    target_topic: str | None, target_prefix: str | None,
    bootstrap_server: str, command_config: Path | None, properties: tuple[str, ...],
    from_store: bool, partitioner: str, resume: bool, dry_run: bool, skip_missing: bool,
    topic_configs: tuple[str, ...], no_topic_configs: bool,
    progress_topic: str, offsets_topic: str, transaction_records: int,
    partitions_in_flight: int,
) -> None:  # fmt: skip
    """Restore topics from the archive into topics of a live cluster, exactly once."""
    from rlmm.restore import RestoreOptions, client_settings, restore_topics, select_topics

    selections = select_topics(
        topics,
        target_topic=target_topic,
        target_prefix=target_prefix,
        partitions=_partitions(partitions),
        from_offset=from_offset,
        to_offset=to_offset,
        from_timestamp_ms=_timestamp(from_timestamp, "--from-timestamp"),
        to_timestamp_ms=_timestamp(to_timestamp, "--to-timestamp"),
        partitioner=partitioner,
        skip_missing=skip_missing,
    )
    client = client_settings(bootstrap_server, _properties(command_config, properties))
    options = RestoreOptions(
        resume=resume, dry_run=dry_run, progress_topic=progress_topic,
        offsets_topic=offsets_topic,
        transaction_records=transaction_records, partitions_in_flight=partitions_in_flight,
        topic_configs=not no_topic_configs,
        topic_config_overrides=_pairs(topic_configs, "--topic-config"),
    )  # fmt: skip
    s = session()
    with _partition_bars() as on_progress:
        reports = restore_topics(
            s.config, selections, client, from_store=from_store, options=options,
            on_progress=on_progress,
        )  # fmt: skip
    s.output.restores(reports)


def _offset_pairs(values: tuple[str, ...]) -> list[tuple[int, int]]:
    out = []
    for value in values:
        partition, sep, offset = value.partition(":")
        if not sep or not partition.strip().isdigit() or not offset.strip().isdigit():
            raise click.BadParameter(
                f"{value!r}: expected PARTITION:OFFSET, e.g. 0:3000", param_hint="'--offset'"
            )
        out.append((int(partition), int(offset)))
    return out


@click.command("restore-offsets")
@click.option("--bootstrap-server", required=True,
              help="the target cluster: the restored topic and its offset map")  # fmt: skip
@click.option("--target-topic", required=True, help="the restored topic")
@click.option("--topic", "source_topic", help="the source topic (default: the map's)")
@click.option("--group", help="translate this consumer group's committed offsets of the source")
@click.option("--group-bootstrap-server",
              help="the cluster holding --group's offsets (default: the target)")  # fmt: skip
@click.option("--offset", "offsets", multiple=True, metavar="PARTITION:OFFSET",
              help="a committed source offset to translate (repeat)")  # fmt: skip
@click.option(
    "--from-file",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="source offsets in Kafka's CSV (topic,partition,offset; kafka-consumer-groups"
    " --reset-offsets --export)",
)
@click.option(
    "--csv",
    "csv_out",
    type=click.Path(path_type=Path, dir_okay=False),
    help="write the target's offsets to this file for kafka-consumer-groups --reset-offsets"
    " --from-file",
)
@click.option(
    "--command-config",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Kafka client properties for the clusters (security.protocol, sasl.*, ssl.*)",
)
@click.option("-X", "properties", multiple=True, metavar="KEY=VALUE",
              help="one Kafka client property (over --command-config)")  # fmt: skip
@click.option("--offsets-topic", default=RESTORE_OFFSETS_TOPIC, show_default=True,
              help="the topic of the target holding the restore's offset map")  # fmt: skip
@click.option("--progress-topic", default=RESTORE_PROGRESS_TOPIC, show_default=True,
              help="the topic of the target holding the restore's progress")  # fmt: skip
@common_options
def restore_offsets(
    bootstrap_server: str, target_topic: str, source_topic: str | None, group: str | None,
    group_bootstrap_server: str | None, offsets: tuple[str, ...], from_file: Path | None,
    csv_out: Path | None, command_config: Path | None, properties: tuple[str, ...],
    offsets_topic: str, progress_topic: str,
) -> None:  # fmt: skip
    """Translate committed offsets of a restored topic's source (a consumer group's) to
    the restored topic's, through the offset map `rlmm restore` wrote, for
    kafka-consumer-groups --reset-offsets --from-file."""
    from rlmm.restore import client_settings, translate_restored_offsets

    given = [name for name, v in (("--group", group), ("--offset", offsets),
                                  ("--from-file", from_file)) if v]  # fmt: skip
    if len(given) != 1:
        raise click.UsageError(
            "give the source offsets one way: --group, --offset or --from-file"
            + (f" (got {', '.join(given)})" if given else "")
        )
    props = _properties(command_config, properties)
    client = client_settings(bootstrap_server, props)
    result = translate_restored_offsets(
        client,
        target_topic,
        offsets=_offset_pairs(offsets) or None,
        offsets_csv=(from_file.read_text(), str(from_file)) if from_file else None,
        group=group,
        group_client=client_settings(group_bootstrap_server, props)
        if group_bootstrap_server
        else None,
        source_topic=source_topic,
        offsets_topic=offsets_topic,
        progress_topic=progress_topic,
    )
    if csv_out is not None:
        csv_out.write_text(result.csv())
    session().output.offset_translations(result)


def register(main: click.Group) -> None:
    main.add_command(restore)
    main.add_command(restore_offsets)
