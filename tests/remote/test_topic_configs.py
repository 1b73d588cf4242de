"""A topic's configs kept in rlmm's store: one object per topic id, in a directory and
in S3 (moto), replaced whole, read back exactly; a damaged, foreign or newer object is a
TopicConfigsError naming it and the remedy; a Kafka cluster's own tier holds none."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import boto3
import pytest

from remote.errors import TopicConfigsError
from remote.topic_configs import TopicConfigs, TopicConfigStore, object_name
from rlmm.config import load_config
from rlmm.factory import open_topic_config_store

TOPIC_ID = "M4HtdF9vRx6hcoUD_QN_cA"
OTHER_ID = "AWJdCYnXSrCb-D3q-vsYuA"  # the topic deleted and created again
CONFIGS = TopicConfigs(
    "orders",
    TOPIC_ID,
    {"min.insync.replicas": "2", "segment.bytes": "1048576", "cleanup.policy": "delete"},
    1_700_000_000_000,
)


def _round_trip(store: TopicConfigStore) -> None:
    assert store.read("orders", TOPIC_ID) is None
    store.write(CONFIGS)
    assert store.read("orders", TOPIC_ID) == CONFIGS
    changed = dataclasses.replace(
        CONFIGS, configs={**CONFIGS.configs, "retention.ms": "-1"}, updated_ms=1_700_000_060_000
    )
    store.write(changed)  # replaced whole
    assert store.read("orders", TOPIC_ID) == changed
    assert store.read("orders", OTHER_ID) is None  # another topic id: another object


def _config(tmp_path: Path, remote: str) -> Path:
    path = tmp_path / "rlmm.toml"
    path.write_text(f'data_dir = "{tmp_path / "data"}"\n[remote]\n{remote}\n')
    return path


def test_a_directory_store_round_trips_and_replaces_whole(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, f'type = "local"\nroot = "{tmp_path / "store"}"'))
    store = open_topic_config_store(config)
    assert store is not None
    _round_trip(store)
    files = sorted(p.relative_to(tmp_path / "store") for p in (tmp_path / "store").rglob("*"))
    # One object, beside where the topic's segments go; no temp file left behind.
    assert [str(p) for p in files] == ["__topic_configs", f"__topic_configs/orders-{TOPIC_ID}.json"]
    text = json.loads((tmp_path / "store" / files[1]).read_text())
    assert text["version"] == 1 and text["configs"]["retention.ms"] == "-1"


def test_a_kafka_cluster_s_own_tier_keeps_no_configs(tmp_path: Path) -> None:
    config = load_config(
        _config(tmp_path, f'type = "local-tiered-storage"\ndir = "{tmp_path / "tier"}"')
    )
    assert open_topic_config_store(config) is None


def test_a_bad_object_is_named_with_its_remedy(tmp_path: Path) -> None:
    store = TopicConfigStore(tmp_path)
    path = tmp_path / object_name("orders", TOPIC_ID)
    path.parent.mkdir(parents=True)
    for content, says in (
        (b"{not json", "is not JSON"),
        (json.dumps({**json.loads(CONFIGS.encode()), "version": 2}).encode(), "of version 2"),
        (json.dumps({"version": 1, "topic": "orders"}).encode(), "does not hold a topic"),
        (dataclasses.replace(CONFIGS, topic_id=OTHER_ID).encode(), "copied or renamed by hand"),
    ):
        path.write_bytes(content)
        with pytest.raises(TopicConfigsError) as info:
            store.read("orders", TOPIC_ID)
        message = str(info.value)
        assert str(path) in message and says in message, message
    with pytest.raises(TopicConfigsError, match="is not Kafka's base64url"):
        store.read("orders", "../../etc")
    with pytest.raises(Exception, match="not a legal Kafka topic name"):
        store.write(dataclasses.replace(CONFIGS, topic="../x"))


def test_an_unwritable_directory_is_a_topic_configs_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(TopicConfigsError, match="cannot write"):
        TopicConfigStore(blocker).write(CONFIGS)


@pytest.mark.s3
def test_an_s3_store_round_trips_under_the_remote_prefix(s3_endpoint: str, tmp_path: Path) -> None:
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket="rlmm-configs")
    remote = (
        f'type = "s3"\nbucket = "rlmm-configs"\nprefix = "tier/a"\n'
        f'endpoint_url = "{s3_endpoint}"\nregion = "us-east-1"'
    )
    store = open_topic_config_store(load_config(_config(tmp_path, remote)))
    assert store is not None
    try:
        _round_trip(store)
        listed = boto3.client("s3", endpoint_url=s3_endpoint).list_objects_v2(
            Bucket="rlmm-configs"
        )["Contents"]
        assert [o["Key"] for o in listed] == [f"tier/a/__topic_configs/orders-{TOPIC_ID}.json"]
    finally:
        store.close()
