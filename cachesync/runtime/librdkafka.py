"""kafka-python's client options as librdkafka's properties, for the clients that run on
librdkafka (the confluent-kafka package) where ``kafka.client`` lets them.

Every Kafka option cachesync builds (``cachesync.runtime.kafka_security``: security,
compression, the pass-through properties) is in kafka-python's names; :func:`translate`
maps the ones with a librdkafka twin and raises :class:`Unmappable` naming the first that
has none, so that ``kafka.client: auto`` falls back to kafka-python rather than connect
differently. A result may hold the SASL password: never log it.
"""

from __future__ import annotations

import logging
import os
from typing import Mapping

from cachesync import NO_SPEEDUPS
from cachesync.schema.errors import ConfigError

CLIENTS = ("auto", "librdkafka", "kafka-python")

# kafka-python option -> librdkafka property, for every client (values taken as they are)
COMMON = {"security_protocol": "security.protocol", "sasl_mechanism": "sasl.mechanism",
          "sasl_plain_username": "sasl.username", "sasl_plain_password": "sasl.password",
          "ssl_cafile": "ssl.ca.location", "ssl_certfile": "ssl.certificate.location",
          "ssl_keyfile": "ssl.key.location", "ssl_password": "ssl.key.password",
          "client_id": "client.id", "request_timeout_ms": "request.timeout.ms",
          "retry_backoff_ms": "retry.backoff.ms", "reconnect_backoff_ms": "reconnect.backoff.ms",
          "reconnect_backoff_max_ms": "reconnect.backoff.max.ms",
          "connections_max_idle_ms": "connections.max.idle.ms",
          "metadata_max_age_ms": "metadata.max.age.ms",
          "receive_buffer_bytes": "socket.receive.buffer.bytes",
          "send_buffer_bytes": "socket.send.buffer.bytes"}
# options that change nothing on the wire (kafka-python's own sensors), or that librdkafka's
# clients here bound their own way (the wait for a first broker at start: rdkafka_publisher's
# CONNECT_TIMEOUT_S, rdkafka_source's METADATA_TIMEOUT_S)
IGNORED = {"metrics_enabled", "bootstrap_timeout_ms"}
LOGINS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class Unmappable(ValueError):
    """An option librdkafka has no twin for: kafka-python must be the client."""


def translate(options: Mapping, names: Mapping[str, str]) -> dict:
    """librdkafka's properties for kafka-python ``options``: COMMON's and ``names``' by name,
    ``ssl_check_hostname`` as the endpoint check; None values left out. Raises Unmappable."""
    out: dict = {}
    for name, value in options.items():
        if value is None or name in IGNORED:
            continue
        if name == "sasl_mechanism" and value not in LOGINS:
            raise Unmappable(f"kafka.sasl_mechanism {value} (cachesync logs in with it "
                             "through kafka-python only)")
        if name == "ssl_check_hostname":
            out["ssl.endpoint.identification.algorithm"] = "https" if value else "none"
        elif name in names:
            out[names[name]] = value
        elif name in COMMON:
            out[COMMON[name]] = value
        else:
            raise Unmappable(f"the Kafka property {name} has no librdkafka twin here")
    return out


def choose(client: str, config) -> tuple[str, str]:
    """(the client to use, why) for ``kafka.client`` ``client``; ``config()`` builds the
    librdkafka properties (raising Unmappable). ``auto``: librdkafka when confluent-kafka
    imports, the options map and CACHESYNC_NO_SPEEDUPS (no compiled accelerator) is not
    set, else kafka-python, the reason saying why; ``librdkafka``
    asked for where it cannot be used raises ConfigError."""
    if client not in CLIENTS:
        raise ConfigError(f"kafka.client: expected one of {', '.join(CLIENTS)}, got {client!r}")
    if client == "kafka-python":
        return "kafka-python", "kafka.client is kafka-python"
    why = _unusable(config)
    if why is None:
        return "librdkafka", f"kafka.client is {client}"
    if client == "librdkafka":
        raise ConfigError(f"kafka.client librdkafka: {why}")
    return "kafka-python", why


def _unusable(config) -> str | None:
    if os.environ.get(NO_SPEEDUPS):
        return f"{NO_SPEEDUPS} is set"
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        return "confluent-kafka is not installed"
    try:
        config()
    except Unmappable as e:
        return str(e)
    return None


class QuietLog:
    """librdkafka's log lines (confluent-kafka's ``logger``) at DEBUG on ``name``, its fatal
    ones (CRITICAL) as they are: it logs every refused connect while a broker is down, about
    twenty a second, and cachesync reports an outage itself (the probes' WARNING, /readyz)."""

    def __init__(self, name: str = "cachesync.librdkafka"):
        self._log = logging.getLogger(name)

    def log(self, level: int, msg: str, *args) -> None:
        self._log.log(level if level >= logging.CRITICAL else logging.DEBUG, msg, *args)


_FATAL = -150                           # KafkaError._FATAL
_LOGIN_REFUSED = (-169, 58)             # KafkaError._AUTHENTICATION, SASL_AUTHENTICATION_FAILED


class ClientErrors:
    """A librdkafka client's ``error_cb`` (run inside its ``poll``/``consume``): remembers a
    refused login and a fatal error, logs the rest at DEBUG (the client retries them)."""

    def __init__(self, bootstrap_servers: str):
        self._bootstrap = bootstrap_servers
        self.login_refused: str | None = None
        self.fatal = None

    def __call__(self, err) -> None:
        if err.code() in _LOGIN_REFUSED:
            self.login_refused = err.str()
        if is_fatal(err):
            self.fatal = err
        logging.getLogger(__name__).debug("librdkafka: %s", err.str())

    def check_login(self) -> None:
        """Raise FatalError when the broker refused the login."""
        if self.login_refused:
            from cachesync.runtime.kafka_login import login_refused
            raise login_refused(self._bootstrap, self.login_refused)


def is_fatal(err) -> bool:
    # a message's error can say _FATAL without fatal() saying so
    return err.fatal() or err.code() == _FATAL


def kafka_python_error(err, errors: Mapping | None = None) -> Exception:
    """kafka-python's error for librdkafka's KafkaError ``err``: the class ``errors`` maps its
    code to (else KafkaError), its name and text in the message, and librdkafka's verdict on
    retrying it as ``retriable``."""
    from kafka import errors as kerrors
    error = (errors or {}).get(err.code(), kerrors.KafkaError)(f"{err.name()}: {err.str()}")
    if err.retriable() and not error.retriable:
        error.retriable = True
    return error
