"""What one run of the `rlmm` command shares: its options, config, Output and progress.

Invariant: ``--config``, ``--set``, ``--json`` and ``--debug`` mean the same on the group
(``rlmm --json verify``) and on every command (``rlmm verify --json``); the config is
loaded once, on first use, by ``load_config`` (flags > RLMM_* env > file > defaults);
the Output is built once, after every option was seen.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import click

from rlmm.cli.output import ConsoleOutput, JsonOutput, Output
from rlmm.config import RlmmConfig, load_config, parse_scalar

F = TypeVar("F", bound=Callable[..., Any])
# A long-running process's log (Kafka's broker log, a container's, nohup's) wants the
# time on every line; a one-shot command's one error line does not.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@dataclass
class Session:
    config_path: Path | None = None
    settings: list[str] = field(default_factory=list)
    json: bool = False
    wide: bool = False
    debug: bool = False
    timed: bool = False  # a long-running process: its error line carries the time too
    _config: RlmmConfig | None = None
    _output: Output | None = None

    def overrides(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for item in self.settings:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise click.BadParameter(
                    f"expected section.key=value, got {item!r}", param_hint="--set"
                )
            out[key.strip()] = parse_scalar(value)
        return out

    @property
    def config(self) -> RlmmConfig:
        if self._config is None:
            self._config = load_config(self.config_path, overrides=self.overrides())
        return self._config

    @property
    def output(self) -> Output:
        if self._output is None:
            self._output = (
                JsonOutput() if self.json else ConsoleOutput(wide=self.wide, timed=self.timed)
            )
        return self._output

    def time_every_line(self) -> None:
        """Put the time on every log line (LOG_FORMAT) and on the error line the
        process may stop on: for the long-running commands (offload, serve)."""
        for handler in logging.getLogger().handlers:
            handler.setFormatter(logging.Formatter(LOG_FORMAT))
        self.timed = True
        if isinstance(self._output, ConsoleOutput):
            self._output.timed = True

    @contextmanager
    def progress(self, description: str) -> Iterator[Callable[[int, int], None] | None]:
        """A progress bar on stderr when it is a terminal; None (no reporting) otherwise."""
        if not sys.stderr.isatty():
            yield None
            return
        from rich.console import Console
        from rich.progress import Progress

        with Progress(console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task(description, total=None)

            def report(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            yield report


def session() -> Session:
    return click.get_current_context().ensure_object(Session)


def _set(attr: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        s = ctx.ensure_object(Session)
        if attr == "settings":
            s.settings.extend(value)
        elif value is not None and value is not False:
            setattr(s, attr, value)

    return callback


def common_options(fn: F) -> F:
    """--config, --set, --json, --debug (on the group and on every command)."""
    options = [
        click.option(
            "--config", type=click.Path(path_type=Path, dir_okay=False), expose_value=False,
            callback=_set("config_path"), is_eager=True,
            help="TOML config file (default: $RLMM_CONFIG, else the embedded defaults)",
        ),
        click.option(
            "--set", "settings", multiple=True, expose_value=False, callback=_set("settings"),
            is_eager=True, metavar="SECTION.KEY=VALUE", help="override one setting",
        ),
        click.option(
            "--json", "json_", is_flag=True, expose_value=False, callback=_set("json"),
            is_eager=True,
            help="print JSON on stdout: one document (events and records: one object a line)",
        ),
        click.option(
            "--wide", "--no-truncate", "wide", is_flag=True, expose_value=False,
            callback=_set("wide"), is_eager=True,
            help="on a terminal, keep table rows on one line (default: fold a row that does"
            " not fit into a block; cells are never cut)",
        ),
        click.option(
            "--debug", is_flag=True, expose_value=False, callback=_set("debug"), is_eager=True,
            help="tracebacks and debug logs on stderr",
        ),
    ]  # fmt: skip
    for option in reversed(options):
        fn = option(fn)
    return fn


def from_store_option(fn: F) -> F:
    """--from-store, on every command that reads the archive's segment list."""
    return click.option(
        "--from-store", is_flag=True,
        help="list the segments from the remote store's objects alone (and rlmm's snapshots"
        " where they survive), for when the metadata log is lost",
    )(fn)  # fmt: skip


__all__ = ["LOG_FORMAT", "Session", "common_options", "from_store_option", "session"]
