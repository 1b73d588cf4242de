"""KIP-1241's delayed upload on Apache Kafka 4.1.1, which does not know its configs.

A three-node Apache Kafka 4.1.1 cluster that does not tier itself; one sidecar, in this
process, over node 1's log dir and the cluster's ``__remote_log_metadata``; topics with
one replica, on node 1.

Invariants checked: Kafka 4.1.1 refuses ``remote.copy.lag.ms`` on a topic, so rlmm's
TOML is where it is set there, and its DescribeConfigs leaves the name out without
failing (the sidecar keeps leading); with ``[offload.topics.<t>] "remote.copy.lag.ms"``
each segment of ``t`` is copied only once its newest record is that old, and every one
is in the end, while a topic without a delay is copied at once; with
``"remote.copy.lag.bytes"`` (the time check off) exactly the segments with that many
local bytes after them are copied, and the next once the log grows; ``--dry-run`` says
where each value came from.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from pathlib import Path
from uuid import uuid4

import pytest

from rlmm.archive import open_metadata_view
from rlmm.config import load_config
from rlmm.model import RemoteLogSegmentMetadata
from rlmm.offload.display import Display
from rlmm.offload.sidecar import Sidecar
from tests.fixtures.apache_kafka_cluster import ApacheKafkaCluster
from tests.integration.replicated_offload import ROOT, config_text, produce_waves
from tests.integration.test_offload_topic_configs import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.apache_kafka, pytest.mark.slow,
              pytest.mark.timeout(300)]  # fmt: skip

NODE = 1
SEGMENTS = {"segment.ms": "1000"}
LAG_MS = 15_000


def finished(config: Path, topic: str) -> list[RemoteLogSegmentMetadata]:
    """The live remote segments of ``topic``-0, by offset."""
    with open_metadata_view(load_config(config, env={})) as view:
        tp = view.find(topic, 0)
        return [] if tp is None else sorted(view.segments(tp), key=lambda m: m.start_offset)


def local_segments(cluster: ApacheKafkaCluster, topic: str) -> list[tuple[int, int]]:
    """(base offset, bytes) of each local segment of ``topic``-0 on NODE, the active last."""
    pdir = cluster.log_dir(NODE) / f"{topic}-0"
    return sorted((int(p.stem), p.stat().st_size) for p in pdir.glob("*.log"))


def copyable_by_size(segments: list[tuple[int, int]], lag_bytes: int) -> list[int]:
    """The base offsets of the rolled segments with ``lag_bytes`` local bytes after them."""
    sizes = [size for _base, size in segments]
    return [
        base for i, (base, _size) in enumerate(segments[:-1]) if sum(sizes[i + 1 :]) >= lag_bytes
    ]


async def test_the_copy_delay_from_rlmm_s_config_on_a_cluster_that_does_not_know_it(
    kafka_cluster: ApacheKafkaCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = kafka_cluster
    tag = uuid4().hex[:6]
    delayed, prompt, sized = f"delayed-{tag}", f"prompt-{tag}", f"sized-{tag}"
    for topic in (delayed, prompt, sized):
        cluster.create_topic(topic, configs=SEGMENTS, assignments={0: [NODE]})
    # Kafka 4.1.1 does not know KIP-1241's configs: a topic refuses them
    with pytest.raises(RuntimeError, match=r"Unknown topic config name: remote\.copy\.lag\.ms"):
        cluster.alter_topic_configs(prompt, {"remote.copy.lag.ms": str(LAG_MS)})

    await produce_waves(cluster, sized, 4, tag="s")
    before = local_segments(cluster, sized)
    # the last two rolled segments are held: fewer bytes after them than this
    lag_bytes = before[-2][1] + before[-1][1] + 1
    assert copyable_by_size(before, lag_bytes) == [base for base, _ in before[:-3]]
    config = tmp_path / "sidecar.toml"
    config.write_text(
        config_text(tmp_path, tmp_path / "sidecar", cluster.bootstrap).replace(
            '"remote.log.manager.task.interval.ms" = 1000',
            '"remote.log.manager.task.interval.ms" = 500',
        )
        + f'[offload.topics."{delayed}"]\n"remote.copy.lag.ms" = {LAG_MS}\n'
        # -1: the local retention, -2 there: retention.ms, -1 here: no time check
        + f'[offload.topics."{sized}"]\n"remote.copy.lag.ms" = -1\n'
        f'"remote.copy.lag.bytes" = {lag_bytes}\n'
    )
    sidecar = Sidecar(load_config(config, env={}), [cluster.log_dir(NODE)],
                      display=Display(rich=False))  # fmt: skip
    caplog.set_level(logging.INFO, logger="rlmm.offload")
    running = asyncio.create_task(sidecar.run())
    try:
        await asyncio.gather(produce_waves(cluster, delayed, 3, tag="d"),
                             produce_waves(cluster, prompt, 3, tag="p"))  # fmt: skip
        await wait_for("the prompt topic archived", lambda: len(finished(config, prompt)) >= 3)
        await wait_for(
            "the delayed topic archived",
            lambda: len(finished(config, delayed)) >= 3,
            timeout=LAG_MS / 1000 + 60,
        )
        # every copy of the delayed topic began once its newest record was LAG_MS old
        ages = [m.event_timestamp_ms - m.max_timestamp_ms for m in finished(config, delayed)]
        assert min(ages) >= LAG_MS, ages
        quick = [m.event_timestamp_ms - m.max_timestamp_ms for m in finished(config, prompt)]
        assert min(quick) < LAG_MS, quick

        # by size: exactly the segments with lag_bytes after them
        await wait_for("the sized topic's first segments archived",
                       lambda: len(finished(config, sized)) >= len(before) - 3)  # fmt: skip
        await asyncio.sleep(3)  # six rounds more: nothing else goes
        assert [m.start_offset for m in finished(config, sized)] == [
            base for base, _ in before[:-3]
        ]
        # the log grows: the held segments now have lag_bytes after them
        await produce_waves(cluster, sized, 2, tag="s2")
        grown = local_segments(cluster, sized)
        expected = copyable_by_size(grown, lag_bytes)
        assert before[-3][0] in expected and before[-2][0] in expected
        await wait_for(
            "the held segments archived",
            lambda: [m.start_offset for m in finished(config, sized)] == expected,
        )
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
    plan = {t["topic"]: t["settings"] for t in json.loads(done.stdout)["topics"]}
    assert plan[delayed]["remote.copy.lag.ms"] == {
        "value": str(LAG_MS), "from": f"offload.topics.{delayed}"
    }  # fmt: skip
    assert plan[sized]["remote.copy.lag.bytes"] == {
        "value": str(lag_bytes), "from": f"offload.topics.{sized}"
    }  # fmt: skip
    assert plan[prompt]["remote.copy.lag.ms"] == {"value": "0", "from": "offload"}
    assert plan[prompt]["remote.copy.lag.bytes"] == {"value": "-1", "from": "offload"}
