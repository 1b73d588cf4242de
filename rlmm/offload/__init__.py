"""The offloader: Kafka's RemoteLogManager (copy, expire, crash cleanup) and its sidecar.

Invariant: the outer layer; nothing in rlmm, remote, eventlog or snapshot imports it
(only rlmm.cli and the demo do). ``RemoteLogManager`` is what a broker embeds; it
reads a partition through a ``LogSource``; ``LogDirSource`` reads a Kafka log dir.
"""

from __future__ import annotations

from rlmm.offload.errors import LogDirError, OffloadError, SegmentCopyError
from rlmm.offload.expiry import Victim, plan_expiry
from rlmm.offload.log_source import (
    EpochStart,
    LocalSegment,
    LogSource,
    RetentionSettings,
    SegmentDescription,
)
from rlmm.offload.logdir import LogDirSource, scan_log_dirs
from rlmm.offload.metrics import OffloadMetrics
from rlmm.offload.remote_log_manager import CopyResult, ExpireResult, RemoteLogManager
from rlmm.offload.segment_ops import OffloadEvent
from rlmm.offload.settings import INTERNAL_TOPICS, OffloadSettings

__all__ = [
    "INTERNAL_TOPICS",
    "CopyResult",
    "EpochStart",
    "ExpireResult",
    "LocalSegment",
    "LogDirError",
    "LogDirSource",
    "LogSource",
    "OffloadError",
    "OffloadEvent",
    "OffloadMetrics",
    "OffloadSettings",
    "RemoteLogManager",
    "RetentionSettings",
    "SegmentCopyError",
    "SegmentDescription",
    "Victim",
    "plan_expiry",
    "scan_log_dirs",
]
