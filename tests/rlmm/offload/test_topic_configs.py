"""TopicConfigKeeper's cadence: a led topic's configs are asked on first sight, again
after ``topic.configs.refresh.ms``, and at once when the tiering configs the round's
view carries change; not every round. A cluster that cannot be reached is one warning,
tried again the next round, and writes nothing. (With a real cluster: the restore
integration test, tests/integration/test_restore_topic_configs.py.)"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest

from remote.topic_configs import TopicConfigStore
from rlmm.config import load_config
from rlmm.model import TopicIdPartition
from rlmm.offload.cluster import ClusterClient, ClusterView
from rlmm.offload.settings import OffloadSettings
from rlmm.offload.topic_configs import TopicConfigKeeper
from tests.rlmm.offload.test_cluster_client import closed_port

ORDERS = TopicIdPartition(uuid.UUID(int=1), "orders", 0)
ORDERS_1 = TopicIdPartition(uuid.UUID(int=1), "orders", 1)
CLICKS = TopicIdPartition(uuid.UUID(int=2), "clicks", 0)


def view(configs: dict[str, dict[str, str]]) -> ClusterView:
    return ClusterView({}, frozenset(), frozenset({1}), topic_configs=configs)


def test_topics_are_due_on_first_sight_after_the_refresh_and_on_a_tiering_change() -> None:
    now = [1000.0]
    keeper = TopicConfigKeeper(None, None, 300, clock=lambda: now[0])
    quiet = view({"orders": {"retention.ms": "-1"}, "clicks": {}})
    due = keeper.due([ORDERS, ORDERS_1, CLICKS], quiet)
    # One object per topic id, however many of its partitions are led.
    assert due == {("orders", "AAAAAAAAAAAAAAAAAAAAAQ"), ("clicks", "AAAAAAAAAAAAAAAAAAAAAg")}
    for key in due:
        keeper._checked[key] = now[0]  # what after_round records once kept
    now[0] += 299
    assert keeper.due([ORDERS, CLICKS], quiet) == set()  # not every round
    changed = view({"orders": {"retention.ms": "3000"}, "clicks": {}})
    assert keeper.due([ORDERS, CLICKS], changed) == {("orders", "AAAAAAAAAAAAAAAAAAAAAQ")}
    keeper._checked[("orders", "AAAAAAAAAAAAAAAAAAAAAQ")] = now[0]
    assert keeper.due([ORDERS, CLICKS], changed) == set()
    now[0] += 1
    assert keeper.due([ORDERS, CLICKS], changed) == {("clicks", "AAAAAAAAAAAAAAAAAAAAAg")}
    # A view without configs (DescribeConfigs denied) is no change.
    assert keeper.due([ORDERS], view({})) == set()


def test_the_refresh_is_the_offload_setting() -> None:
    settings = OffloadSettings.from_config(load_config(env={}))
    assert settings.topic_configs_refresh_ms == 300_000
    other = load_config(overrides={"offload.topic.configs.refresh.ms": 1000}, env={})
    assert OffloadSettings.from_config(other).topic_configs_refresh_ms == 1000
    with pytest.raises(Exception, match=r"topic\.configs\.refresh\.ms must be positive"):
        load_config(overrides={"offload.topic.configs.refresh.ms": 0}, env={})


async def test_an_unreachable_cluster_is_one_warning_and_nothing_written(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = ClusterClient({"bootstrap_servers": f"127.0.0.1:{closed_port()}"}, 1, timeout_s=2)
    keeper = TopicConfigKeeper(TopicConfigStore(tmp_path), cluster, 300)
    caplog.set_level(logging.WARNING, logger="rlmm.offload.topic_configs")
    try:
        await keeper.after_round([ORDERS], None)
        await keeper.after_round([ORDERS], None)  # due again: nothing was kept
    finally:
        await cluster.close()
    warnings = [r.getMessage() for r in caplog.records if r.name == "rlmm.offload.topic_configs"]
    assert len(warnings) == 1, warnings
    assert "not kept for rlmm restore this round" in warnings[0]
    assert "cannot describe topic configs at 127.0.0.1:" in warnings[0]
    assert "KafkaConnectionError: Unable to bootstrap" in warnings[0]
    assert keeper.writes == 0 and not list(tmp_path.iterdir())
