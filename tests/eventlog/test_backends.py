"""Building the memory and file backends: ``load_event_log``, config errors, lifecycle.

Invariant: a backend is reachable by its config ``type`` and rejects bad settings with
``EventLogConfigError`` before touching any resource.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from eventlog import EVENT_LOG_TYPES, EventLogConfigError, known_options, load_event_log
from eventlog.file import FileEventLog
from eventlog.memory import MemoryEventLog


async def test_load_event_log_builds_memory_and_file(tmp_path: Path) -> None:
    memory = load_event_log({"type": "memory", "partitions": 2})
    assert isinstance(memory, MemoryEventLog) and memory.partition_count == 2
    file = load_event_log(
        {"type": "file", "dir": str(tmp_path), "partitions": 3, "fsync": "interval"}
    )
    assert isinstance(file, FileEventLog) and file.partition_count == 3
    async with file:
        assert await file.append(2, b"v") == 0
    with pytest.raises(EventLogConfigError, match="unknown event log type"):
        load_event_log({"type": "zookeeper"})


def test_known_options_are_what_each_backend_takes() -> None:
    """One registry: the settings a config may give each type (its class's
    ``options()``: the constructor's arguments, or the kafka log's settings object's
    keys, which leave out those that take Python objects)."""
    assert known_options("memory") == {"partitions"}
    assert {"dir", "partitions", "fsync", "read_only"} <= known_options("file")
    kafka = known_options("kafka")
    assert {"bootstrap_servers", "partitions", "topic", "init_timeout_ms"} <= kafka
    assert not {"ssl_context", "sasl_oauth_token_provider", "self"} & kafka
    assert set(EVENT_LOG_TYPES) == {"file", "kafka", "memory"}
    with pytest.raises(EventLogConfigError, match="unknown event log type 'zk'"):
        known_options("zk")


@pytest.mark.parametrize("partitions", [0, -1, True, 2.5, "2"])
def test_memory_rejects_bad_partition_counts(partitions: object) -> None:
    with pytest.raises(EventLogConfigError, match="partitions"):
        MemoryEventLog(partitions)  # type: ignore[arg-type]


async def test_unclosed_file_log_warns(tmp_path: Path) -> None:
    log = FileEventLog(tmp_path, 1)
    await log.start()
    with pytest.warns(ResourceWarning, match="unclosed FileEventLog"):
        log.__del__()
    await log.close()
    log.__del__()  # closed: silent


async def test_file_log_starts_lazily_and_close_before_start_is_fine(tmp_path: Path) -> None:
    log = FileEventLog(tmp_path / "lazy", 1)
    assert await log.append(0, b"first use opens the log") == 0
    await log.close()
    never_started = FileEventLog(tmp_path / "never", 1)
    await never_started.close()
    assert not (tmp_path / "never").exists()
