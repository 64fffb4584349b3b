"""The security options of every Kafka client, from the ``kafka`` settings section.

One place turns ``kafka.security_protocol``, ``kafka.sasl_*`` and ``kafka.ssl_*`` into
kafka-python keyword arguments (consumers, producers, admin clients) and into Spark's
``kafka.*`` source options, so no client can reach the broker differently from another.
The results hold the SASL password or the OAuth token provider: pass them on, never log them.
"""

from __future__ import annotations

import functools
import os

from cachesync import install_hint
from cachesync.runtime.config import KafkaSettings, Secret
from cachesync.schema.errors import ConfigError

_JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


# how long a kafka-python client waits at start for a broker to answer (kafka-python's own
# default is 30 s), so that a command run while Kafka is down says so within this; a
# ``bootstrap_timeout_ms`` in the pass-through properties wins
BOOTSTRAP_TIMEOUT_MS = 10_000
_DEFAULTS = {"bootstrap_timeout_ms": BOOTSTRAP_TIMEOUT_MS}


def client_security(k: KafkaSettings) -> dict:
    """kafka-python keyword arguments for ``k``'s protocol, TLS files and SASL login."""
    out: dict = {"security_protocol": k.security_protocol}
    if k.security_protocol in ("SSL", "SASL_SSL"):
        out.update(ssl_check_hostname=k.ssl_check_hostname, ssl_cafile=k.ssl_cafile or None,
                   ssl_certfile=k.ssl_certfile or None, ssl_keyfile=k.ssl_keyfile or None)
    if not k.security_protocol.startswith("SASL_"):
        return out
    out["sasl_mechanism"] = k.sasl_mechanism
    if k.sasl_mechanism == "OAUTHBEARER":
        out["sasl_oauth_token_provider"] = oauth_provider(k)
    elif k.sasl_mechanism == "AWS_MSK_IAM":
        aws_login_ready(k.aws_region)
    else:
        out.update(sasl_plain_username=k.sasl_username, sasl_plain_password=str(k.sasl_password))
    return out


@functools.lru_cache(maxsize=8)
def oauth_provider(k: KafkaSettings):
    """The one OAUTHBEARER token provider of the process for ``k`` (every client shares it,
    so a command runs once per refresh, not once per client). Reads the first token now:
    raises ConfigError when the file cannot be read or the command fails."""
    from cachesync.runtime.kafka_oauth import TokenCommand, TokenFile, parse_extensions
    extensions = parse_extensions(k.sasl_oauth_extensions)
    provider = (TokenFile(k.sasl_oauth_token_file, extensions) if k.sasl_oauth_token_file else
                TokenCommand(k.sasl_oauth_token_command, k.sasl_oauth_token_max_age_s, extensions))
    provider.token()
    return provider


def aws_login_ready(region: str) -> None:
    """Check that kafka-python's AWS_MSK_IAM login can sign: botocore installed, credentials
    and a region found through the AWS chain (environment, profile, container or instance
    role). ``region`` (``kafka.aws_region``) wins over the chain's. Raises ConfigError."""
    try:
        from botocore.session import Session
    except ImportError:
        raise ConfigError("kafka.sasl_mechanism AWS_MSK_IAM needs botocore: "
                          + install_hint("sidecar,aws")) from None
    if region:
        # kafka-python builds its own botocore session at every login, with no way to pass a
        # region but botocore's own variable; the tailer's publisher process inherits it
        os.environ["AWS_DEFAULT_REGION"] = region
    session = Session()
    if not session.get_config_variable("region"):
        raise ConfigError("kafka.aws_region: AWS_MSK_IAM needs the cluster's region (set "
                          "kafka.aws_region, AWS_DEFAULT_REGION or the profile's region)")
    if session.get_credentials() is None:
        raise ConfigError("kafka.sasl_mechanism AWS_MSK_IAM: no AWS credentials found (the "
                          "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY variables, AWS_PROFILE, "
                          "a web identity token, or the container's or instance's role)")


def client_options(k: KafkaSettings) -> dict:
    """Any kafka-python client's keyword arguments where no pass-through properties apply:
    security and the bootstrap timeout."""
    return {**_DEFAULTS, **client_security(k)}


def producer_options(k: KafkaSettings) -> dict:
    """Every producer's keyword arguments from ``k``: security, ``kafka.compression_type``
    and ``kafka.producer_properties``; raises ConfigError for a property kafka-python lacks."""
    from kafka import KafkaProducer
    compression = None if k.compression_type == "none" else k.compression_type
    return {**_DEFAULTS, **_known(k.producer_properties, KafkaProducer.DEFAULT_CONFIG, "producer"),
            "compression_type": compression, **client_security(k)}


def consumer_options(k: KafkaSettings) -> dict:
    """Every consumer's keyword arguments: security and ``kafka.consumer_properties``."""
    from kafka import KafkaConsumer
    return {**_DEFAULTS, **_known(k.consumer_properties, KafkaConsumer.DEFAULT_CONFIG, "consumer"),
            **client_security(k)}


def admin_options(k: KafkaSettings) -> dict:
    """Every admin client's keyword arguments: security and ``kafka.admin_properties``."""
    from kafka import KafkaAdminClient
    return {**_DEFAULTS, **_known(k.admin_properties, KafkaAdminClient.DEFAULT_CONFIG, "admin"),
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
        out["kafka.sasl.mechanism"] = k.sasl_mechanism
        out.update(_spark_login(k))
    return out


_OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


def _spark_login(k: KafkaSettings) -> dict[str, str]:
    """The Java client's login options for ``k``'s mechanism; raises ConfigError for a
    login the Java client cannot do (an OAuth token from a command)."""
    if k.sasl_mechanism == "OAUTHBEARER":
        if k.sasl_oauth_token_command:
            raise ConfigError("kafka.sasl_oauth_token_command: the Spark engine's Kafka client "
                              "(Java) cannot run a command; use kafka.sasl_oauth_token_file, a "
                              "file the driver and every executor read at that path")
        from cachesync.runtime.kafka_oauth import parse_extensions
        ext = "".join(f" extension_{key}={_quoted(v)}"
                      for key, v in parse_extensions(k.sasl_oauth_extensions).items())
        # KIP-768: a file:// token endpoint is a file holding the token, re-read at each
        # refresh of the login
        return {"kafka.sasl.login.callback.handler.class":
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
                "kafka.sasl.oauthbearer.token.endpoint.url":
                "file://" + os.path.abspath(k.sasl_oauth_token_file),
                "kafka.sasl.jaas.config": f"{_OAUTH_MODULE} required{ext};"}
    if k.sasl_mechanism == "AWS_MSK_IAM":
        # AWS's aws-msk-iam-auth jar (software.amazon.msk:aws-msk-iam-auth) must be on the
        # Spark classpath; it signs with the default AWS chain, as botocore does
        return {"kafka.sasl.jaas.config": "software.amazon.msk.auth.iam.IAMLoginModule required;",
                "kafka.sasl.client.callback.handler.class":
                "software.amazon.msk.auth.iam.IAMClientCallbackHandler"}
    # a Secret: a logged or printed options dict masks the password
    return {"kafka.sasl.jaas.config": Secret(_jaas(k))}


def _quoted(text: str) -> str:
    """A JAAS option value: quotes and backslashes escaped."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _jaas(k: KafkaSettings) -> str:
    """The JAAS login line of a username/password mechanism."""
    return (f"{_JAAS_MODULES[k.sasl_mechanism]} required username={_quoted(k.sasl_username)} "
            f"password={_quoted(str(k.sasl_password))};")
