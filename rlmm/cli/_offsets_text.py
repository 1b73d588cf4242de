"""The text form of ``rlmm restore-offsets`` (ConsoleOutput.offset_translations renders it).

Invariant: the table has one row per source partition translated, with the numbers of
the JSON document (``OffsetTranslations.to_dict``); the lines after it name the map
read, every offset that could not be translated exactly and why, and how to move the
consumer group with Kafka's own tool.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.table import Table

if TYPE_CHECKING:
    from rlmm.restore import OffsetTranslations


def translation_lines(
    result: OffsetTranslations, new_table: Callable[..., Table]
) -> tuple[Table, list[str]]:
    table = new_table(
        "partition", "source_offset", "target_offset", "exact",
        right=("partition", "source_offset", "target_offset"),
    )  # fmt: skip
    for t in result.translations:
        table.add_row(
            str(t.partition),
            str(t.source_offset),
            "-" if t.target_offset is None else str(t.target_offset),
            "yes" if t.exact else "no",
        )
    whose = f"group {result.group}'s committed offsets of " if result.group else ""
    lines = [
        f"{whose}{result.source_topic} (topic id {result.topic_id}) -> {result.target_topic},"
        f" through the offset map in {result.offsets_topic}"
        + ("" if result.done else " (the restore is not done: run it to the end first)")
    ]
    for t in result.translations:
        if not t.exact:
            lines.append(f"note: {t.source_topic}-{t.partition} offset {t.source_offset}: {t.note}")
    group = result.group or "<group>"
    lines.append(
        "to move the group (stopped), write these offsets with --csv FILE, then: "
        f"kafka-consumer-groups.sh --bootstrap-server {result.bootstrap_servers} --group {group}"
        " --reset-offsets --from-file FILE --execute"
    )
    return table, lines
