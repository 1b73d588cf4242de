"""The lines of a restore's plan and summary that say what the restore changes: the
configs its target is (or was) created with, those it leaves out and why, and where the
map of the target's offsets is kept for moving consumer groups.

Invariant: every fact comes from the report's JSON document (``RestoreReport.to_dict``:
``topic_configs``, ``offsets_topic``), so the text says nothing the JSON does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlmm.restore import RestoreReport


def _pairs(configs: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in configs.items())


def change_lines(report: RestoreReport, data: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    configs = data["topic_configs"]
    target = data["plan"]["target"]["topic"]
    if configs is None:
        lines.append(f"configs: {target} existed; its configs are left as they are")
    else:
        verb = "to be created with" if report.dry_run else "created with"
        if not report.dry_run and not report.created_target:
            verb = "not created by this run (another created it meanwhile), so not given"
        applied = _pairs(configs["applied"]) or "none (the target cluster's defaults)"
        given = (
            f"; --topic-config: {', '.join(configs['overrides'])}" if configs["overrides"] else ""
        )
        lines.append(f"configs: {target} {verb} {applied} (the source's: {configs['from']}{given})")
        why: dict[str, list[str]] = {}
        for name, reason in configs["not_copied"].items():
            why.setdefault(reason, []).append(f"{name}={configs['stored'][name]}")
        for reason, names in why.items():
            lines.append(f"configs not copied ({reason}): {', '.join(names)}")
        if configs["set_after_command"]:
            lines.append(
                f"configs held back ({_pairs(configs['set_after_restore'])}: they would refuse"
                " or re-stamp the restored records); once it is done:"
                f" {configs['set_after_command']}"
            )
    if data["offsets_topic"]:
        lines.append(
            "offsets: the target's differ from the source's (its markers and aborted records"
            f" are not copied); where each went is kept in {data['offsets_topic']}: move a"
            f" consumer group with rlmm restore-offsets --target-topic {target} --group G"
            " --csv FILE"
        )
    else:
        lines.append(
            "offsets: no map (records re-spread by key): move consumer groups by time"
            " (kafka-consumer-groups --reset-offsets --to-datetime)"
        )
    return lines
