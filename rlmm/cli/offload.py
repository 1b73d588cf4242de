"""`rlmm offload`: the sidecar that offloads Kafka log dirs to remote storage.

Invariant: a thin layer; parsing and rendering only, the work is
``rlmm.offload.sidecar.run_sidecar``.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import click

from rlmm.cli import _errors, main
from rlmm.config import load_config


@main.command("offload")
@click.option("--config", "path", type=click.Path(path_type=Path), help="TOML config file")
@click.option("--once", is_flag=True, help="run one copy and expiration round, then exit")
@click.option(
    "--log-dir",
    "log_dirs",
    multiple=True,
    required=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="a Kafka log dir (repeat for several)",
)
@click.option("--metrics-port", type=int, help="serve Prometheus metrics on 127.0.0.1:PORT")
@_errors
def offload(
    path: Path | None, once: bool, log_dirs: tuple[Path, ...], metrics_port: int | None
) -> None:
    """Copy rolled segments of Kafka log dirs to remote storage and apply remote retention."""
    from rlmm.offload.sidecar import run_sidecar

    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    config = load_config(path)
    report = asyncio.run(run_sidecar(config, log_dirs, once=once, metrics_port=metrics_port))
    t = report.tally
    click.echo(
        f"{report.rounds} rounds over {report.partitions} partitions: {t.copied} segments"
        f" copied ({t.copied_bytes} bytes), {t.deleted} deleted, {len(t.errors)} errors"
        + (" (stopped by signal)" if report.stopped_by_signal else "")
    )
    if once and t.errors and not report.stopped_by_signal:
        sys.exit(1)
