"""Configuration precedence, Kafka property names, and clear errors for bad settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlmm.config import load_config
from rlmm.errors import ConfigError
from rlmm.factory import create_manager, open_event_log, open_remote_storage

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_configs_load() -> None:
    for name in ("embedded.toml", "kafka-s3.toml"):
        config = load_config(ROOT / "config" / name, env={})
        assert config.eventlog["partitions"] == 50


def test_precedence_flags_over_env_over_file(tmp_path: Path) -> None:
    file = tmp_path / "c.toml"
    file.write_text('data_dir = "/from-file"\n[snapshot]\nkeep = 5\nevery_events = 7\n')
    env = {"RLMM_SNAPSHOT_KEEP": "4", "RLMM_DATA_DIR": "/from-env"}
    config = load_config(file, env=env, overrides={"snapshot.keep": 3})
    assert config.snapshot["keep"] == 3
    assert config.snapshot["every_events"] == 7
    assert config.data_dir == Path("/from-env")
    assert load_config(file, env={}).data_dir == Path("/from-file")
    assert load_config(env={}).snapshot["keep"] == 2  # default


def test_kafka_property_names(tmp_path: Path) -> None:
    file = tmp_path / "k.toml"
    file.write_text(
        '[eventlog]\ntype = "kafka"\n[eventlog.properties]\n'
        '"remote.log.metadata.topic.num.partitions" = "7"\n'
        '"remote.log.metadata.common.client.bootstrap.servers" = "h:9092"\n'
        '"remote.log.metadata.common.client.security.protocol" = "SSL"\n'
    )
    config = load_config(file, env={})
    assert config.eventlog["partitions"] == 7
    assert config.eventlog["bootstrap_servers"] == "h:9092"
    assert config.eventlog["properties"] == {
        "remote.log.metadata.common.client.security.protocol": "SSL"
    }


@pytest.mark.parametrize(
    ("overrides", "env", "message"),
    [
        ({"nope": 1}, {}, "unknown setting 'nope'"),
        ({"snapshot.bogus": 1}, {}, "unknown setting 'snapshot.bogus'"),
        ({"manager.write_timeout_s": -1}, {}, "manager.write_timeout_s must be a positive"),
        ({"eventlog.type": "zookeeper"}, {}, "eventlog.type must be"),
        ({}, {"RLMM_BOGUS_X": "1"}, "RLMM_BOGUS_X"),
        ({"remote.log.metadata.consumer.x": "1"}, {}, "need eventlog.type = 'kafka'"),
    ],
)
def test_bad_settings_are_named(overrides: dict, env: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(overrides=overrides, env=env)


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml", env={})
    bad = tmp_path / "bad.toml"
    bad.write_text("this is = = not toml")
    with pytest.raises(ConfigError, match=r"bad\.toml is not valid TOML"):
        load_config(bad, env={})


async def test_factory_builds_embedded_parts(tmp_path: Path) -> None:
    config = load_config(
        ROOT / "config" / "embedded.toml", env={}, overrides={"data_dir": str(tmp_path)}
    )
    log = open_event_log(config)
    manager = create_manager(config, log)
    await manager.start()
    assert (tmp_path / "metadata-log").is_dir()
    await manager.close()
    rsm = open_remote_storage(config)
    rsm.close()
    assert (tmp_path / "remote").is_dir()
    bad = load_config(env={}, overrides={"eventlog.fsync": "sometimes", "data_dir": str(tmp_path)})
    with pytest.raises(ConfigError, match="fsync"):
        open_event_log(bad)
