"""Every shipped configuration (the example, the compose file's, the Kubernetes ConfigMap's)
loads, passes lint (offline) and stays within the documented safe ranges."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from cachesync.runtime import config
from cachesync.doctor import unsafe_settings
from cachesync.explain import lint

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _compose_configs():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    for name, service in compose["services"].items():
        env = service.get("environment") or {}
        env = dict(e.split("=", 1) for e in env) if isinstance(env, list) else env
        path = env.get("CACHESYNC_CONFIG")
        if path:
            local = ROOT / path.replace("/app/", "", 1)
            yield f"compose:{name}", local, {k: str(v) for k, v in env.items()
                                             if k.startswith("CACHESYNC_") and not k.endswith("_FILE")}


def _k8s_config(tmp_path):
    docs = [d for p in (ROOT / "deploy" / "k8s").glob("*.yaml")
            for d in yaml.safe_load_all(p.read_text()) if d]
    [cm] = [d for d in docs if d["kind"] == "ConfigMap"]
    path = tmp_path / "k8s.yaml"
    path.write_text(cm["data"]["cachesync.yaml"])
    return path


def _cases(tmp_path):
    yield "examples/demo.yaml", ROOT / "cachesync" / "examples" / "demo.yaml", {}
    yield from _compose_configs()
    # the Secret's values come from files in the pod; any value stands for them here
    yield "k8s configmap", _k8s_config(tmp_path), {"CACHESYNC_KAFKA_SASL_USERNAME": "u",
                                                   "CACHESYNC_KAFKA_SASL_PASSWORD": "p"}


def test_every_shipped_config_loads_lints_clean_and_is_safe(tmp_path):
    seen = []
    for name, path, env in _cases(tmp_path):
        settings = config.load(path, env)
        assert lint(settings.tables) == [], name
        assert unsafe_settings(settings) == [], name
        seen.append(name)
    assert any(n.startswith("compose:") for n in seen)


@pytest.mark.parametrize("consumer, kafka, problem", [
    ({"claim_lease_s": 30}, {}, "claim_lease_s"),
    ({"dedup_retention_s": 86400}, {"topic_retention_s": 604800}, "dedup_retention_s"),
])
def test_unsafe_settings_are_named(tmp_path, consumer, kafka, problem):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"consumer": consumer, "kafka": kafka,
                                    "tables": {"a.b": {"keys": ["b:{id}"]}}}))
    [found] = unsafe_settings(config.load(path, {}))
    assert problem in found
