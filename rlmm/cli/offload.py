"""`rlmm offload`: the sidecar that offloads Kafka log dirs to remote storage.

Invariant: a thin layer; parsing and rendering only, the work is
``rlmm.offload.sidecar.run_sidecar``. Errors are rendered by the root group (exit 2);
``--once`` exits 1 when a segment could not be copied, or when a log dir does not look
like a Kafka log dir (a partition dir, or one with no partition dir: named on stderr).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from rlmm.cli.session import common_options, session
from rlmm.errors import RemoteStorageError

if TYPE_CHECKING:
    from rlmm.offload.sidecar import SidecarPlan


@click.command("offload")
@click.option("--once", is_flag=True, help="run one copy and expiration round, then exit")
@click.option(
    "--log-dir",
    "log_dirs",
    multiple=True,
    required=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="a Kafka log dir (repeat for several)",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="change nothing: show each topic's partitions, leadership and effective settings,"
    " with where each setting came from",
)
@click.option("--metrics-port", type=int, help="serve Prometheus metrics on PORT")
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="address the metrics port binds (0.0.0.0: every interface, for a remote Prometheus)",
)
@common_options
def offload(
    once: bool,
    log_dirs: tuple[Path, ...],
    dry_run: bool,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Copy rolled segments of Kafka log dirs to remote storage and apply remote retention."""
    from rlmm.offload.display import not_copied
    from rlmm.offload.sidecar import plan_sidecar, run_sidecar

    s = session()
    # A daemon's log under nohup or systemd: when each line happened (a failover is
    # timed from it), the error line it may stop on included.
    s.time_every_line()
    if dry_run:
        show_plan(asyncio.run(plan_sidecar(s.config, log_dirs)), s.json)
        return
    if not s.debug:
        # one line per segment (or the progress bar on a terminal), warnings, errors
        logging.getLogger("rlmm.offload").setLevel(logging.INFO)
        # a broker unreachable, and back (aiokafka's line per failed connection stays
        # quiet: rlmm.cli's group sets it)
        logging.getLogger("eventlog.brokers").setLevel(logging.INFO)
        # A daemon's log is all an operator sees: the warnings of the metadata log,
        # the manager and the stores too (a one-shot command prints one error line).
        logging.getLogger().setLevel(logging.WARNING)
    report = asyncio.run(
        run_sidecar(
            s.config, log_dirs, once=once, metrics_port=metrics_port, metrics_host=metrics_host
        )
    )
    t = report.tally
    if s.json:
        summary = {
            "rounds": report.rounds,
            "partitions": report.partitions,
            "partitions_led": report.led,
            "segments_copied": t.copied,
            "bytes_copied": t.copied_bytes,
            "segments_deleted": t.deleted,
            "segments_not_copied_past_retention": t.skipped_expired,
            "offsets_missed": t.offsets_missed,
            "errors": t.errors,  # the newest KEPT_ERRORS of them
            "error_count": t.error_count,
            "stopped_by_signal": report.stopped_by_signal,
            "warnings": report.warnings,
            "topics_skipped": report.skipped_topics,
        }
        click.echo(json.dumps(summary, indent=2))
    else:
        click.echo(
            f"{report.rounds} rounds over {report.partitions} partitions ({report.led} led):"
            f" {t.copied} segments"
            f" copied ({t.copied_bytes} bytes), {t.deleted} deleted, {t.error_count} errors"
            + not_copied(t.skipped_expired, t.offsets_missed)
            + (" (stopped by signal)" if report.stopped_by_signal else "")
        )
    if once and report.leadership_unknown and not report.stopped_by_signal:
        # nothing was copied or expired: which partitions to lead was not learned
        raise RemoteStorageError(f"leadership unknown: {report.leadership_unknown}")
    if once and report.denied and not report.stopped_by_signal:
        # nothing can be copied until an operator grants the ACL: a refusal, exit 2
        raise RemoteStorageError(report.denied)
    if once and (t.errors or report.warnings) and not report.stopped_by_signal:
        sys.exit(1)


def show_plan(plan: SidecarPlan, as_json: bool) -> None:
    """Print a dry run's plan (``rlmm offload --dry-run``)."""
    if as_json:
        click.echo(json.dumps({
            "node_id": plan.node_id,
            "leadership": plan.leadership,
            "leadership_unknown": plan.leadership_unknown,
            "topics": [{
                "topic": t.topic, "partitions": t.partitions, "partitions_led": t.led,
                "offloaded": t.offloaded, "skipped": t.skipped,
                "settings": {n: {"value": v, "from": o} for n, (v, o) in t.settings.items()},
            } for t in plan.topics],
        }, indent=2))  # fmt: skip
        return
    click.echo(f"node {plan.node_id}; leadership {plan.leadership} (dry run: nothing changed)")
    if plan.leadership_unknown:
        click.echo(f"leadership unknown, nothing would be led: {plan.leadership_unknown}")
    for t in plan.topics:
        state = (f"never touched: {t.skipped}" if t.skipped
                 else "offloaded" if t.offloaded else "not offloaded")  # fmt: skip
        click.echo(f"topic {t.topic}: {t.partitions} partitions here, {t.led} led; {state}")
        if not t.skipped:
            for name, (value, origin) in t.settings.items():
                click.echo(f"  {name} = {value}  ({origin})")


def register(main: click.Group) -> None:
    main.add_command(offload)
