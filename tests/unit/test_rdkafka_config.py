"""Which Kafka client publishes (kafka.client), and kafka-python's producer options mapped
onto librdkafka's properties (producer_outbox/publish/rdkafka_publisher.py). The publishers
themselves run on the broker in tests/contract/test_producer_ports.py and
tests/integration/test_publishers.py."""

from __future__ import annotations

import builtins

import pytest

from cachesync.producer_outbox.publish import rdkafka_publisher as rd
from cachesync.producer_outbox.publish.rdkafka_publisher import Unmappable, choose, librdkafka_config
from cachesync.schema.errors import ConfigError


def test_cachesyncs_own_guarantees_are_always_set():
    out = librdkafka_config({})
    assert out["acks"] == "all" and out["enable.idempotence"] is True
    assert out["max.in.flight.requests.per.connection"] == 5
    # Kafka's default partitioner for keyed records, as kafka-python and the Java client
    assert out["partitioner"] == "murmur2_random"
    assert out["message.max.bytes"] == 1_048_576


def test_security_and_tunables_map_by_name_and_none_is_left_out():
    out = librdkafka_config({"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                             "sasl_plain_username": "u", "sasl_plain_password": "p",
                             "ssl_cafile": "/ca.pem", "ssl_certfile": None,
                             "ssl_check_hostname": False, "compression_type": "zstd",
                             "linger_ms": 7, "delivery_timeout_ms": 9000,
                             "max_request_size": 2_000_000, "metrics_enabled": False})
    assert out["security.protocol"] == "SASL_SSL"
    assert (out["sasl.mechanism"], out["sasl.username"], out["sasl.password"]) == \
        ("SCRAM-SHA-512", "u", "p")
    assert out["ssl.ca.location"] == "/ca.pem" and "ssl.certificate.location" not in out
    assert out["ssl.endpoint.identification.algorithm"] == "none"
    assert (out["compression.type"], out["linger.ms"], out["message.timeout.ms"]) == \
        ("zstd", 7, 9000)
    assert out["message.max.bytes"] == 2_000_000
    assert librdkafka_config({"ssl_check_hostname": True})[
        "ssl.endpoint.identification.algorithm"] == "https"
    assert librdkafka_config({"compression_type": None})["compression.type"] == "none"


@pytest.mark.parametrize("options,named", [
    ({"sasl_mechanism": "OAUTHBEARER"}, "OAUTHBEARER"),
    ({"sasl_mechanism": "AWS_MSK_IAM"}, "AWS_MSK_IAM"),
    ({"partitioner": "x"}, "partitioner"),
])
def test_an_option_without_a_librdkafka_twin_is_named(options, named):
    with pytest.raises(Unmappable, match=named):
        librdkafka_config(options)


def test_auto_takes_librdkafka_where_it_maps_else_says_why_it_fell_back():
    assert choose("auto", {"security_protocol": "PLAINTEXT"})[0] == "librdkafka"
    chosen, why = choose("auto", {"sasl_mechanism": "OAUTHBEARER"})
    assert chosen == "kafka-python" and "OAUTHBEARER" in why
    assert choose("kafka-python", {}) == ("kafka-python", "kafka.client is kafka-python")


def test_librdkafka_asked_for_where_it_cannot_be_used_is_a_config_error():
    with pytest.raises(ConfigError, match="kafka.client librdkafka: .*AWS_MSK_IAM"):
        choose("librdkafka", {"sasl_mechanism": "AWS_MSK_IAM"})
    with pytest.raises(ConfigError, match="kafka.client: expected one of"):
        choose("rdkafka", {})


def test_without_confluent_kafka_auto_falls_back_to_kafka_python(monkeypatch):
    real_import = builtins.__import__

    def no_confluent(name, *args, **kwargs):
        if name == "confluent_kafka":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_confluent)
    assert choose("auto", {}) == ("kafka-python", "confluent-kafka is not installed")
    with pytest.raises(ConfigError, match="confluent-kafka is not installed"):
        rd.choose("librdkafka", {})
