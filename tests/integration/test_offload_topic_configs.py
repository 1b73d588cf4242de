"""Topic configs changed with Kafka's own `kafka-configs` take effect in the sidecar
within a round (KIP-950's switches and retention, from the cluster's DescribeConfigs).

A three-node Apache Kafka 4.1.1 cluster that does not tier itself; one sidecar, in
this process, over node 1's log dir and the cluster's ``__remote_log_metadata``.

Invariants checked: ``remote.log.copy.disable=true`` stops the copies (new rolled
segments stay local) and the change is logged; ``retention.ms`` set on the topic
expires the remote segments while copying stays disabled; ``remote.storage.enable=
false`` with ``remote.log.delete.on.disable=true`` deletes another topic's remote data
and marks its partition deleted; ``--dry-run`` shows each value and that it came from
the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from uuid import uuid4

import pytest

from rlmm.archive import open_metadata_view
from rlmm.archive.errors import ArchiveError
from rlmm.config import load_config
from rlmm.model import RemotePartitionDeleteState
from rlmm.offload.display import Display
from rlmm.offload.sidecar import Sidecar
from tests.fixtures.apache_kafka_cluster import ApacheKafkaCluster
from tests.integration.replicated_offload import ROOT, config_text, produce_waves

pytestmark = [pytest.mark.kafka, pytest.mark.apache_kafka, pytest.mark.slow,
              pytest.mark.timeout(300)]  # fmt: skip

NODE = 1
SEGMENTS = {"segment.ms": "1000"}


def remote(config: Path, topic: str) -> tuple[int, RemotePartitionDeleteState | None]:
    """Live remote segments of ``topic``-0, and its partition-delete state."""
    with open_metadata_view(load_config(config, env={})) as view:
        tp = view.find(topic, 0)
        if tp is None:
            return 0, None
        state = view.delete_state(tp)
        return len(view.segments(tp)), None if state is None else state.state


async def wait_for(what: str, check: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(ArchiveError):  # the metadata topic may not exist yet
            if await asyncio.to_thread(check):
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout}s: {what}")
        await asyncio.sleep(0.5)


async def test_kafka_configs_changes_take_effect_within_a_round(
    kafka_cluster: ApacheKafkaCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = kafka_cluster
    kept, dropped = f"cfg-{uuid4().hex[:6]}", f"drop-{uuid4().hex[:6]}"
    for topic in (kept, dropped):
        cluster.create_topic(topic, configs=SEGMENTS, assignments={0: [NODE]})
        await produce_waves(cluster, topic, 3, tag=topic)
    config = tmp_path / "sidecar.toml"
    config.write_text(config_text(tmp_path, tmp_path / "sidecar", cluster.bootstrap)
                      .replace('"remote.log.manager.task.interval.ms" = 1000',
                               '"remote.log.manager.task.interval.ms" = 500'))  # fmt: skip
    sidecar = Sidecar(load_config(config, env={}), [cluster.log_dir(NODE)],
                      display=Display(rich=False))  # fmt: skip
    caplog.set_level(logging.INFO, logger="rlmm.offload")
    running = asyncio.create_task(sidecar.run())
    try:
        for topic in (kept, dropped):
            await wait_for(f"{topic} archived", lambda t=topic: remote(config, t)[0] >= 3)

        # remote.log.copy.disable: the next rolled segments stay local
        cluster.alter_topic_configs(kept, {"remote.log.copy.disable": "true"})
        await wait_for("the change logged", lambda: any(
            f"topic {kept}: remote.log.copy.disable = true" in r.getMessage()
            for r in caplog.records), timeout=20)  # fmt: skip
        copied = remote(config, kept)[0]
        await produce_waves(cluster, kept, 2, tag="after")
        await asyncio.sleep(4)  # several rounds
        assert remote(config, kept)[0] == copied

        # retention.ms on the topic: the remote segments expire, copying still off
        cluster.alter_topic_configs(kept, {"retention.ms": "3000"})
        await wait_for("remote retention", lambda: remote(config, kept)[0] == 0)

        # remote.storage.enable=false + remote.log.delete.on.disable=true: deleted
        cluster.alter_topic_configs(
            dropped, {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"}
        )
        finished = RemotePartitionDeleteState.DELETE_PARTITION_FINISHED
        await wait_for("the partition deleted", lambda: remote(config, dropped) == (0, finished))
    finally:
        sidecar.stop()
        await asyncio.wait_for(running, 60)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []

    done = subprocess.run(
        [sys.executable, "-m", "rlmm.cli", "--config", str(config), "offload", "--json",
         "--dry-run", "--log-dir", str(cluster.log_dir(NODE))],
        cwd=ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    plan = {t["topic"]: t for t in json.loads(done.stdout)["topics"]}
    settings = plan[kept]["settings"]
    assert settings["remote.log.copy.disable"] == {"value": "true", "from": "cluster"}
    assert settings["retention.ms"] == {"value": "3000", "from": "cluster"}
    assert settings["retention.bytes"]["from"] == "offload"
    assert plan[kept]["partitions_led"] == 1 and plan[kept]["offloaded"]
    assert not plan[dropped]["offloaded"]
