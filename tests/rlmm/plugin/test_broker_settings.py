"""The broker's plugin properties over rlmm's TOML (rlmm.plugin.broker_settings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlmm.errors import ConfigError
from rlmm.plugin.broker_settings import broker_config, unknown_props

BROKER = {
    "broker.id": "3",
    "cluster.id": "c1",
    "log.dir": "/var/lib/kafka/data",
    "remote.log.metadata.common.client.bootstrap.servers": "b1:9092,b2:9092",
    "remote.log.metadata.common.client.security.protocol": "PLAINTEXT",
}


def toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rlmm.toml"
    path.write_text(f'data_dir = "{tmp_path}"\n' + text)
    return path


def test_no_event_log_in_the_file_means_the_brokers_own_metadata_topic(tmp_path: Path) -> None:
    config = broker_config(toml(tmp_path, '[remote]\ntype = "local"\n'), BROKER)
    events = config.event_log_options()
    assert events["type"] == "kafka" and events["bootstrap_servers"] == "b1:9092,b2:9092"
    assert events["properties"]["remote.log.metadata.common.client.security.protocol"] == (
        "PLAINTEXT"
    )
    assert config.broker_id == 3 and config.snapshot_owner() == "broker-3"


def test_kafkas_rlmm_settings_keep_their_meaning_and_win_over_the_file(tmp_path: Path) -> None:
    path = toml(tmp_path, '[eventlog]\ntype = "kafka"\npartitions = 50\nreplication_factor = 3\n')
    config = broker_config(
        path,
        {
            **BROKER,
            "remote.log.metadata.topic.num.partitions": "7",
            "remote.log.metadata.topic.replication.factor": "1",
        },
    )
    assert config.eventlog["partitions"] == 7 and config.eventlog["replication_factor"] == 1


def test_an_embedded_event_log_ignores_the_brokers_bootstrap(tmp_path: Path) -> None:
    config = broker_config(toml(tmp_path, '[eventlog]\ntype = "file"\n'), BROKER)
    assert config.event_log_options()["type"] == "file"


def test_a_broker_id_in_the_file_must_be_the_brokers(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"broker_id = 1 in .* broker.id 3"):
        broker_config(toml(tmp_path, "broker_id = 1\n"), BROKER)
    assert broker_config(toml(tmp_path, "broker_id = 3\n"), BROKER).broker_id == 3


def test_a_missing_file_names_the_property(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"rsm.config.file / rlmm.config.file\) does not exist"):
        broker_config(tmp_path / "nope.toml", BROKER)


def test_unknown_properties_are_listed_not_refused() -> None:
    props = {**BROKER, "file": "x", "command": "rlmm", "dir": "/old/lts", "rsm.typo": "1"}
    assert unknown_props(props) == ["dir", "rsm.typo"]
