"""Fixtures of the Spark tests: the session with kafka-archive registered, and one
archive (a partition per codec, offloaded through the manager) shared by the modules."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from remote.segments import available_codecs
from tests.rlmm.archive.archive_data import Expected, archived, make_config, offload, write_history


@pytest.fixture(scope="session")
def registered(spark: Any) -> Any:
    """The test session's SparkSession with ``format("kafka-archive")`` registered."""
    import rlmm.spark

    rlmm.spark.register(spark)
    return spark


@pytest.fixture(scope="session")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[Expected]]]:
    """Topic ``h-<codec>`` partition 0 per codec, offloaded, and a TOML naming it;
    the records of each codec as written (what was archived of them)."""
    tmp = tmp_path_factory.mktemp("spark")
    config = make_config(tmp / "rlmm")
    written: dict[str, list[Expected]] = {}
    dirs = []
    for codec in available_codecs():
        pdir, expected = write_history(tmp / "logs", f"h-{codec}", 0, codec)
        written[codec] = archived(pdir, expected)
        dirs.append(pdir)
    asyncio.run(offload(config, dirs))
    toml = tmp / "rlmm.toml"
    toml.write_text(f'data_dir = "{config.data_dir}"\n[eventlog]\npartitions = 4\n')
    return toml, written
