"""No cluster runs here, so deploy/k8s/*.yaml and the Dockerfile are checked against the code,
as tests/unit/test_compose.py checks docker-compose.yml: every variable a manifest sets is a
setting, the ConfigMap's config loads with the Secret's files, probes ask the port the
process listens on, and the pods run as the image's non-root user."""

from __future__ import annotations

import pathlib
import re
import threading

import pytest
import yaml
from prometheus_client import CollectorRegistry

from cachesync import DISTRIBUTION, __version__
from cachesync.runtime import config
from cachesync.healthcheck import check, ports
from cachesync.http import OpsServer, parse_listen

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = [d for p in sorted((ROOT / "deploy" / "k8s").glob("*.yaml"))
        for d in yaml.safe_load_all(p.read_text()) if d]
DEPLOYMENTS = {d["metadata"]["name"]: d for d in DOCS if d["kind"] == "Deployment"}
[CONFIGMAP] = [d for d in DOCS if d["kind"] == "ConfigMap"]
[SECRET] = [d for d in DOCS if d["kind"] == "Secret"]
SETTINGS = {f"{config.ENV_PREFIX}{section.upper()}_{f.name.upper()}"
            for section, cls in config.SECTIONS.items() for f in config.dataclasses.fields(cls)}


def container(name: str) -> dict:
    [c] = DEPLOYMENTS[name]["spec"]["template"]["spec"]["containers"]
    return c


def env(name: str) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container(name)["env"]}


def mounts(name: str) -> dict[str, dict]:
    """mountPath -> the volume mounted there."""
    volumes = {v["name"]: v for v in DEPLOYMENTS[name]["spec"]["template"]["spec"]["volumes"]}
    return {m["mountPath"]: volumes[m["name"]] for m in container(name)["volumeMounts"]}


def mounted_key(name: str, path: str, kind: str) -> str:
    """The key of the ``kind`` volume (configMap/secret) that ``path`` is; fails otherwise."""
    directory, _, key = path.rpartition("/")
    volume = mounts(name).get(directory)
    assert volume is not None and kind in volume, f"{name}: {path} is not in a {kind} mount"
    return key


def test_the_deployments_are_there():
    assert set(DEPLOYMENTS) == {"cachesync-tail", "cachesync-consume"}
    assert DEPLOYMENTS["cachesync-tail"]["spec"]["replicas"] >= 2      # active + standby
    assert DEPLOYMENTS["cachesync-tail"]["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_every_variable_is_a_setting_and_secrets_come_from_files(name):
    for key, value in env(name).items():
        if key == "CACHESYNC_CONFIG":
            assert mounted_key(name, value, "configMap") in CONFIGMAP["data"]
        elif key.endswith("_FILE"):
            assert key.removesuffix("_FILE") in SETTINGS, key
            assert mounted_key(name, value, "secret") in SECRET["stringData"], key
        else:
            assert key in SETTINGS, key
        assert not re.search(r"PASSWORD$|_URL$", key), f"{name}: {key} holds a secret in env"


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_the_configmap_loads_with_the_secret_files_and_probes_ask_the_listen_port(name, tmp_path):
    cfg = tmp_path / "cachesync.yaml"
    cfg.write_text(CONFIGMAP["data"][mounted_key(name, env(name)["CACHESYNC_CONFIG"],
                                                 "configMap")])
    environ = {}
    for key, value in env(name).items():
        if key.endswith("_FILE"):
            secret = tmp_path / mounted_key(name, value, "secret")
            secret.write_text(SECRET["stringData"][secret.name])
            environ[key] = str(secret)
        elif key != "CACHESYNC_CONFIG":
            environ[key] = value
    s = config.load(cfg, environ)
    for path in (s.mysql.ssl_ca, s.kafka.ssl_cafile):     # CA files named by the config
        assert mounted_key(name, path, "secret") in SECRET["stringData"]
    c = container(name)
    role = c["args"][0]
    host, port = parse_listen(s.metrics.listen, role)
    assert host == "0.0.0.0", f"{name}: the kubelet probes the pod IP, not its loopback"
    assert [p["containerPort"] for p in c["ports"]] == [port]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port}
    annotations = DEPLOYMENTS[name]["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(port)


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_pods_run_as_the_images_non_root_user(name):
    pod = DEPLOYMENTS[name]["spec"]["template"]["spec"]["securityContext"]
    user = re.search(r"^USER (\d+)", (ROOT / "Dockerfile").read_text(), re.M)
    assert user and pod["runAsNonRoot"] and pod["runAsUser"] == int(user.group(1)) != 0
    assert pod["fsGroup"] == pod["runAsGroup"]             # the secret files are group-readable
    c = container(name)["securityContext"]
    assert c["allowPrivilegeEscalation"] is False and c["readOnlyRootFilesystem"] is True


def test_the_dockerfile_has_a_healthcheck_that_runs():
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r'HEALTHCHECK .*\n?.*"cachesync\.healthcheck", "/healthz"', text)
    assert "useradd --system --uid 10001" in text


def test_the_image_gets_the_compiled_hot_paths_and_no_compiler():
    """No Docker engine here: the two stages are checked as text. The build stage has a C
    compiler and refuses a cachesync wheel without the extension (a pure-Python wheel is
    py3-none-any, a compiled one cp311); the image installs those wheels, checks that the
    compiled functions are the ones in use, and installs no compiler itself."""
    build, image = re.split(r"^FROM python:3\.11-slim", (ROOT / "Dockerfile").read_text(),
                            flags=re.M)[1:]
    assert build.startswith(" AS build") and re.search(r"apt-get install .*\bgcc\b", build)
    assert 'pip wheel --no-cache-dir --wheel-dir /wheels ".[sidecar,aws]"' in build
    assert "ls /wheels/cachesync_mysql-*-cp311-*.whl" in build
    assert "--mount=type=bind,from=build,source=/wheels,target=/wheels" in image
    assert '--no-index --find-links /wheels "cachesync-mysql[sidecar,aws]"' in image
    assert "event.ACCELERATED and partition.ACCELERATED" in image
    assert "gcc" not in image and "apt-get" not in image


# extras the image leaves out: pyspark is the Spark cluster's runtime (spark-submit ships
# cachesync to it), not the sidecar's
NOT_IN_THE_IMAGE = {"spark"}


def test_the_image_installs_every_extra_the_sidecar_asks_for():
    """Every extra that a message of the code tells the operator to install
    (``install_hint("sidecar,aws")``: botocore for Amazon MSK with IAM) is in both stages'
    install lines, which name the same extras, and the image imports what the aws extra
    brings."""
    sources = [p for d in ("cachesync", "consumer", "producer_outbox", "schema")
               for p in (ROOT / d).rglob("*.py")]
    asked = {extra for p in sources
             for group in re.findall(r"install_hint\([\"']([a-z_,]+)[\"']\)", p.read_text())
             for extra in group.split(",") if "{" not in extra}
    assert {"sidecar", "aws"} <= asked
    text = (ROOT / "Dockerfile").read_text()
    build = re.search(r'pip wheel [^\n]*"\.\[([a-z,]+)\]"', text)
    image = re.search(rf'pip install [^\n]*"{DISTRIBUTION}\[([a-z,]+)\]"', text)
    assert build and image
    assert set(build.group(1).split(",")) == set(image.group(1).split(",")) \
        == asked - NOT_IN_THE_IMAGE
    assert 'python -c "import botocore.session"' in text


IMAGE = "ghcr.io/cachesync/cachesync"


def test_manifests_and_chart_default_to_the_released_image_of_this_version():
    """The raw manifests, the Spark application and the chart name the image the release
    workflow pushes, at the chart's appVersion, which is the package's version."""
    chart = yaml.safe_load((ROOT / "deploy" / "helm" / "cachesync" / "Chart.yaml").read_text())
    values = yaml.safe_load((ROOT / "deploy" / "helm" / "cachesync" / "values.yaml").read_text())
    assert chart["appVersion"] == chart["version"] == __version__
    assert values["image"]["repository"] == IMAGE and values["image"]["tag"] == ""
    assert {container(name)["image"] for name in DEPLOYMENTS} == {f"{IMAGE}:{__version__}"}
    [spark] = [d for d in DOCS if d["kind"] == "SparkApplication"]
    assert spark["spec"]["image"] == f"{IMAGE}-spark:{__version__}"
    # the release workflow pushes both, to ghcr.io under the repository's owner (cachesync)
    workflow = (ROOT / ".github" / "workflows" / "release.yml").read_text()
    owner = "ghcr.io/${{ steps.names.outputs.owner }}"
    assert f"{owner}/cachesync:${{{{ env.VERSION }}}}" in workflow
    assert f"{owner}/cachesync-spark:${{{{ env.VERSION }}}}" in workflow


def test_the_example_secret_holds_no_real_value():
    for key, value in SECRET["stringData"].items():
        assert "change-me" in value or "(your" in value, key


@pytest.mark.parametrize("listen, expected", [
    (None, [9464, 9465, 9466, 9467]), ("auto", [9464, 9465, 9466, 9467]), ("0.0.0.0:9465", [9465]),
    ("[::]:9464", [9464]), ("off", []),
])
def test_healthcheck_ports(listen, expected):
    assert ports(listen) == expected


def test_healthcheck_asks_the_real_endpoint():
    ready = threading.Event()
    server = OpsServer(("127.0.0.1", 0), CollectorRegistry(),
                       [lambda: None if ready.is_set() else "not yet"]).start()
    try:
        listen = server.address
        assert check("/healthz", listen) is None
        assert "HTTP 503" in check("/readyz", listen)
        ready.set()
        assert check("/readyz", listen) is None
    finally:
        server.close()
