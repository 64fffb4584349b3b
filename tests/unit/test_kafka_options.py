"""kafka.compression_type and the client property pass-through: what reaches each client,
and what is refused by name."""

import pickle

import pytest

from cachesync.runtime.config import KafkaSettings, Properties, load
from cachesync.runtime.kafka_security import (BOOTSTRAP_TIMEOUT_MS, admin_options, client_options,
                                              consumer_options, producer_options)
from cachesync.schema.errors import ConfigError


def test_compression_and_producer_properties_reach_the_producer():
    k = KafkaSettings(compression_type="lz4",
                      producer_properties=Properties({"linger.ms": 20, "batch_size": 65536}))
    assert producer_options(k) == {"linger_ms": 20, "batch_size": 65536,
                                   "compression_type": "lz4", "security_protocol": "PLAINTEXT",
                                   "bootstrap_timeout_ms": BOOTSTRAP_TIMEOUT_MS}
    assert producer_options(KafkaSettings(compression_type="none"))["compression_type"] is None
    assert producer_options(KafkaSettings())["compression_type"] == "lz4"


def test_consumer_and_admin_properties_reach_their_clients_only():
    k = KafkaSettings(consumer_properties=Properties({"fetch_max_wait_ms": 100}),
                      admin_properties=Properties({"request_timeout_ms": 5000}))
    assert consumer_options(k) == {"fetch_max_wait_ms": 100, "security_protocol": "PLAINTEXT",
                                   "bootstrap_timeout_ms": BOOTSTRAP_TIMEOUT_MS}
    assert admin_options(k) == {"request_timeout_ms": 5000, "security_protocol": "PLAINTEXT",
                                "bootstrap_timeout_ms": BOOTSTRAP_TIMEOUT_MS}
    assert "fetch_max_wait_ms" not in producer_options(k)


def test_a_bootstrap_timeout_among_the_properties_wins_over_cachesyncs():
    k = KafkaSettings(consumer_properties=Properties({"bootstrap_timeout_ms": 45_000}))
    assert consumer_options(k)["bootstrap_timeout_ms"] == 45_000
    assert producer_options(k)["bootstrap_timeout_ms"] == BOOTSTRAP_TIMEOUT_MS < 30_000
    assert client_options(k) == {"bootstrap_timeout_ms": BOOTSTRAP_TIMEOUT_MS,
                                 "security_protocol": "PLAINTEXT"}


@pytest.mark.parametrize("field, props, message", [
    ("producer_properties", {"acks": 1}, "acks is set by cachesync (acks=all (at-least-once))"),
    ("producer_properties", {"enable.idempotence": False}, "enable_idempotence is set by cachesync"),
    ("producer_properties", {"compression_type": "gzip"},
     "compression_type is set by cachesync (kafka.compression_type)"),
    ("consumer_properties", {"enable_auto_commit": True}, "enable_auto_commit is set by cachesync"),
    ("consumer_properties", {"session.timeout.ms": 1}, "(kafka.session_timeout_ms)"),
    ("admin_properties", {"sasl_plain_password": "x"}, "(kafka.sasl_password)"),
    ("consumer_properties", {"Fetch-Max": 1}, "expected kafka-python property names"),
    ("consumer_properties", {"fetch_max_wait_ms": [1]}, "expected a string, number or boolean"),
])
def test_owned_properties_are_refused_by_name_at_load(tmp_path, field, props, message):
    path = tmp_path / "c.yaml"
    path.write_text("tables: {shop.users: {keys: ['user:{id}']}}\n")
    import json
    with pytest.raises(ConfigError, match=r"environment CACHESYNC_KAFKA_" + field.upper()) as info:
        load(path, {f"CACHESYNC_KAFKA_{field.upper()}": json.dumps(props)})
    assert message in str(info.value)


def test_a_property_kafka_python_lacks_is_a_configuration_error():
    k = KafkaSettings(consumer_properties=Properties({"fetch_max_wiat_ms": 1}))
    with pytest.raises(ConfigError, match="kafka.consumer_properties: kafka-python's consumer "
                                          "has no property fetch_max_wiat_ms"):
        consumer_options(k)


def test_properties_from_yaml_and_settings_stay_read_only_and_picklable(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("kafka: {producer_properties: {linger.ms: 50}}\n"
                    "tables: {shop.users: {keys: ['user:{id}']}}\n")
    k = load(path, {}).kafka
    assert k.producer_properties == {"linger_ms": 50}
    with pytest.raises(TypeError):
        k.producer_properties["acks"] = 0
    assert pickle.loads(pickle.dumps(k)) == k and hash(k) == hash(pickle.loads(pickle.dumps(k)))
