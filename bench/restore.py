"""Benchmark: a topic copied into a fresh cluster by `rlmm restore` (from the archive)
and by MirrorMaker 2 (from the source cluster), in the same run.

An Apache Kafka 4.1.1 broker (the suite's pinned release, one KRaft node) tiers a topic
through LocalTieredStorage: Kafka's ProducerPerformance writes ``--records`` records of
``--record-size`` bytes to ``--partitions`` partitions, one record per partition rolls
the last segment, and the bench waits until every rolled segment is in the remote tier
(the local copies stay: MirrorMaker reads them from the broker). A second broker is the
target.

(a) MirrorMaker 2 in its dedicated mode (``org.apache.kafka.connect.mirror.MirrorMaker``,
from the same release's jars, ``tasks.max`` = partitions) copies the topic from the
running source; timed from its start until the target topic ``src.<topic>`` holds every
tiered record (and, apart, from the first record it wrote). (b) The source broker is
stopped, then ``rlmm restore --from-store`` copies the tiered offsets from the remote dir
alone into the target (timed as a command: process start to exit). Target: (b) >= 2x
(a) in records per second, and no load on the source (it is not running). Both ratios
are given: over MirrorMaker's whole run, and over its rate from its first record on.
Prints ONE JSON document. Usage:
  python bench/restore.py [--records 300000] [--record-size 100] [--partitions 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from uuid import uuid4

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiokafka import AIOKafkaConsumer, TopicPartition

from bench._machine import machine
from bench._topic import create_topic, producer_performance, roll
from tests.fixtures.apache_kafka import (
    KAFKA_VERSION,
    ApacheKafkaBroker,
    _dependency,
    fetch_jars,
    require_tools,
)

SEGMENT_BYTES = 4 << 20


TOPIC_CONFIGS = {
    "remote.storage.enable": "true",
    "segment.bytes": str(SEGMENT_BYTES),
    "segment.ms": "600000",
    "retention.ms": "-1",
}


def wait_tiered(broker: ApacheKafkaBroker, topic: str, partitions: int) -> dict[int, int]:
    """Until every rolled segment of each partition is in the remote tier; the end of
    what is tiered (the active segment's base offset) per partition."""
    remote = broker.remote_dir / "kafka-tiered-storage"
    deadline = time.monotonic() + 600
    while True:
        done = {}
        for p in range(partitions):
            local = sorted(int(f.stem) for f in (broker.data_dir / f"{topic}-{p}").glob("*.log"))
            tiered = {int(f.name[:20]) for f in remote.glob(f"{topic}-{p}-*/*.log")}
            if local and set(local[:-1]) <= tiered:
                done[p] = local[-1]
        if len(done) == partitions:
            return done
        if time.monotonic() > deadline:
            raise RuntimeError(f"not tiered within 600 s: {done}")
        time.sleep(1)


async def end_offsets(bootstrap: str, topic: str, partitions: int) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        try:
            ends = await consumer.end_offsets(tps)
        except Exception:  # the topic is not there yet
            return 0
        return sum(ends.values())
    finally:
        await consumer.stop()


def mirror_maker(
    source: ApacheKafkaBroker, target: ApacheKafkaBroker, topic: str, partitions: int,
    records: int, root: Path,
) -> dict[str, Any]:  # fmt: skip
    libs = fetch_jars(
        f"connect-mirror-{KAFKA_VERSION}",
        [_dependency("org.apache.kafka", "connect-mirror", KAFKA_VERSION)],
    )
    config = root / "mm2.properties"
    settings = {
        "clusters": "src, dst",
        "src.bootstrap.servers": source.bootstrap,
        "dst.bootstrap.servers": target.bootstrap,
        "src->dst.enabled": "true",
        "src->dst.topics": topic,
        "dst->src.enabled": "false",
        "tasks.max": str(partitions),
        "replication.factor": "1",
        "refresh.topics.interval.seconds": "1",
        "sync.topic.configs.enabled": "false",
        "sync.topic.acls.enabled": "false",
        "emit.heartbeats.enabled": "false",
        "emit.checkpoints.enabled": "false",
        "src->dst.consumer.auto.offset.reset": "earliest",
        **{
            f"{name}.replication.factor": "1"
            for name in (
                "checkpoints.topic",
                "heartbeats.topic",
                "offset-syncs.topic",
                "offset.storage",
                "status.storage",
                "config.storage",
            )
        },
    }
    config.write_text("".join(f"{k} = {v}\n" for k, v in settings.items()))
    java, _ = require_tools()
    log = (root / "mm2.log").open("wb")
    classpath = f"{libs}/*:{source.libs}/*"
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [java, "-Xmx512m", f"-Dlog4j2.configurationFile={source.root / 'log4j2.properties'}",
         "-cp", classpath, "org.apache.kafka.connect.mirror.MirrorMaker", str(config)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    first = None
    mirrored = f"src.{topic}"
    try:
        deadline = time.monotonic() + 900
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"MirrorMaker exited with {proc.returncode}: see {root}")
            n = asyncio.run(end_offsets(target.bootstrap, mirrored, partitions))
            now = time.perf_counter()
            if n and first is None:
                first = (now, n)
            if n >= records:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"MirrorMaker copied {n} of {records} in 900 s")
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        log.close()
    wall = now - t0
    assert first is not None
    steady = now - first[0]
    return {
        "wall_s": round(wall, 2),
        "records_per_s": round(records / wall),
        "from_first_record_s": round(steady, 2),
        "records_per_s_from_first_record": round((records - first[1]) / steady)
        if steady > 0
        else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=2)
    args = parser.parse_args()
    out: dict[str, Any] = {
        "bench": "restore",
        "machine": machine(),
        "kafka": KAFKA_VERSION,
        "record_size": args.record_size,
        "partitions": args.partitions,
        "target": {"restore_vs_mirror_maker_2": 2.0},
    }
    root = Path(tempfile.mkdtemp(prefix="rlmm-restore-bench-"))
    source = ApacheKafkaBroker(root / "source", heap="1g")
    target = ApacheKafkaBroker(root / "target", heap="1g", libs=source.libs)
    try:
        source.start()
        target.start()
        topic = f"restore-{uuid4().hex[:8]}"
        asyncio.run(create_topic(source.bootstrap, topic, args.partitions, TOPIC_CONFIGS))
        producer_performance(source, topic, args.records, args.record_size)
        asyncio.run(roll(source.bootstrap, topic, args.partitions))
        ends = wait_tiered(source, topic, args.partitions)
        tiered = sum(ends.values())  # offsets 0..end-1 of each partition: plain records
        out["records"] = tiered
        out["a_mirror_maker_2"] = mirror_maker(
            source, target, topic, args.partitions, tiered + args.partitions, root
        )
        source.stop()  # (b) reads the remote dir alone: no load on the source
        config = root / "rlmm.toml"
        config.write_text(
            f'data_dir = "{root / "rlmm"}"\n'
            f'[remote]\ntype = "local-tiered-storage"\ndir = "{source.remote_dir}"\n'
        )
        t0 = time.perf_counter()
        restored = subprocess.run(
            [sys.executable, "-m", "rlmm.cli", "restore", "--topic", topic, "--from-store",
             "--bootstrap-server", target.bootstrap, "--json", "--config", str(config)],
            capture_output=True, text=True, timeout=1800, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        wall = time.perf_counter() - t0
        if restored.returncode != 0:
            raise RuntimeError(f"rlmm restore failed: {restored.stderr}")
        summary = json.loads(restored.stdout)
        assert summary["records"] == tiered, (summary["records"], tiered)
        out["b_rlmm_restore"] = {
            "wall_s": round(wall, 2),
            "records_per_s": round(tiered / wall),
            "restore_elapsed_s": summary["elapsed_s"],
            "records_per_s_in_restore": summary["records_per_s"],
            "batches_passed_through": summary["batches_passed_through"],
            "batches_reencoded": summary["batches_reencoded"],
            "source_running": False,
        }
        a, b = out["a_mirror_maker_2"], out["b_rlmm_restore"]
        out["restore_vs_mirror_maker_2"] = round(b["records_per_s"] / a["records_per_s"], 2)
        # Net of MirrorMaker's start (a Connect worker: tens of seconds): its steady rate
        # against the whole restore command, start and listing included.
        if a["records_per_s_from_first_record"]:
            out["restore_vs_mirror_maker_2_steady"] = round(
                b["records_per_s"] / a["records_per_s_from_first_record"], 2
            )
    finally:
        for broker in (source, target):
            broker.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
