"""`rlmm verify` and `rlmm gc`: the metadata against the objects, and the garbage repair.

Invariant: verify never writes; gc is a dry run unless --apply, and removes exactly
what a verify run at that moment proves is garbage (rlmm.ops.repair), against the
metadata log only: ``verify --from-store`` reads the store alone, ``gc --from-store`` is
refused, and a metadata log that lists nothing beside a store holding segment objects
stops both (rlmm.archive.EmptyViewError), so a lost log never makes the store garbage.
Exit 0 when clean (gc: nothing left to do), 1 when problems are found (or remain).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import click

from rlmm.cli.session import common_options, from_store_option, session

if TYPE_CHECKING:
    from rlmm.ops.verification import VerifyReport

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)?")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


class Duration(click.ParamType):
    name = "duration"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float):
            return value
        match = _DURATION.fullmatch(str(value).strip())
        if match is None:
            self.fail(f"{value!r} is not a duration (e.g. 90s, 30m, 1h)", param, ctx)
        return float(match.group(1)) * _UNIT_S[match.group(2) or "s"]


def _verify_options(fn: click.decorators.FC) -> click.decorators.FC:
    fn = click.option(
        "--safety-window", type=Duration(), default="1h", show_default=True,
        help="ignore objects, uploads and STARTED segments younger than this",
    )(fn)  # fmt: skip
    fn = click.option("--topic", help="only this topic")(fn)
    return click.option("--deep", is_flag=True, help="read every object: CRC-32C and batch CRCs")(
        fn
    )


def _run_verify(
    deep: bool, topic: str | None, safety_window: float, from_store: bool = False
) -> VerifyReport:
    from rlmm.archive import open_archive_view
    from rlmm.factory import open_remote_layout
    from rlmm.ops.inventory import check_topic_known
    from rlmm.ops.verification import verify

    s = session()
    config = s.config
    view = open_archive_view(
        config, from_store=from_store, topics=None if topic is None else [topic]
    )
    with (
        view,
        open_remote_layout(config) as layout,
        s.progress("verifying") as progress,
    ):
        # a typo must not verify clean forever (as `segments list` refuses it)
        check_topic_known(view, topic)
        return verify(
            view, layout, deep=deep, topic=topic, safety_window_s=safety_window, progress=progress
        )


@click.command("verify")
@_verify_options
@from_store_option
@common_options
def verify_command(deep: bool, topic: str | None, safety_window: float, from_store: bool) -> None:
    """Check the metadata against the stored objects, both ways (exit 1 on problems).
    With --from-store, the copies the store alone gives (objects of copies that cannot
    be rebuilt are reported as orphans)."""
    report = _run_verify(deep, topic, safety_window, from_store)
    session().output.verification(report)
    if not report.ok:
        click.get_current_context().exit(1)


@click.command("gc")
@click.option("--apply", is_flag=True, help="repair (default: only print what would be done)")
@_verify_options
@click.option("--from-store", is_flag=True, help="refused: gc needs the metadata log")
@common_options
def gc_command(
    apply: bool, deep: bool, topic: str | None, safety_window: float, from_store: bool
) -> None:
    """Remove what verify proves is garbage: orphan objects, stale multipart uploads,
    segments stuck in a STARTED state (through the DELETE path of the metadata)."""
    from remote.registry import READ_ONLY_TYPES

    if from_store:
        raise click.UsageError(GC_FROM_STORE)
    from rlmm.factory import open_remote_layout
    from rlmm.ops.repair import apply_repairs, plan_repairs

    config = session().config
    report = _run_verify(deep, topic, safety_window)
    brokers_write = config.remote_options().get("type") in READ_ONLY_TYPES
    with open_remote_layout(config) as layout:
        plan = plan_repairs(report, None if brokers_write else layout, brokers_write=brokers_write)
        if apply and plan.actions:
            apply_repairs(config, layout, plan)
    session().output.repair(plan)
    remaining = plan.left_alone or plan.skipped or plan.not_ours or (plan.actions and not apply)
    if remaining:
        click.get_current_context().exit(1)


GC_FROM_STORE = (
    "--from-store is refused: gc deletes what the metadata does not name, and without the"
    " metadata log the objects of every copy that cannot be rebuilt would count as garbage;"
    " gc needs the metadata log (`rlmm verify --from-store` checks the archive without it)"
)


def register(main: click.Group) -> None:
    main.add_command(verify_command)
    main.add_command(gc_command)
