"""deploy/kubernetes/plugin: brokers that load rlmm's plugin agree with what the jar
reads, what `rlmm serve` accepts and what the suite's broker test runs.

Invariant checked: the broker's environment (the apache/kafka image maps
``KAFKA_A_B`` to ``a.b``) names rlmm's two classes, a jar the init container puts in
a volume the broker mounts, and one socket for both classes, in an emptyDir that the
``rlmm serve`` container mounts too; that container's arguments parse as the real
``rlmm serve`` command's, it reads the broker's log volume read-only at the broker's
path, its probe and the scrape annotations name its metrics port, and the ConfigMap's
TOML builds a configuration (with the broker's properties) free of secrets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlmm.offload.health import PATHS
from rlmm.plugin.broker_settings import broker_config
from tests.deploy.test_manifests import match_kubernetes_schemas
from tests.fixtures.kafka_plugin import RLMM_CLASS, RSM_CLASS

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "deploy" / "kubernetes" / "plugin"
SERVE = "rlmm-serve"


def resources() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(PLUGIN.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            for doc in yaml.safe_load_all(path.read_text()):
                assert doc["kind"] not in out, f"two {doc['kind']}s"
                out[doc["kind"]] = doc
    return out


def pod() -> dict[str, Any]:
    template: dict[str, Any] = resources()["StatefulSet"]["spec"]["template"]
    return template


def container(name: str, kind: str = "containers") -> dict[str, Any]:
    [found] = [c for c in pod()["spec"][kind] if c["name"] == name]
    return found


def broker_properties() -> dict[str, str]:
    """The broker container's KAFKA_* variables as the image turns them into properties."""
    env = {e["name"]: e.get("value") for e in container("kafka")["env"]}
    return {
        k.removeprefix("KAFKA_").lower().replace("_", "."): str(v)
        for k, v in env.items()
        if k.startswith("KAFKA_") and v is not None
    }


def serve_flags() -> tuple[list[str], dict[str, str]]:
    """The serve container's group options (before ``serve``) and its own flags."""
    args = container(SERVE)["args"]
    at = args.index("serve")
    own = args[at + 1 :]
    return args[:at], {own[i]: own[i + 1] for i in range(0, len(own), 2)}


def mounts(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["mountPath"]: m for m in c["volumeMounts"]}


def test_kustomization_lists_every_manifest() -> None:
    listed = yaml.safe_load((PLUGIN / "kustomization.yaml").read_text())["resources"]
    assert sorted(listed) == sorted(
        p.name for p in PLUGIN.glob("*.yaml") if p.name != "kustomization.yaml"
    )


def test_the_serve_container_runs_the_real_command() -> None:
    from rlmm.cli import main

    group, own = serve_flags()
    command = main.commands["serve"]  # type: ignore[attr-defined]
    options = {opt for p in command.params for opt in p.opts}
    assert set(own) <= options, set(own) - options
    assert group[0] == "--config" and len(group) == 2
    ctx = command.make_context("serve", [x for kv in own.items() for x in kv])
    assert ctx.params["metrics_port"] == 9406 and ctx.params["metrics_host"] == "0.0.0.0"
    assert "--parent-pid" not in own  # a sidecar: the bridge attaches, the pod restarts it


def test_the_broker_loads_rlmms_classes_from_the_init_containers_jar() -> None:
    props = broker_properties()
    assert props["remote.log.storage.system.enable"] == "true"
    assert props["remote.log.storage.manager.class.name"] == RSM_CLASS
    assert props["remote.log.metadata.manager.class.name"] == RLMM_CLASS
    jar = props["remote.log.storage.manager.class.path"]
    assert props["remote.log.metadata.manager.class.path"] == jar
    assert props["remote.log.metadata.manager.listener.name"] == "PLAINTEXT"
    init = container("rlmm-plugin-jar", "initContainers")
    assert init["command"][0] == "cp" and Path(init["command"][1]).name == Path(jar).name
    target = init["command"][2].rstrip("/")
    [volume] = [m["name"] for m in init["volumeMounts"] if m["mountPath"] == target]
    broker = mounts(container("kafka"))
    assert broker[str(Path(jar).parent)]["name"] == volume
    assert init["image"] == container(SERVE)["image"]  # one release: jar and serve match


def test_both_classes_attach_to_the_serve_containers_socket() -> None:
    props = broker_properties()
    _group, own = serve_flags()
    socket = own["--socket"]
    assert props["rsm.config.socket"] == props["rlmm.config.socket"] == socket
    assert "rsm.config.file" not in props and "rlmm.config.file" not in props  # attach only
    directory = str(Path(socket).parent)
    broker, serve = mounts(container("kafka")), mounts(container(SERVE))
    assert broker[directory]["name"] == serve[directory]["name"]
    [volume] = [v for v in pod()["spec"]["volumes"] if v["name"] == serve[directory]["name"]]
    assert "emptyDir" in volume


def test_serve_reads_the_brokers_log_volume_read_only_at_the_same_path() -> None:
    log_dir = broker_properties()["log.dirs"]
    broker, serve = mounts(container("kafka")), mounts(container(SERVE))
    # Kafka hands copyLogSegmentData the paths of its own files: the same path here.
    assert serve[log_dir]["readOnly"] is True and serve[log_dir]["name"] == broker[log_dir]["name"]
    for path, mount in serve.items():  # read-only root: only these are writable
        assert mount.get("readOnly") is True or path in ("/var/lib/rlmm", "/tmp", "/run/rlmm")
    assert container(SERVE)["securityContext"]["readOnlyRootFilesystem"] is True


def test_probes_and_scrape_point_at_the_serve_metrics_port() -> None:
    _group, own = serve_flags()
    port = int(own["--metrics-port"])
    serve = container(SERVE)
    assert {p["name"]: p["containerPort"] for p in serve["ports"]} == {"rlmm-metrics": port}
    get = serve["livenessProbe"]["httpGet"]
    assert get["path"] == "/healthz" and "/healthz" in PATHS and get["port"] == "rlmm-metrics"
    assert "readinessProbe" not in serve  # the pod's readiness is the broker's
    annotations = pod()["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(port)
    service = {p["name"]: p for p in resources()["Service"]["spec"]["ports"]}
    assert service["rlmm-metrics"]["port"] == port


def test_the_configmap_builds_a_broker_config_without_secrets(tmp_path: Path) -> None:
    group, _own = serve_flags()
    config_path = Path(group[1])
    serve = container(SERVE)
    volume_name = mounts(serve)[str(config_path.parent)]["name"]
    [volume] = [v for v in pod()["spec"]["volumes"] if v["name"] == volume_name]
    configmap = resources()["ConfigMap"]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    text = configmap["data"][config_path.name]
    for word in ("secret", "password", "token", "access_key", "broker_id"):
        assert word not in text.lower(), f"{word} in the ConfigMap"
    (tmp_path / "rlmm.toml").write_text(text)
    props = {
        "broker.id": "2",
        "remote.log.metadata.common.client.bootstrap.servers": "kafka-2.kafka:9092",
        "remote.log.metadata.topic.replication.factor": "3",
    }
    config = broker_config(tmp_path / "rlmm.toml", props)
    assert config.broker_id == 2 and config.remote_options()["type"] == "s3"
    events = config.event_log_options()
    assert events["type"] == "kafka" and events["bootstrap_servers"] == "kafka-2.kafka:9092"
    assert str(config.data_dir) in {p for p, m in mounts(serve).items() if not m.get("readOnly")}
    secret = resources()["Secret"]
    assert [e["secretRef"]["name"] for e in serve["envFrom"]] == [secret["metadata"]["name"]]


def test_manifests_match_kubernetes_schemas() -> None:
    match_kubernetes_schemas(resources())
