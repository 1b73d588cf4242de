"""What a run of the `rlmm offload` sidecar did (the CLI prints it), and a round's results.

Invariant: the report describes the run's last round (partitions found and led, a
refusal, leadership unknown) and the run as a whole (rounds, the tally, log dir
warnings, the topics never touched); it holds no part of the sidecar, only what it did.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlmm.model import TopicIdPartition
from rlmm.offload.display import Tally
from rlmm.offload.remote_log_manager import CopyResult, ExpireResult

# What a round (or a gained partition's own round) did, partition by partition.
RoundResults = dict[TopicIdPartition, tuple[CopyResult, ExpireResult]]


@dataclass
class SidecarReport:
    """What a run did (the CLI prints it)."""

    rounds: int = 0
    partitions: int = 0
    tally: Tally = field(default_factory=Tally)
    stopped_by_signal: bool = False
    warnings: list[str] = field(default_factory=list)  # log dirs that look wrong
    denied: str | None = None  # the last round's refusal by Kafka (an ACL, a credential)
    led: int = 0  # partitions led in the last round
    leadership_unknown: str | None = None  # why the last round could not learn leadership
    skipped_topics: dict[str, str] = field(default_factory=dict)  # topic -> why never touched


__all__ = ["RoundResults", "SidecarReport"]
