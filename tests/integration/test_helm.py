"""The Helm chart (deploy/helm/cachesync) passes ``helm lint``, and what ``helm template``
renders is checked against the code like the raw manifests (tests/unit/test_k8s.py): every
variable is a setting or its _FILE form pointing into the existing Secret's mount, the
ConfigMap loads through the config loader with those files, probes, Services, the
ServiceMonitor and the PodDisruptionBudgets find the ports and pods they name, and no pod gets
Kubernetes' service-link variables. helm is built from its Go module once and cached
(devstack/tools/helm.sh); no cluster is needed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from cachesync import __version__
from cachesync.runtime import config
from cachesync.http import parse_listen
from cachesync.schema.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "cachesync"
EXAMPLE_SECRET = yaml.safe_load((ROOT / "deploy" / "k8s" / "secret.example.yaml").read_text())
SETTINGS = {f"{config.ENV_PREFIX}{section.upper()}_{f.name.upper()}"
            for section, cls in config.SECTIONS.items() for f in config.dataclasses.fields(cls)}
ALL_ROLES = ["--set", "roles.relay.enabled=true", "--set", "roles.monitor.enabled=true",
             "--set", "config.relay.outbox_db=app", "--set", "serviceMonitor.enabled=true"]


@pytest.fixture(scope="module")
def helm() -> str:
    done = subprocess.run([str(ROOT / "devstack" / "tools" / "helm.sh")], capture_output=True,
                          text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def _template(helm: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([helm, "template", "cs", str(CHART), *args], capture_output=True,
                          text=True, timeout=120)


def _rendered(helm: str, *args: str) -> dict[str, list[dict]]:
    done = _template(helm, *args)
    assert done.returncode == 0, done.stderr
    kinds: dict[str, list[dict]] = {}
    for doc in yaml.safe_load_all(done.stdout):
        if doc:
            kinds.setdefault(doc["kind"], []).append(doc)
    return kinds


def test_helm_lint(helm):
    for extra in ([], ALL_ROLES):
        done = subprocess.run([helm, "lint", "--strict", str(CHART), *extra],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr


def test_every_role_renders_with_its_service_pdb_and_no_service_links(helm, tmp_path):
    kinds = _rendered(helm, *ALL_ROLES)
    deployments = {d["metadata"]["labels"]["app.kubernetes.io/component"]: d
                   for d in kinds["Deployment"]}
    assert set(deployments) == {"tail", "consume", "relay", "monitor"}
    assert deployments["tail"]["spec"]["replicas"] >= 2       # active + hot standby
    assert deployments["tail"]["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    [configmap] = kinds["ConfigMap"]
    services = {s["metadata"]["labels"]["app.kubernetes.io/component"]: s for s in kinds["Service"]}
    pdbs = {p["metadata"]["labels"]["app.kubernetes.io/component"]: p
            for p in kinds["PodDisruptionBudget"]}
    [monitor] = kinds["ServiceMonitor"]
    for role, d in deployments.items():
        pod = d["spec"]["template"]["spec"]
        assert pod["enableServiceLinks"] is False, role
        assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] == 10001
        [c] = pod["containers"]
        assert c["args"][0] == role
        # the image the release workflow pushes, at the chart's appVersion
        assert c["image"] == f"ghcr.io/cachesync/cachesync:{__version__}", c["image"]
        port = _check_env_and_config(c, pod, configmap, role, tmp_path / role)
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port}
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port}
        labels = d["spec"]["template"]["metadata"]["labels"]
        assert services[role]["spec"]["selector"] == labels
        assert services[role]["spec"]["ports"][0]["port"] == port
        assert pdbs[role]["spec"]["selector"]["matchLabels"] == labels
        svc_labels = services[role]["metadata"]["labels"]
        assert all(svc_labels.get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"


def _check_env_and_config(c: dict, pod: dict, configmap: dict, role: str, tmp: Path) -> int:
    """Every variable is a setting; secrets are files of the existing Secret; the config loads."""
    tmp.mkdir()
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in c["volumeMounts"]}
    assert mounts["/run/secrets/cachesync"]["secret"]["secretName"] == "cachesync-secrets"
    environ, cfg = {}, None
    for e in c["env"]:
        key, value = e["name"], e["value"]
        if key == "CACHESYNC_CONFIG":
            directory, _, name = value.rpartition("/")
            assert "configMap" in mounts[directory]
            cfg = tmp / name
            cfg.write_text(configmap["data"][name])
        elif key.endswith("_FILE"):
            assert key.removesuffix("_FILE") in SETTINGS, key
            directory, _, name = value.rpartition("/")
            assert "secret" in mounts[directory] and name in EXAMPLE_SECRET["stringData"], key
            (tmp / name).write_text(EXAMPLE_SECRET["stringData"][name])
            environ[key] = str(tmp / name)
        else:
            assert key in SETTINGS and not key.endswith("PASSWORD"), key
            environ[key] = value
    s = config.load(cfg, environ)
    host, port = parse_listen(s.metrics.listen, role)
    assert host == "0.0.0.0" and [p["containerPort"] for p in c["ports"]] == [port]
    return port


@pytest.mark.parametrize("args, message", [
    (["--set", "existingSecret="], "existingSecret"),
    (["--set", "roles.relay.enabled=true"], "config.relay.outbox_db"),
])
def test_missing_required_values_fail_with_a_message(helm, args, message):
    done = _template(helm, *args)
    assert done.returncode != 0 and message in done.stderr


def test_a_config_value_the_loader_refuses_is_caught(helm, tmp_path):
    kinds = _rendered(helm, "--set", "config.mysql.port=99999")
    with pytest.raises(ConfigError, match="mysql.port"):
        cfg = tmp_path / "c.yaml"
        cfg.write_text(kinds["ConfigMap"][0]["data"]["cachesync.yaml"])
        config.load(cfg, {})
