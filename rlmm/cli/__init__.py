"""The `rlmm` command: a thin click layer over the library.

Invariant: every command parses, calls one library function and renders; errors of
the project (RemoteStorageError) are rendered in one place as a clear message and
exit code 2, never a traceback. Each group of commands lives in its own module of
this package and is registered on ``main`` at the bottom of this file.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

import click

from rlmm.config import load_config, parse_scalar
from rlmm.errors import RemoteStorageError


def _errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    @wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except RemoteStorageError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(2)

    return run


@click.group()
@click.version_option(package_name="rlmm")
def main() -> None:
    """Kafka tiered storage (KIP-405): metadata manager, remote storage, tools."""


@main.command("config")
@click.option("--config", "path", type=click.Path(path_type=Path), help="TOML config file")
@click.option("--set", "settings", multiple=True, help="override: section.key=value")
@_errors
def show_config(path: Path | None, settings: tuple[str, ...]) -> None:
    """Print the resolved configuration (flags > RLMM_* env > file > defaults) as JSON."""
    overrides: dict[str, Any] = {}
    for item in settings:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"expected section.key=value, got {item!r}")
        overrides[key] = parse_scalar(value)
    config = load_config(path, overrides=overrides)
    click.echo(
        json.dumps(
            {
                "source": config.source,
                "broker_id": config.broker_id,
                "eventlog": config.event_log_options(),
                "snapshot": {**config.snapshot, "dir": str(config.snapshot_dir())},
                "remote": config.remote_options(),
                "manager": dict(config.manager),
            },
            indent=2,
            default=str,
        )
    )


@main.command()
def demo() -> None:
    """Run the end-to-end demo (what `make demo` runs)."""
    from rlmm.demo import main as run_demo

    sys.exit(run_demo())


from rlmm.cli import offload as _offload  # noqa: E402,F401  (registers `rlmm offload`)
