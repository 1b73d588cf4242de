"""Errors of the Spark source: every one derives from rlmm.errors.RemoteStorageError.

Invariant: an option error names the option (as the user spelled it in Spark's
Kafka-source style) and the value that was wrong, so Spark's ``load()`` failure
says which ``.option(...)`` to fix.
"""

from __future__ import annotations

from rlmm.errors import ConfigError


class KafkaArchiveOptionError(ConfigError, ValueError):
    """A bad option of ``spark.read.format("kafka-archive")``; raised at ``load()``."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"kafka-archive option '{option}': {message}")
        self.option = option


class WorkerPythonError(ConfigError):
    """Spark's Python workers would run an interpreter without rlmm or pyarrow."""


__all__ = ["KafkaArchiveOptionError", "WorkerPythonError"]
