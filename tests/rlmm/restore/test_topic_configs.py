"""Which of the source topic's kept configs a restore creates its target with: the
topic's own configs but tiering and the source brokers' throttles, with the configs that
would refuse or re-stamp the restored records held for after the restore (with the
command that sets them), ``--topic-config`` over all of them and ``--no-topic-configs``
leaving only those. (Applied to a real topic: tests/integration/test_restore_topic_configs.py.)"""

from __future__ import annotations

from remote.topic_configs import TopicConfigs
from rlmm.restore import choose_configs

STORED = TopicConfigs(
    "orders",
    "M4HtdF9vRx6hcoUD_QN_cA",
    {
        "cleanup.policy": "delete",
        "min.insync.replicas": "2",
        "segment.bytes": "1048576",
        "retention.ms": "-1",
        "remote.storage.enable": "true",
        "local.retention.ms": "1000",
        "remote.copy.lag.ms": "600000",
        "leader.replication.throttled.replicas": "0:1,0:2",
        "message.timestamp.type": "LogAppendTime",
        "message.timestamp.before.max.ms": "3600000",
    },
)
WHERE = "/srv/remote/__topic_configs/orders-M4HtdF9vRx6hcoUD_QN_cA.json"


def test_the_topic_s_own_configs_go_over_but_tiering_throttles_and_record_refusers() -> None:
    choice = choose_configs(STORED, WHERE)
    assert choice.applied == {
        "cleanup.policy": "delete",
        "min.insync.replicas": "2",
        "segment.bytes": "1048576",
        "retention.ms": "-1",
    }
    assert set(choice.not_copied) == {
        "remote.storage.enable",
        "local.retention.ms",
        "remote.copy.lag.ms",  # KIP-1241's, which a target before Kafka 4.4 refuses
        "leader.replication.throttled.replicas",
    }
    assert choice.not_copied["remote.storage.enable"].startswith("tiering")
    assert "source cluster's brokers" in choice.not_copied["leader.replication.throttled.replicas"]
    assert choice.set_after == {
        "message.timestamp.type": "LogAppendTime",
        "message.timestamp.before.max.ms": "3600000",
    }
    assert "restore's time" in choice.set_after_why["message.timestamp.type"]
    assert choice.after_command("kafka:9092", "orders-restored") == (
        "kafka-configs.sh --bootstrap-server kafka:9092 --alter --entity-type topics"
        " --entity-name orders-restored --add-config"
        " message.timestamp.before.max.ms=3600000,message.timestamp.type=LogAppendTime"
    )
    shown = choice.to_dict()
    assert shown["from"] == WHERE and shown["stored"] == dict(sorted(STORED.configs.items()))
    assert list(shown["applied"]) == sorted(shown["applied"])


def test_create_time_goes_over_at_once() -> None:
    plain = TopicConfigs("orders", STORED.topic_id, {"message.timestamp.type": "CreateTime"})
    choice = choose_configs(plain, WHERE)
    assert choice.applied == {"message.timestamp.type": "CreateTime"}
    assert choice.after_command("kafka:9092", "orders") is None


def test_overrides_win_even_over_what_is_not_copied() -> None:
    choice = choose_configs(
        STORED,
        WHERE,
        overrides={"min.insync.replicas": "1", "remote.storage.enable": "true", "x.y": "z"},
    )
    assert choice.applied["min.insync.replicas"] == "1"
    assert choice.applied["remote.storage.enable"] == "true"  # the operator's choice
    assert choice.applied["x.y"] == "z"  # the target cluster checks it, not rlmm
    assert "remote.storage.enable" not in choice.not_copied


def test_no_topic_configs_leaves_the_overrides_alone() -> None:
    choice = choose_configs(
        STORED, "not read (--no-topic-configs)", use_stored=False, overrides={"a": "b"}
    )
    assert choice.applied == {"a": "b"} and not choice.not_copied and not choice.set_after
    assert choice.stored == STORED.configs  # what was there, for the record
    assert choose_configs(None, "none kept").applied == {}
