"""The manager's counters: what its apply loops and snapshots did, for operators and tests.

Invariant: the counters only grow (``restored_from_snapshot`` aside, a flag), and
``last_errors`` holds the newest 20 messages noted, oldest first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlmm.replay import ReplayStats


@dataclass
class ManagerStats(ReplayStats):
    """Counters of the apply loop (exposed for operators and tests); the replay's
    (applied, skipped, full replays, restored) and the manager's own."""

    read_errors: int = 0
    snapshots_written: int = 0
    snapshot_failures: int = 0
    partitions_restored: int = 0  # restarted from a snapshot after retention (SnapshotKeeper)
    last_errors: list[str] = field(default_factory=list)

    def note(self, message: str) -> None:
        self.last_errors.append(message)
        del self.last_errors[:-20]
