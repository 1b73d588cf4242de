"""The `rlmm` command: a thin click layer over the library.

Invariant: every command parses, calls one library function and hands the result to
the run's Output (rlmm.cli.output); errors are rendered in one place, here: one line
on stderr (a JSON error object on stdout under --json, a traceback with --debug), never
a traceback otherwise, and in a command-line user's terms (a library error that tells a
program which argument to pass is reworded here). Exit codes, as operators' tools use
them: 0 clean, 1 problems found (verify, gc, an event dump with undecodable records, a
corrupt snapshot), 2 a usage, configuration or runtime error that stopped the command.
Each group of commands lives in its own module of this package and is registered at
the bottom.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Mapping
from typing import Any, NoReturn

import click

from rlmm.cli.session import Session, common_options, session
from rlmm.secrets import SecretScrubber, scrub


class RlmmGroup(click.Group):
    """The root group: renders every error of a command in one place."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as e:  # the group's own options (a command's: invoke)
            _usage_error(ctx, e)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            _usage_error(ctx, e)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except KeyboardInterrupt:
            ctx.exit(130)
        except BrokenPipeError:
            # `rlmm events | head`: the reader is gone; stop quietly, as Unix tools do.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            ctx.exit(0)
        except Exception as e:
            s = ctx.ensure_object(Session)
            from rlmm.errors import RemoteStorageError

            known = isinstance(e, RemoteStorageError) or _is_library_error(e)
            message = _for_the_command_line(e, ctx.invoked_subcommand) or (
                str(e) if known else f"{type(e).__name__}: {e}"
            )
            # a library or client message may quote a setting: never its secret
            secrets = _configured_secrets(s)
            if s.debug:
                sys.stderr.write(scrub(traceback.format_exc(), secrets))
            elif not known:
                message += " (run with --debug for a traceback)"
            s.output.error(scrub(message, secrets), type(e).__name__)
            ctx.exit(2)


def _usage_error(ctx: click.Context, e: click.UsageError) -> NoReturn:
    """One line, as every error (click prints the usage, a hint and the error: three
    lines and a blank for one problem), naming the help to read; exit 2."""
    text = e.format_message().rstrip(".")
    text = text[:1].lower() + text[1:]  # click's sentence, in our errors' case
    where = (e.ctx or ctx).command_path
    ctx.ensure_object(Session).output.error(f"{text} (see '{where} --help')", type(e).__name__)
    ctx.exit(e.exit_code)


_secrets_of: dict[int, set[str]] = {}  # id(config) -> its secret values (one config a run)


def _configured_secrets(s: Session) -> set[str]:
    """The secret values of the run's configuration, once it is loaded."""
    from rlmm.secrets import secret_values

    config = s._config
    if config is None:
        return set()
    if id(config) not in _secrets_of:
        _secrets_of[id(config)] = secret_values(
            {
                "eventlog": config.eventlog,
                "remote": config.remote,
                "snapshot": config.snapshot,
                "kafka": config.kafka_properties,
                "offload": config.offload,  # the cluster's client: SASL, TLS passwords
            }
        )
    return _secrets_of[id(config)]


# The commands that read the archive's segment list from the store alone on request.
FROM_STORE_COMMANDS = ("segments", "partitions", "records", "verify", "restore")


def _store_remedy(command: str | None) -> str:
    """How to read the archive from the store alone, for a user of ``command``."""
    if command in FROM_STORE_COMMANDS:
        return "--from-store"
    readers = "rlmm segments list|show, partitions, records, verify and restore take --from-store"
    return f"{readers} (gc needs the metadata log)" if command == "gc" else readers


def _for_the_command_line(e: Exception, command: str | None = None) -> str | None:
    """The message for an error whose library text speaks to a program (a Python
    argument to pass), in terms of what a command-line user does; None: as it is.
    ``command``: the command run (the root group's subcommand)."""
    from eventlog import EventLogLockedError
    from rlmm.archive.errors import StoreRemedyError

    if isinstance(e, StoreRemedyError):
        return e.with_remedy(_store_remedy(command))

    if isinstance(e, EventLogLockedError):
        return (
            f"another process (pid {e.holder}) writes the metadata log in {e.dir}: one"
            " writer per data_dir. Stop that process first (a second `rlmm offload` must"
            " not run on the same data_dir), or give this command a data_dir of its own;"
            " the reading commands (segments, partitions, events, verify, records, gc"
            " without --apply) work beside it"
        )
    return None


def _is_library_error(e: Exception) -> bool:
    # The leaf packages keep their own bases (they import nothing of rlmm).
    from eventlog import EventLogError
    from snapshot import SnapshotError

    return isinstance(e, EventLogError | SnapshotError | OSError)


@click.group(cls=RlmmGroup)
@click.version_option(package_name="rlmm")
@common_options
def main() -> None:
    """Kafka tiered storage (KIP-405): metadata manager, remote storage, tools."""
    s = session()
    # The library's retry warnings would repeat the one error line the command prints.
    logging.basicConfig(
        level=logging.DEBUG if s.debug else logging.ERROR,
        stream=sys.stderr,
        format="%(levelname)s %(name)s: %(message)s",
    )
    scrubber = SecretScrubber(lambda: _configured_secrets(s))
    for handler in logging.getLogger().handlers:
        handler.addFilter(scrubber)
    if not s.debug:
        # aiokafka logs every failed connection attempt at ERROR; the command's own
        # error line names the broker once.
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


@main.command("config")
@common_options
def show_config() -> None:
    """Print the resolved configuration (flags > RLMM_* env > file > defaults) as JSON,
    every section; passwords, JAAS secrets, private keys and secret keys are shown
    redacted. A broker id nobody set is null, with where the processes take it from."""
    from rlmm.secrets import redact

    config = session().config
    shown: dict[str, Any] = {"source": config.source}
    if config.broker_id_configured:
        shown["broker_id"] = config.broker_id
    else:
        shown["broker_id"] = None
        shown["broker_id_note"] = BROKER_ID_NOT_SET
    shown.update(
        {
            "data_dir": str(config.data_dir),
            "manager": dict(config.manager),
            "eventlog": config.event_log_options(),
            "snapshot": {**config.snapshot, "dir": str(config.snapshot_dir())},
            "remote": config.remote_options(),
            "archive": dict(config.archive),
            "offload": _offload_as_written(config.offload),
        }
    )
    session().output.config(redact(shown))


def _offload_as_written(offload: Mapping[str, Any]) -> dict[str, Any]:
    """[offload] with its cluster client settings where a file writes them (beside the
    others, by Kafka's names), not in the table the config keeps them in."""
    shown = {k: v for k, v in offload.items() if k != "cluster"}
    shown.update(offload.get("cluster", {}))
    return shown


BROKER_ID_NOT_SET = (
    "not set: rlmm offload takes node.id from the log dirs' meta.properties (0 without"
    " one), rlmm serve the broker's broker.id; the other commands write 0"
)


@main.command()
def demo() -> None:
    """Run the end-to-end demo (what `make demo` runs)."""
    from rlmm.cli.demo import main as run_demo

    sys.exit(run_demo([]))  # its own options are not the command line's


# --- command groups, one module each ----------------------------------------------------
from rlmm.cli import (  # noqa: E402
    events,
    offload,
    records,
    restore,
    segments,
    serve,
    snapshots,
    verify,
)

segments.register(main)
events.register(main)
snapshots.register(main)
verify.register(main)
records.register(main)
offload.register(main)
restore.register(main)
serve.register(main)

__all__ = ["main"]
