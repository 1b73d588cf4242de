"""``format("kafka-archive")`` after a disaster, on local[2]: with the metadata log (and
rlmm's snapshots) deleted, ``fromStore`` reads the remote store alone and gives the rows
Spark read from the metadata before, under both isolation levels and every way of
choosing partitions. Without it, the error names the ``config`` option, the event log,
the config file and ``fromStore`` (it blamed ``subscribe``); a metadata log that lists
nothing beside a store of segments is refused naming the store, never an empty read."""

from __future__ import annotations

import asyncio
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from remote.segments import PartitionDir
from rlmm.config import RlmmConfig, load_config
from rlmm.factory import open_event_log
from tests.rlmm.archive.archive_data import Expected, archived, expected_rows, offload
from tests.rlmm.archive.archive_data import write_history as history
from tests.rlmm.spark.spark_data import overrides, read, spark_rows

pytestmark = pytest.mark.spark

TOPIC = "dr"


def archive(tmp: Path) -> tuple[Path, RlmmConfig, dict[int, list[Expected]]]:
    """Topic ``dr``, two partitions (none and gzip), offloaded through the manager; the
    TOML naming it, its configuration, and what was archived of each partition."""
    toml = tmp / "rlmm.toml"
    toml.write_text(f'data_dir = "{tmp / "rlmm"}"\n[eventlog]\npartitions = 4\n')
    config = load_config(toml, env={})
    topic_id = uuid.uuid4()
    written: dict[int, list[Expected]] = {}
    for p, codec in ((0, "none"), (1, "gzip")):
        pdir, expected = history(tmp / "logs", TOPIC, p, codec, topic_id=topic_id)
        written[p] = archived(pdir, expected)
    asyncio.run(offload(config, [PartitionDir(d) for d in sorted((tmp / "logs").iterdir())]))
    return toml, config, written


def lose_the_metadata(config: RlmmConfig) -> Path:
    """The disaster: the metadata log and rlmm's snapshots are gone; the log's dir."""
    log_dir = Path(config.event_log_options()["dir"])
    shutil.rmtree(log_dir)
    shutil.rmtree(config.snapshot_dir())
    return log_dir


def load_error(spark: Any, **options: str) -> str:
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException) as caught:
        read(spark, **options)
    return str(caught.value)


def test_from_store_reads_what_the_metadata_read(registered: Any, tmp_path: Path) -> None:
    toml, config, written = archive(tmp_path)
    ways = {
        "subscribe": {"subscribe": TOPIC},
        "pattern": {"subscribePattern": "d.*"},
        "assign": {"assign": '{"dr": [1]}', "startingOffsets": '{"dr": {"1": 120}}'},
    }
    levels = ("read_uncommitted", "read_committed")

    def reads(**extra: str) -> dict[tuple[str, str], Any]:
        out = {}
        for way, chosen in ways.items():
            for level in levels:
                options = {"includeHeaders": "true", "isolationLevel": level, **chosen, **extra}
                out[(way, level)] = spark_rows(read(registered, config=str(toml), **options))
        return out

    before = reads()
    assert before[("subscribe", "read_uncommitted")] == {
        (TOPIC, p): expected_rows(written[p]) for p in written
    }
    committed = before[("subscribe", "read_committed")]
    assert committed[(TOPIC, 0)] == expected_rows([e for e in written[0] if not e.aborted])
    assert before[("assign", "read_uncommitted")][(TOPIC, 1)][0][0] == 120

    lose_the_metadata(config)
    assert reads(fromStore="true") == before


def test_a_lost_metadata_log_names_the_config_and_from_store(
    registered: Any, tmp_path: Path
) -> None:
    """Before: `kafka-archive option 'subscribe': cannot read the remote log metadata from
    FileEventLog(...) (missing eventlog.json)`."""
    toml, config, _ = archive(tmp_path)
    log_dir = lose_the_metadata(config)
    message = load_error(registered, config=str(toml), subscribe=TOPIC)
    assert "kafka-archive option 'config': cannot read the remote log metadata" in message
    assert "option 'subscribe'" not in message
    assert f"FileEventLog({str(log_dir)!r}" in message and "missing eventlog.json" in message
    assert f"[eventlog] of {toml}" in message, message
    assert (
        'to read the archive from the remote store alone: .option("fromStore", "true")' in message
    ), message
    # The settings given inline (no config file): the setting that placed the log is named.
    inline = load_error(registered, subscribe=TOPIC, **overrides(config))
    assert "kafka-archive option 'rlmm.data_dir': cannot read the remote log" in inline, inline
    # fromStore=false is the default, spelled out
    assert "fromStore" in load_error(
        registered, config=str(toml), subscribe=TOPIC, fromStore="false"
    )


def test_an_empty_metadata_log_beside_a_store_of_segments_is_refused(
    registered: Any, tmp_path: Path
) -> None:
    """Before: `topic 'dr' is not in the archive (known: none)`, blaming the subscription,
    and a pattern read nothing at all."""
    toml, config, written = archive(tmp_path)
    lose_the_metadata(config)

    async def create() -> None:
        log = open_event_log(config)
        await log.start()
        await log.close()

    asyncio.run(create())
    root = Path(config.remote_options()["root"])
    objects = sum(1 for p in root.rglob("*") if p.is_file())
    for chosen in ({"subscribe": TOPIC}, {"subscribePattern": ".*"}):
        message = load_error(registered, config=str(toml), **chosen)
        assert "kafka-archive option 'config': the remote log metadata" in message, message
        assert f"LocalRemoteStorageManager(root={str(root)!r}) holds {objects} objects" in message
        assert re.search(r"lists no segment.*fromStore", message), message
    rows = spark_rows(read(registered, config=str(toml), subscribe=TOPIC, fromStore="true"))
    assert rows == {(TOPIC, p): expected_rows(written[p], headers=False) for p in written}
