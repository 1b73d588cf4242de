"""`rlmm events`: decoded metadata events as JSON lines, like Kafka's dump tool.

From the configured event log (file, or a Kafka cluster's ``__remote_log_metadata``)
or from raw metadata log segment files given as arguments. Invariant: an undecodable
record is printed as an error line with its offset and the dump goes on; the exit code
is 1 when there was one.
"""

from __future__ import annotations

import signal
from pathlib import Path

import click

from rlmm.cli.session import common_options, session


@click.command("events")
@click.argument("files", nargs=-1, type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--metadata-partition", "partitions", type=click.IntRange(min=0), multiple=True,
    help="only this metadata partition (repeatable; default: all)",
)  # fmt: skip
@click.option("--from-offset", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--follow", is_flag=True, help="keep printing new events until interrupted")
def events(
    files: tuple[Path, ...], partitions: tuple[int, ...], from_offset: int, follow: bool
) -> None:
    """Print metadata events as JSON lines (from the event log, or from FILES)."""
    from rlmm.ops.event_dump import DumpedEvent, dump_event_log, dump_segment_file

    out = session().output
    errors = 0

    def emit(item: DumpedEvent) -> None:
        nonlocal errors
        errors += item.error is not None
        out.event(item)

    if files:
        if follow or partitions:
            raise click.UsageError(
                "--follow and --metadata-partition read the event log, not FILES"
            )
        for path in files:
            for item in dump_segment_file(path):
                if item.offset is None or item.offset >= from_offset:
                    emit(item)
    else:
        if follow:
            # SIGTERM (systemd, Kubernetes, `timeout`) ends a follow as Ctrl-C does: exit 0.
            signal.signal(signal.SIGTERM, _interrupt)
        try:
            dump_event_log(
                session().config, emit, partitions=partitions or None, from_offset=from_offset,
                follow=follow,
            )  # fmt: skip
        except KeyboardInterrupt:
            if not follow:
                raise
            # Ctrl-C is how a follow ends: a clean stop, not an error.
    if errors:
        click.get_current_context().exit(1)


events = common_options(events)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def register(main: click.Group) -> None:
    main.add_command(events)
