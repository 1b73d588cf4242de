"""`rlmm snapshot inspect`: what the manager's snapshots hold (files at a path, or the
configured store's: a directory or an S3 bucket), and whether they are intact.
Invariant: a corrupt snapshot is reported (exit 1), never raised."""

from __future__ import annotations

from pathlib import Path

import click

from rlmm.cli.session import common_options, session


@click.group("snapshot")
def snapshot() -> None:
    """The manager's snapshot files."""


@snapshot.command("inspect")
@click.argument("path", required=False, type=click.Path(path_type=Path))
@common_options
def inspect(path: Path | None) -> None:
    """Version, applied offsets, counts and checksum of PATH (a snapshot file or a
    directory of them; default: every snapshot in the configured store, a directory
    or an S3 bucket, every owner's)."""
    from rlmm.ops.snapshot_report import inspect_configured, inspect_snapshots

    reports = inspect_snapshots(path) if path is not None else inspect_configured(session().config)
    session().output.snapshots(reports)
    if not all(r.ok for r in reports):
        click.get_current_context().exit(1)


def register(main: click.Group) -> None:
    main.add_command(snapshot)
