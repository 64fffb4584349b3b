"""deploy/k8s/spark-consume.yaml (a SparkApplication) and docker/spark/Dockerfile, checked
against the code as tests/unit/test_k8s.py checks the Deployments: the variables are settings,
the ConfigMap's config loads with the Secret's files, secrets are files and never Spark conf,
the CLI accepts the arguments, and the main file is where the image puts it."""

from __future__ import annotations

import pathlib
import re

import yaml
from click.testing import CliRunner

from cachesync.runtime import config
from cachesync.commands.consume import command as consume
from cachesync.consumer.spark.submit import check_conf

ROOT = pathlib.Path(__file__).resolve().parents[2]
[APP] = [d for d in yaml.safe_load_all((ROOT / "deploy/k8s/spark-consume.yaml").read_text()) if d]
K8S = [d for p in sorted((ROOT / "deploy" / "k8s").glob("*.yaml"))
       for d in yaml.safe_load_all(p.read_text()) if d]
[CONFIGMAP] = [d for d in K8S if d["kind"] == "ConfigMap"]
[SECRET] = [d for d in K8S if d["kind"] == "Secret"]
SETTINGS = {f"{config.ENV_PREFIX}{section.upper()}_{f.name.upper()}"
            for section, cls in config.SECTIONS.items() for f in config.dataclasses.fields(cls)}
DOCKERFILE = (ROOT / "docker" / "spark" / "Dockerfile").read_text()


def mounts(role: str) -> dict[str, dict]:
    volumes = {v["name"]: v for v in APP["spec"]["volumes"]}
    return {m["mountPath"]: volumes[m["name"]] for m in APP["spec"][role]["volumeMounts"]}


def mounted_key(role: str, path: str, kind: str) -> str:
    directory, _, key = path.rpartition("/")
    volume = mounts(role).get(directory)
    assert volume is not None and kind in volume, f"{role}: {path} is not in a {kind} mount"
    return key


def driver_env() -> dict[str, str]:
    return {e["name"]: e["value"] for e in APP["spec"]["driver"]["env"]}


def test_it_is_a_python_spark_application_of_the_image_with_a_restart_policy():
    spec = APP["spec"]
    assert APP["kind"] == "SparkApplication" and spec["type"] == "Python"
    assert spec["sparkVersion"] == "4.0.0" and spec["mode"] == "cluster"
    assert spec["restartPolicy"]["type"] == "Always"
    main = spec["mainApplicationFile"].removeprefix("local://")
    assert main == "/opt/cachesync/spark_main.py" and main in DOCKERFILE


def test_variables_are_settings_and_secrets_are_mounted_files_on_driver_and_executors():
    for key, value in driver_env().items():
        if key == "CACHESYNC_CONFIG":
            assert mounted_key("driver", value, "configMap") in CONFIGMAP["data"]
        elif key.endswith("_FILE"):
            assert key.removesuffix("_FILE") in SETTINGS, key
            assert mounted_key("driver", value, "secret") in SECRET["stringData"], key
            mounted_key("executor", value, "secret")        # the same files on the executors
        else:
            assert key in SETTINGS, key
    check_conf(tuple(APP["spec"]["sparkConf"].items()))  # no secret in Spark conf


def test_the_configmap_loads_with_the_secret_files_and_the_cli_accepts_the_arguments(tmp_path):
    cfg = tmp_path / "cachesync.yaml"
    cfg.write_text(CONFIGMAP["data"][mounted_key("driver", driver_env()["CACHESYNC_CONFIG"],
                                                 "configMap")])
    environ = {}
    for key, value in driver_env().items():
        if key.endswith("_FILE"):
            secret = tmp_path / mounted_key("driver", value, "secret")
            secret.write_text(SECRET["stringData"][secret.name])
            environ[key] = str(secret)
        elif key != "CACHESYNC_CONFIG":
            environ[key] = value
    s = config.load(cfg, environ)
    for path in (s.mysql.ssl_ca, s.kafka.ssl_cafile):     # the executors' Python reads them too
        assert mounted_key("executor", path, "secret") in SECRET["stringData"]
    args = APP["spec"]["arguments"]
    assert args[:3] == ["consume", "--engine", "spark"]
    ctx = consume.make_context("consume", [*args[1:], "--config", str(cfg)])
    assert ctx.params["checkpoint_location"] in mounts("driver")
    assert "persistentVolumeClaim" in mounts("driver")[ctx.params["checkpoint_location"]]
    assert ctx.params["trigger"] == 0.5


def test_the_spark_image_has_python_3_11_spark_4_and_the_jars():
    assert re.search(r"^FROM python:3\.11-slim", DOCKERFILE, re.M)
    assert "apache/spark:4.0.0" in DOCKERFILE and "openjdk-17-jre-headless" in DOCKERFILE
    assert "COPY devstack/spark/pom.xml" in DOCKERFILE and "/opt/spark/jars/" in DOCKERFILE
    assert 'ENTRYPOINT ["/opt/entrypoint.sh"]' in DOCKERFILE
    help_text = CliRunner().invoke(consume, ["--help"]).output
    assert "availableNow" in help_text
