"""LedPartition: one partition a RemoteLogManager leads, and what its rounds remember.

Invariants: there is one per partition led, kept across rounds and across a new
``LogSource`` for it; a copy or expiration round holds its ``lock`` for its whole run,
so two rounds of one partition never overlap; ``revoked``, once set, is never cleared
(no new segment starts for it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from dataclasses import dataclass, field

from rlmm.offload.log_source import LogSource


@dataclass
class LedPartition:
    """A leader partition's source, lock and task, and its rounds' memory."""

    source: LogSource
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    task: asyncio.Task[None] | None = None
    revoked: bool = False  # leadership lost: start no new segment
    # (inputs, until ms): the last round did nothing; with the same inputs before that
    # time the next one would not either (see idle_rounds)
    idle: tuple[Hashable, int] | None = None
    # The highest offset whose absence from the archive is already accounted for:
    # reported missed (deleted locally before it was copied) or skipped as past
    # retention.ms. A gap is reported once, however many rounds see it.
    accounted_through: int = -1
    # The highest offset this process saw archived: retention may since have expired
    # every segment, and a gap after an emptied archive is still a miss.
    archived_through: int = -1
    # (base offset, size, largest timestamp) of the segment the copy delay held back
    # last: a rolled segment never changes, and the next round asks of the same one.
    held: tuple[int, int, int | None] | None = None


__all__ = ["LedPartition"]
