"""A Kafka login the broker refuses is fatal, not a broker to wait for; kafka-python never
logs the SASL password.

kafka-python retries a refused SASL login until its bootstrap timeout and then raises
only "Unable to bootstrap", the same error as for a broker that is down; the refusal
itself reaches nothing but its log. Retrying cannot fix a wrong password, so the
clients are built inside :func:`refused_login_is_fatal`, which watches that log.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Iterator

from kafka.errors import KafkaError, SaslAuthenticationFailedError

from cachesync.schema.errors import FatalError


class _Refusals(logging.Handler):
    """Keeps the SASL refusals kafka-python logs (the exception is a log argument)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen: list[SaslAuthenticationFailedError] = []

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        self.seen.extend(a for a in args if isinstance(a, SaslAuthenticationFailedError))


def login_refused(bootstrap_servers: str, why) -> FatalError:
    """The error that stops a process whose Kafka login was refused (either client)."""
    return FatalError(f"Kafka at {bootstrap_servers} refused the login (check "
                      f"kafka.sasl_mechanism and its credentials: kafka.sasl_username and "
                      f"kafka.sasl_password, the OAuth token, or the AWS credentials): {why}")


@contextmanager
def refused_login_is_fatal(bootstrap_servers: str) -> Iterator[None]:
    """Run the block; a Kafka error after a refused login raises FatalError instead."""
    refusals = _Refusals()
    # kafka-python's own lines, and cachesync.runtime.kafka_oauth's (a refused OAuth token)
    loggers = [logging.getLogger("kafka"), logging.getLogger("cachesync.runtime.kafka_oauth")]
    for logger in loggers:
        logger.addHandler(refusals)
    try:
        yield
    except KafkaError as e:
        if refusals.seen:
            raise login_refused(bootstrap_servers, refusals.seen[-1]) from e
        raise
    finally:
        for logger in loggers:
            logger.removeHandler(refusals)


class _ConfigDumpHidden(logging.Filter):
    """kafka-python's admin client logs its whole configuration, SASL password included, at
    DEBUG; the line stays, its configuration goes."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "configuration" in str(record.msg) and record.args:
            record.args = ("(not shown: it holds credentials)",)
        return True


logging.getLogger("kafka.admin.client").addFilter(_ConfigDumpHidden())


class _SaslBytesHidden(logging.Filter):
    """kafka-python logs every request and the raw bytes it sends at DEBUG, the SASL login
    (password, OAuth token) included; those lines keep their place, not their content."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = str(record.msg)
        if "Send:" in text or "Recv:" in text or "Sasl" in record.getMessage():
            record.msg, record.args = "%s", ("(a Kafka request or response, not shown: it may "
                                             "hold credentials)",)
        return True


for _name in ("kafka.protocol.parser", "kafka.net.connection"):
    logging.getLogger(_name).addFilter(_SaslBytesHidden())
