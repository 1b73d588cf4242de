"""`rlmm records`: archived records read straight from remote storage (the archive
reader of the Spark source). Invariant: reads only; JSON lines or raw values on
stdout, nothing else."""

from __future__ import annotations

import sys

import click

from rlmm.cli.session import common_options, from_store_option, session


@click.command("records")
@click.argument("topic")
@click.option(
    "--partition",
    "partitions",
    type=click.IntRange(min=0),
    multiple=True,
    help="only this partition (repeatable; default: all)",
)
@click.option("--from-offset", type=click.IntRange(min=0), help="first offset (default: earliest)")
@click.option("--limit", type=click.IntRange(min=0), help="at most this many records")
@click.option(
    "--isolation",
    type=click.Choice(["read_uncommitted", "read_committed"]),
    default="read_uncommitted",
    show_default=True,
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "raw"]),
    default="json",
    show_default=True,
    help="json: one object per line; raw: each value and a newline",
)
@from_store_option
@common_options
def records(
    topic: str, partitions: tuple[int, ...], from_offset: int | None, limit: int | None,
    isolation: str, fmt: str, from_store: bool,
) -> None:  # fmt: skip
    """Print the archived records of TOPIC."""
    from rlmm.ops.record_dump import RecordQuery, raw_value, read_records, record_fields

    if fmt == "raw" and session().json:
        raise click.UsageError("--format raw prints the values as they are: not with --json")
    query = RecordQuery(topic, partitions, from_offset, limit, isolation)
    out = session().output
    for row in read_records(session().config, query, from_store=from_store):
        if fmt == "raw":
            sys.stdout.buffer.write(raw_value(row) + b"\n")
        else:
            out.record(record_fields(row))
    sys.stdout.flush()


def register(main: click.Group) -> None:
    main.add_command(records)
