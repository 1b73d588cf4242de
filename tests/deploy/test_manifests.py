"""deploy/kubernetes and deploy/systemd: the sidecar's probes, port, volumes, config
and secrets agree with what `rlmm offload` serves and reads.

Invariant checked: the probes ask for paths the metrics port serves, on the port the
sidecar is told to listen on (bound to every interface), the scrape annotations name
the same port and /metrics, the log volume is read-only in the sidecar and is the
broker's log dir, the ConfigMap's file is a valid rlmm config free of secrets, and
secrets come from the Secret. Manifests are checked against Kubernetes' schemas by
kubernetes-validate (offline; skipped, with the reason, when it is not installed);
the systemd unit by ``systemd-analyze verify`` when that is on PATH.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from rlmm.config import load_config
from rlmm.offload.health import PATHS

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "kubernetes"
UNIT = ROOT / "deploy" / "systemd" / "rlmm-offload.service"
SIDECAR = "rlmm-offload"


def resources() -> dict[str, dict[str, Any]]:
    """The Kubernetes objects of deploy/kubernetes (kustomization aside), by kind."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            assert doc["kind"] not in out, f"two {doc['kind']}s"
            out[doc["kind"]] = doc
    return out


def flags(args: list[str]) -> dict[str, str]:
    """``--name value`` pairs of a command line (every flag here takes a value)."""
    out = {}
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            out[arg] = args[i + 1]
    return out


def offload_options() -> set[str]:
    from rlmm.cli import main

    command = main.commands["offload"]  # type: ignore[attr-defined]
    return {opt for p in command.params for opt in p.opts}


def pod() -> dict[str, Any]:
    spec: dict[str, Any] = resources()["StatefulSet"]["spec"]["template"]
    return spec


def container(name: str) -> dict[str, Any]:
    found = [c for c in pod()["spec"]["containers"] if c["name"] == name]
    assert len(found) == 1, name
    return found[0]


def test_kustomization_lists_every_manifest() -> None:
    listed = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(listed) == sorted(files)


def test_probes_and_scrape_point_at_what_the_sidecar_serves() -> None:
    sidecar = container(SIDECAR)
    assert sidecar["args"][0] == "offload"
    args = flags(sidecar["args"])
    assert set(args) <= offload_options(), set(args) - offload_options()
    port = int(args["--metrics-port"])
    assert args["--metrics-host"] == "0.0.0.0"  # the kubelet and Prometheus are not local
    ports = {p["name"]: p["containerPort"] for p in sidecar["ports"]}
    assert ports == {"rlmm-metrics": port}

    get = sidecar["livenessProbe"]["httpGet"]
    assert get["path"] == "/healthz" and "/healthz" in PATHS
    assert ports.get(get["port"], get["port"]) == port
    # A sidecar's readiness would be its broker pod's: it is an alert instead.
    assert "readinessProbe" not in sidecar
    assert "RlmmOffloadNotReady" in (ROOT / "deploy" / "prometheus" / "rules.yml").read_text()

    annotations = pod()["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(port)
    assert annotations["prometheus.io/path"] == "/metrics" and "/metrics" in PATHS

    service = resources()["Service"]["spec"]
    assert service["publishNotReadyAddresses"] is True
    assert service["selector"].items() <= pod()["metadata"]["labels"].items()
    named = {p["name"]: p["targetPort"] for p in service["ports"]}
    assert named["rlmm-metrics"] == "rlmm-metrics"


def test_log_volume_is_the_brokers_and_read_only() -> None:
    sidecar, kafka = container(SIDECAR), container("kafka")
    log_dir = flags(sidecar["args"])["--log-dir"]
    mounts = {m["mountPath"]: m for m in sidecar["volumeMounts"]}
    assert mounts[log_dir].get("readOnly") is True
    env = {e["name"]: e.get("value") for e in kafka["env"]}
    assert env["KAFKA_LOG_DIRS"] == log_dir
    broker = [m for m in kafka["volumeMounts"] if m["mountPath"] == log_dir]
    assert len(broker) == 1 and not broker[0].get("readOnly")
    assert broker[0]["name"] == mounts[log_dir]["name"]
    claims = {
        c["metadata"]["name"] for c in resources()["StatefulSet"]["spec"]["volumeClaimTemplates"]
    }
    assert mounts[log_dir]["name"] in claims
    for path, mount in mounts.items():  # read-only root: only these are writable
        assert mount.get("readOnly") is True or path in ("/var/lib/rlmm", "/tmp"), path
    assert sidecar["securityContext"]["readOnlyRootFilesystem"] is True


def test_config_from_the_configmap_and_secrets_from_the_secret(tmp_path: Path) -> None:
    sidecar = container(SIDECAR)
    config_path = Path(flags(sidecar["args"])["--config"])
    mount = next(m for m in sidecar["volumeMounts"] if m["mountPath"] == str(config_path.parent))
    volume = next(v for v in pod()["spec"]["volumes"] if v["name"] == mount["name"])
    configmap = resources()["ConfigMap"]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    text = configmap["data"][config_path.name]
    for word in ("secret", "password", "token", "access_key"):
        assert word not in text.lower(), f"{word} in the ConfigMap"
    (tmp_path / "offload.toml").write_text(text)
    config = load_config(tmp_path / "offload.toml", env={})
    assert config.remote_options()["type"] == "s3"
    assert config.event_log_options()["type"] == "kafka"
    # the broker in the same pod may bind its port after the sidecar's first tries
    assert config.event_log_options()["refused_timeout_ms"] >= 30_000
    writable = {m["mountPath"] for m in sidecar["volumeMounts"] if not m.get("readOnly")}
    assert str(config.data_dir) in writable

    secret = resources()["Secret"]
    refs = [e["secretRef"]["name"] for e in sidecar["envFrom"]]
    assert refs == [secret["metadata"]["name"]]
    assert set(secret["stringData"]) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    # the broker id comes from the log dir's meta.properties, never from the pod
    assert not any("BROKER_ID" in e["name"] for e in sidecar.get("env", []))
    assert not config.broker_id_configured
    assert resources()["StatefulSet"]["spec"]["replicas"] == 3  # a sidecar per broker


def test_manifests_match_kubernetes_schemas() -> None:
    match_kubernetes_schemas(resources())


def match_kubernetes_schemas(docs: dict[str, dict[str, Any]]) -> None:
    """Each object against Kubernetes' own schemas (kubernetes-validate, offline)."""
    kv = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate (offline schemas) not installed"
    )
    version = kv.latest_version()
    for kind, doc in docs.items():
        try:
            kv.validate(doc, version, strict=True)
        except kv.ValidationError as e:
            pytest.fail(f"{kind} does not match Kubernetes {version}: {e}")


def unit_lines() -> dict[str, str]:
    out = {}
    for line in UNIT.read_text().splitlines():
        if line and not line.startswith(("#", "[")) and "=" in line:
            key, _, value = line.partition("=")
            assert key not in out, f"{key} twice"
            out[key] = value
    return out


def test_systemd_unit_runs_the_same_sidecar() -> None:
    unit = unit_lines()
    argv = shlex.split(unit["ExecStart"])
    assert Path(argv[0]).name == "rlmm" and argv[1] == "offload"
    args = flags(argv[2:])
    assert set(args) <= offload_options()
    k8s = flags(container(SIDECAR)["args"])
    for flag in ("--metrics-port", "--metrics-host", "--log-dir"):
        assert args[flag] == k8s[flag], flag
    assert args["--log-dir"].startswith(unit["ReadOnlyPaths"])
    assert unit["KillSignal"] == "SIGTERM" and int(unit["TimeoutStopSec"]) >= 60
    assert unit["ProtectSystem"] == "strict" and unit["StateDirectory"] == "rlmm"


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    """The unit as written, but for its ExecStart binary (this venv's rlmm)."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze not on PATH")
    rlmm = shutil.which("rlmm") or str(Path(__import__("sys").executable).parent / "rlmm")
    copy = tmp_path / UNIT.name
    copy.write_text(UNIT.read_text().replace("/opt/rlmm/venv/bin/rlmm", rlmm))
    done = subprocess.run(
        [analyze, "verify", str(copy)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
