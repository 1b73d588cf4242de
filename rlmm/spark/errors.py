"""Errors of the Spark source: every one derives from rlmm.errors.RemoteStorageError.

Invariants: an executor's error names the host and the setting it lacks, on one line;
an option error names the option (as the user spelled it in Spark's
Kafka-source style) and the value that was wrong, so Spark's ``load()`` failure
says which ``.option(...)`` to fix.
"""

from __future__ import annotations

from rlmm.errors import ConfigError


class KafkaArchiveOptionError(ConfigError, ValueError):
    """A bad option of ``spark.read.format("kafka-archive")``; raised at ``load()``."""

    def __init__(self, option: str, message: str) -> None:
        # A spark.rlmm.* setting came from the Spark conf, not from .option(...).
        kind = "Spark conf" if option.startswith("spark.") else "option"
        super().__init__(f"kafka-archive {kind} '{option}': {message}")
        self.option = option


class WorkerPythonError(ConfigError):
    """Spark's Python workers would run an interpreter without rlmm or pyarrow."""


class ExecutorSettingError(ConfigError):
    """An executor lacks what its task needs to reach remote storage (credentials, a
    reachable endpoint, a local root): one line naming the setting and the host."""

    def __init__(self, host: str, setting: str, message: str) -> None:
        super().__init__(f"kafka-archive on executor host {host}: {message}")
        self.host = host
        self.setting = setting


__all__ = ["ExecutorSettingError", "KafkaArchiveOptionError", "WorkerPythonError"]
