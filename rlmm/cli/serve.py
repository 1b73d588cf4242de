"""`rlmm serve`: the Python side of the Kafka broker plugin (one process per broker).

Invariant: a thin layer; parsing and logging set-up only, the work is
``rlmm.plugin.server.PluginServer``. The JVM bridge starts it (or it runs as a
container sidecar and the bridge attaches to its socket); it exits 0 when stopped by a
signal or when the broker is gone, 3 when another serve already holds the socket, 2 on
a configuration error.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import click

from rlmm.cli.session import LOG_FORMAT, common_options, session

ALREADY_SERVING = 3

# Under a broker's bridge, which reads the level first and lets Kafka's log add the time.
BRIDGED_LOG_FORMAT = "%(levelname)s %(name)s: %(message)s"


@click.command("serve")
@click.option(
    "--socket",
    "socket_path",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="the Unix socket the broker's bridge connects to",
)
@click.option("--parent-pid", type=int, help="stop when this process (the broker) is gone")
@click.option(
    "--metrics-port",
    type=int,
    envvar="RLMM_SERVE_METRICS_PORT",
    help="serve Prometheus metrics, /healthz and /readyz on PORT (the broker starts this"
    " process: set RLMM_SERVE_METRICS_PORT in the broker's environment)",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    envvar="RLMM_SERVE_METRICS_HOST",
    help="address the metrics port binds",
)
@common_options
def serve(
    socket_path: Path, parent_pid: int | None, metrics_port: int | None, metrics_host: str
) -> None:
    """Answer a Kafka broker's rlmm plugin (RemoteStorageManager and
    RemoteLogMetadataManager) over a local socket."""
    from rlmm.plugin.errors import AlreadyServingError
    from rlmm.plugin.server import PluginServer

    s = session()
    root = logging.getLogger()
    # A container's log wants the time on every line; under a broker (``--parent-pid``)
    # the bridge logs each line at its level into Kafka's log, which adds the time.
    line_format = LOG_FORMAT if parent_pid is None else BRIDGED_LOG_FORMAT
    for handler in root.handlers:
        handler.setFormatter(logging.Formatter(line_format))
    if not s.debug:
        root.setLevel(logging.WARNING)
        logging.getLogger("rlmm").setLevel(logging.INFO)
    server = PluginServer(
        s.config_path,
        socket_path,
        parent_pid=parent_pid,
        overrides=s.overrides(),
        metrics_port=metrics_port,
        metrics_host=metrics_host,
    )
    try:
        asyncio.run(server.serve())
    except AlreadyServingError as e:
        click.echo(str(e), err=True)
        sys.exit(ALREADY_SERVING)


def register(main: click.Group) -> None:
    main.add_command(serve)
