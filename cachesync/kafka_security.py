"""The security options of every Kafka client, from the ``kafka`` settings section.

One place turns ``kafka.security_protocol``, ``kafka.sasl_*`` and ``kafka.ssl_*`` into
kafka-python keyword arguments (consumers, producers, admin clients) and into Spark's
``kafka.*`` source options, so no client can reach the broker differently from another.
The results hold the SASL password: pass them on, never log them.
"""

from __future__ import annotations

from cachesync.config import KafkaSettings, Secret
from cachesync.schema.errors import ConfigError

_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def client_security(k: KafkaSettings) -> dict:
    """kafka-python keyword arguments for ``k``'s protocol, TLS files and SASL login."""
    out: dict = {"security_protocol": k.security_protocol}
    if k.security_protocol in ("SSL", "SASL_SSL"):
        out.update(ssl_check_hostname=k.ssl_check_hostname, ssl_cafile=k.ssl_cafile or None,
                   ssl_certfile=k.ssl_certfile or None, ssl_keyfile=k.ssl_keyfile or None)
    if k.security_protocol.startswith("SASL_"):
        out.update(sasl_mechanism=k.sasl_mechanism, sasl_plain_username=k.sasl_username,
                   sasl_plain_password=str(k.sasl_password))
    return out


def producer_options(k: KafkaSettings) -> dict:
    """Every producer's keyword arguments from ``k``: security, ``kafka.compression_type``
    and ``kafka.producer_properties``; raises ConfigError for a property kafka-python lacks."""
    from kafka import KafkaProducer
    compression = None if k.compression_type == "none" else k.compression_type
    return {**_known(k.producer_properties, KafkaProducer.DEFAULT_CONFIG, "producer"),
            "compression_type": compression, **client_security(k)}


def consumer_options(k: KafkaSettings) -> dict:
    """Every consumer's keyword arguments: security and ``kafka.consumer_properties``."""
    from kafka import KafkaConsumer
    return {**_known(k.consumer_properties, KafkaConsumer.DEFAULT_CONFIG, "consumer"),
            **client_security(k)}


def admin_options(k: KafkaSettings) -> dict:
    """Every admin client's keyword arguments: security and ``kafka.admin_properties``."""
    from kafka import KafkaAdminClient
    return {**_known(k.admin_properties, KafkaAdminClient.DEFAULT_CONFIG, "admin"),
            **client_security(k)}


def _known(properties, defaults, client: str) -> dict:
    unknown = sorted(set(properties) - set(defaults))
    if unknown:
        raise ConfigError(f"kafka.{client}_properties: kafka-python's {client} has no "
                          f"propert{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)}")
    return dict(properties)


def spark_kafka_options(k: KafkaSettings) -> dict[str, str]:
    """Spark's ``kafka.*`` source options for ``k`` (the JVM client reads the PEM CA itself).

    Raises ConfigError for a client certificate: the Spark engine does not take one yet.
    """
    out = {"kafka.security.protocol": k.security_protocol}
    if k.security_protocol in ("SSL", "SASL_SSL"):
        if k.ssl_certfile:
            raise ConfigError("kafka.ssl_certfile: client certificates are not supported by "
                              "the Spark engine yet (use the python engine or SASL)")
        if k.ssl_cafile:
            out.update({"kafka.ssl.truststore.type": "PEM",
                        "kafka.ssl.truststore.location": k.ssl_cafile})
        if not k.ssl_check_hostname:
            out["kafka.ssl.endpoint.identification.algorithm"] = ""
    if k.security_protocol.startswith("SASL_"):
        out.update({"kafka.sasl.mechanism": k.sasl_mechanism,
                    # a Secret: a logged or printed options dict masks the password
                    "kafka.sasl.jaas.config": Secret(_jaas(k))})
    return out


def _jaas(k: KafkaSettings) -> str:
    """The JAAS login line; quotes and backslashes in the credentials are escaped."""
    def quoted(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return (f"{_JAAS_MODULES[k.sasl_mechanism]} required username={quoted(k.sasl_username)} "
            f"password={quoted(str(k.sasl_password))};")
