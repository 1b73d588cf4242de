"""Configuration precedence, Kafka property names, and clear errors for bad settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlmm.config import load_config
from rlmm.errors import ConfigError
from rlmm.factory import create_manager, open_event_log, open_remote_storage
from rlmm.offload.leadership import check_node_id, read_node_id

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_configs_load() -> None:
    for name in ("embedded.toml", "kafka-s3.toml", "offload.toml", "offload-cluster.toml"):
        config = load_config(ROOT / "config" / name, env={})
        assert config.eventlog["partitions"] == 50


@pytest.mark.parametrize("name", ["offload.toml", "kafka-s3.toml", "offload-cluster.toml"])
def test_a_shipped_config_for_brokers_sets_no_broker_id(tmp_path: Path, name: str) -> None:
    """One file for every node (issue 46: a copied broker_id = 0 stopped every sidecar
    but node 0's): each sidecar takes node.id from its log dir's meta.properties."""
    config = load_config(ROOT / "config" / name, env={})
    assert not config.broker_id_configured
    configured = config.broker_id if config.broker_id_configured else None  # as the sidecar
    for node in (1, 2, 3):
        log_dir = tmp_path / f"kafka-{node}"
        log_dir.mkdir()
        (log_dir / "meta.properties").write_text(f"version=1\nnode.id={node}\n")
        assert check_node_id(read_node_id([log_dir]), configured) == node


def test_the_cluster_config_shares_kafka_s_metadata_topic_and_one_store() -> None:
    config = load_config(ROOT / "config" / "offload-cluster.toml", env={})
    eventlog = config.event_log_options()
    assert eventlog["type"] == "kafka" and eventlog["topic"] == "__remote_log_metadata"
    assert "," in eventlog["bootstrap_servers"]  # every broker, not only its own
    assert eventlog["replication_factor"] == 3
    assert config.remote_options()["type"] == "s3" and config.remote_options()["bucket"]
    assert config.snapshot["store"] == "s3"
    assert config.offload["retention.ms"] > 0


def test_the_cluster_config_s_local_store_alternative_loads(tmp_path: Path) -> None:
    """The commented [remote] table (a directory every node mounts) in place of S3."""
    lines = (ROOT / "config" / "offload-cluster.toml").read_text().splitlines()
    alternative = []
    for line in lines[lines.index("# [remote]") :]:
        if not line.startswith("# "):
            break
        alternative.append(line[2:])
    start, end = lines.index("[remote]"), lines.index("[snapshot]")
    text = "\n".join([*lines[:start], *alternative, "", *lines[end:]])
    path = tmp_path / "offload.toml"
    path.write_text(text.replace('store = "s3"', 'store = "local"'))
    config = load_config(path, env={})
    assert config.remote_options() == {"type": "local", "root": "/mnt/kafka-tiered"}
    assert config.snapshot["store"] == "local"


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
        ({"eventlog.type": "zookeeper"}, {}, "eventlog.type = 'zookeeper': unknown event log type"),
        ({}, {"RLMM_BOGUS_X": "1"}, "RLMM_BOGUS_X"),
        (
            {"remote.log.metadata.consumer.x": "1"},
            {},
            "need an event log on a Kafka cluster: eventlog.type = 'kafka'",
        ),
        ({"archive.side_index": ""}, {}, "archive.side_index must be"),
        ({"archive.side_index": 3}, {}, "archive.side_index must be"),
        ({"archive.bogus": "x"}, {}, "unknown setting 'archive.bogus'"),
        ({}, {"RLMM_DATA_DIR": "7"}, "data_dir must be a directory path, got 7"),
        ({"data_dir": ""}, {}, "data_dir must be a directory path"),
    ],
)
def test_bad_settings_are_named(overrides: dict, env: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(overrides=overrides, env=env)


def test_the_side_index_lives_under_data_dir_unless_told(tmp_path: Path) -> None:
    """[archive] side_index: rlmm's own place for the smallest timestamps it learns."""
    config = load_config(overrides={"data_dir": str(tmp_path)}, env={})
    assert config.side_index_location() == str((tmp_path / "side-index").resolve())
    env = {"RLMM_ARCHIVE_SIDE_INDEX": "s3://bucket/side"}
    assert load_config(env=env).side_index_location() == "s3://bucket/side"
    assert (
        load_config(overrides={"archive.side_index": "off"}, env={}).side_index_location() is None
    )
    there = load_config(overrides={"archive.side_index": str(tmp_path / "x")}, env={})
    assert there.side_index_location() == str(tmp_path / "x")


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


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"remote.roott": "/x"},
            r"unknown setting remote\.roott for remote\.type = 'local'; known: fsync, root",
        ),
        (
            {"remote.type": "s3", "remote.bucket": "b", "remote.root": "/x"},
            r"remote\.root for remote\.type = 's3' \(a setting of remote\.type = 'local'\)",
        ),
        (
            {"remote.type": "local-tiered-storage", "remote.bucket": "b"},
            r"remote\.bucket .*known: dir",
        ),
        (
            {"remote.type": "aiven-s3", "remote.bucket": "b", "remote.chunk_sise": 1},
            r"remote\.chunk_sise",
        ),
        ({"remote.type": "nfs"}, r"unknown remote\.type 'nfs'"),
        ({"snapshot.keep": 1.5}, r"snapshot\.keep must be a whole number, got 1\.5"),
    ],
)
def test_settings_a_backend_does_not_take_are_refused_at_load(
    overrides: dict, message: str
) -> None:
    """Not later, as a Python TypeError from the backend's constructor."""
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides=overrides, env={})


def test_every_setting_of_each_remote_type_loads(tmp_path: Path) -> None:
    load_config(None, overrides={"remote.root": str(tmp_path), "remote.fsync": False}, env={})
    load_config(
        None,
        overrides={"remote.type": "s3", "remote.bucket": "b", "remote.sse": "aws:kms",
                   "remote.bucket_key_enabled": True, "remote.profile": "p"},
        env={},
    )  # fmt: skip
    load_config(None, overrides={"remote.type": "local-tiered-storage", "remote.dir": "/d"}, env={})
    load_config(
        None,
        overrides={"remote.type": "aiven-s3", "remote.storage.s3.bucket.name": "b",
                   "remote.key.prefix": "t/", "remote.compression.enabled": True},
        env={},
    )  # fmt: skip


def test_an_empty_rlmm_config_means_no_file() -> None:
    config = load_config(env={"RLMM_CONFIG": ""})
    assert config.source == "defaults"


@pytest.mark.parametrize(
    ("key", "raw", "kind"),
    [("max_attempts", '"3"', "a whole number"), ("bucket_key_enabled", "1", "true or false"),
     ("read_timeout", '"5"', "a number")],
)  # fmt: skip
def test_a_remote_setting_of_the_wrong_kind_names_the_key(
    tmp_path: Path, key: str, raw: str, kind: str
) -> None:
    path = tmp_path / "rlmm.toml"
    path.write_text(f'[remote]\ntype = "s3"\nbucket = "b"\n{key} = {raw}\n')
    with pytest.raises(ConfigError, match=f"remote.{key} must be {kind}"):
        load_config(path, env={})


@pytest.mark.parametrize("quoted", [True, False], ids=["quoted", "dotted"])
def test_kafka_names_under_eventlog_itself_are_accepted(tmp_path: Path, quoted: bool) -> None:
    """Where a user puts them first: under [eventlog], beside the event log's own keys."""

    def key(name: str) -> str:
        return f'"{name}"' if quoted else name

    file = tmp_path / "k.toml"
    file.write_text(
        '[eventlog]\ntype = "kafka"\n'
        f'{key("remote.log.metadata.common.client.bootstrap.servers")} = "h:9092"\n'
        f"{key('remote.log.metadata.topic.num.partitions')} = 7\n"
        f'{key("remote.log.metadata.common.client.security.protocol")} = "SSL"\n'
        f"{key('remote.log.metadata.initialization.retry.max.timeout.ms')} = 4000\n"
    )
    config = load_config(file, env={})
    assert config.event_log_options() == {
        "type": "kafka",
        "bootstrap_servers": "h:9092",
        "partitions": 7,
        "init_timeout_ms": 4000,
        "properties": {"remote.log.metadata.common.client.security.protocol": "SSL"},
    }


def test_two_names_of_one_setting_follow_the_layers_and_must_agree_in_one(
    tmp_path: Path,
) -> None:
    file = tmp_path / "k.toml"
    file.write_text(
        '[eventlog]\ntype = "kafka"\nbootstrap_servers = "h:9092"\n'
        '"remote.log.metadata.topic.num.partitions" = 7\n'
    )
    assert load_config(file, env={}).eventlog["partitions"] == 7
    # a later layer wins, whichever name each layer used
    flag = load_config(file, env={}, overrides={"eventlog.partitions": 9})
    assert flag.eventlog["partitions"] == 9
    env = load_config(file, env={"RLMM_EVENTLOG_PARTITIONS": "5"})
    assert env.eventlog["partitions"] == 5
    both = tmp_path / "both.toml"
    both.write_text(
        '[eventlog]\ntype = "kafka"\nbootstrap_servers = "a:9092"\n'
        '"remote.log.metadata.common.client.bootstrap.servers" = "b:9092"\n'
    )
    with pytest.raises(ConfigError) as info:
        load_config(both, env={})
    message = str(info.value)
    assert "eventlog.bootstrap_servers = 'a:9092'" in message
    assert "remote.log.metadata.common.client.bootstrap.servers = 'b:9092'" in message
    assert "\n" not in message


_FILE = "eventlog.type = 'file'"
_KAFKA = {"eventlog.type": "kafka", "eventlog.bootstrap_servers": "h:9092"}
_INIT = "remote.log.metadata.initialization.retry.max.timeout.ms"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"eventlog.partitons": 3}, f"unknown setting eventlog.partitons for {_FILE}"),
        (
            {**_KAFKA, "eventlog.fsync": "interval"},
            f"unknown setting eventlog.fsync for eventlog.type = 'kafka' (a setting of {_FILE})",
        ),
        (
            {"eventlog.type": "memory", "eventlog.dir": "/x"},
            f"eventlog.dir for eventlog.type = 'memory' (a setting of {_FILE}); known: partitions",
        ),
        ({_INIT: 4000}, f"unknown setting {_INIT} for {_FILE}"),
    ],
)
def test_an_unknown_eventlog_setting_is_one_line_with_the_known_ones(
    settings: dict, message: str
) -> None:
    """Not a Python TypeError from the constructor: the key and what the type takes."""
    with pytest.raises(ConfigError) as info:
        load_config(overrides=settings, env={})
    assert message in str(info.value)
    assert "known: " in str(info.value) and "__init__" not in str(info.value)
    assert "\n" not in str(info.value)


def test_the_fast_paths_switch_is_not_a_setting() -> None:
    """RLMM_NO_FAST_PATHS switches code paths (rlmm._fast_paths); config ignores it."""
    assert load_config(env={"RLMM_NO_FAST_PATHS": "1"}).offload == load_config(env={}).offload


@pytest.mark.parametrize(
    ("where", "overrides", "env", "named", "listed"),
    [
        ("file", {}, {}, "'offload.retention.typo' (from ", ["retention.ms", "verify.crc"]),
        ("flag", {"offload.retention_msx": 1}, {}, "'offload.retention_msx'", ["retention.ms"]),
        (
            "env",
            {},
            {"RLMM_OFFLOAD_RETENTON_MS": "1"},
            "'offload.retenton_ms' (from environment)",
            ["leadership.poll.ms", "bootstrap.servers", "ssl.*"],
        ),
        (
            "topic",
            {"offload.topics.orders.retention.mss": 1},
            {},
            "'offload.topics.orders.retention.mss'",
            ["retention.ms", "remote.log.copy.disable"],
        ),
    ],
)
def test_an_unknown_offload_setting_is_one_line_with_the_known_ones(
    tmp_path: Path, where: str, overrides: dict, env: dict, named: str, listed: list[str]
) -> None:
    """As an unknown [remote] or [eventlog] key: the key, where it came from, and the
    keys [offload] takes (a per-topic key: the per-topic ones), in one line (issue 46:
    only the key was named)."""
    path = None
    if where == "file":
        path = tmp_path / "rlmm.toml"
        path.write_text('[offload]\n"retention.typo" = 1\n')
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides=overrides, env=env)
    message = str(info.value)
    assert named in message and "; known" in message and "\n" not in message, message
    known = message.split("; known", 1)[1]
    for key in listed:
        assert key in known, message
    if where == "topic":  # only what a topic's own table takes
        assert "verify.crc" not in known and "bootstrap.servers" not in known, message


@pytest.mark.parametrize(
    ("key", "listed"),
    [
        ("snapshot.bogus", "dir, enabled, every_events, interval_s, keep, owner, retention, store"),
        ("manager.bogus", "ready_timeout_s, write_timeout_s"),
        ("archive.bogus", "side_index"),
    ],
)
def test_an_unknown_key_of_the_other_sections_lists_the_known_ones(key: str, listed: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(overrides={key: 1}, env={})
    assert str(info.value) == f"unknown setting {key!r} (from command line); known: {listed}"
