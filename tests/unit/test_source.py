"""The binlog source (tailer.source_hosts): the setting, the choice of server, the replica
check, and which stored checkpoints can resume on the server read."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from cachesync.runtime import config
from cachesync.producer_outbox.binlog.checkpoint import Checkpoint
from cachesync.producer_outbox.binlog.preflight import ServerInfo, problems
from cachesync.producer_outbox.binlog.server_choice import check_resumable, first_answering
from cachesync.schema.errors import ConfigError, FatalError, RetryableError


@pytest.mark.parametrize("text, expected", [
    ("replica", (("replica", 3306),)),
    ("a:3307, b", (("a", 3307), ("b", 3306))),
    ("10.0.0.5:1,db-2.internal:65535", (("10.0.0.5", 1), ("db-2.internal", 65535))),
])
def test_source_hosts_parse_with_mysql_port_as_the_default(text, expected):
    assert config.host_list(text, 3306) == expected


@pytest.mark.parametrize("text", ["a,", ",a", "a:", ":3306", "a:0", "a:65536", "a:x", "a,,b"])
def test_a_bad_source_hosts_list_is_refused_naming_the_field(text):
    with pytest.raises(ConfigError, match=r"tailer.source_hosts: expected a comma-separated list"):
        config.TailerSettings(source_hosts=text)
    with pytest.raises(ConfigError, match=r"CACHESYNC_TAILER_SOURCE_HOSTS: expected a comma-sep"):
        config.load(None, {"CACHESYNC_TAILER_SOURCE_HOSTS": text})


def test_source_hosts_default_is_empty_the_state_server_is_read():
    assert config.TailerSettings().source_hosts == ""


@dataclass
class _Server:
    host: str
    port: int
    answers: object = True      # True, or the exception connect raises

    def connect(self, **_):
        if self.answers is not True:
            raise self.answers
        return None


def test_the_first_server_that_answers_is_read():
    down, up, also = _Server("a", 1, RetryableError("refused")), _Server("b", 2), _Server("c", 3)
    assert first_answering([down, up, also]) is up


def test_no_server_answering_is_retryable_and_names_each_one():
    with pytest.raises(RetryableError, match=r"a:1: .*refused.*; b:2: .*timeout"):
        first_answering([_Server("a", 1, RetryableError("refused")),
                         _Server("b", 2, RetryableError("timeout"))])


def test_a_refused_login_stops_at_once():
    with pytest.raises(FatalError):
        first_answering([_Server("a", 1, FatalError("denied")), _Server("b", 2)])


def _info(**variables) -> ServerInfo:
    base = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL",
            "binlog_row_metadata": "FULL", "log_slave_updates": "OFF"}
    return ServerInfo("mariadb", 2, None, {**base, **variables},
                      ("GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `cachesync`@`%`",))


def test_a_source_read_as_a_replica_needs_log_slave_updates():
    assert problems(_info()) == []                     # the state server itself: not needed
    (problem,) = problems(_info(), replica=True)
    assert "log_slave_updates=OFF, need log_slave_updates=ON" in problem
    assert problems(_info(log_slave_updates="ON"), replica=True) == []


@pytest.mark.parametrize("checkpoint", [
    None,
    Checkpoint("mariadb:1", gtid="0-1-42"),                      # a GTID resumes anywhere
    Checkpoint("mariadb:2", log_file="mysql-bin.000003", log_pos=4),   # same server
    Checkpoint("", log_file="mysql-bin.000003", log_pos=4),      # an operator's --from-file
])
def test_checkpoints_that_resume_on_this_server(checkpoint):
    check_resumable(checkpoint, "mariadb:2")


def test_a_file_pos_checkpoint_of_another_server_is_refused_with_the_fix():
    with pytest.raises(FatalError, match=r"file:pos of server mariadb:1, but the binlog source "
                                         r"is mariadb:2.*--from-gtid.*resync"):
        check_resumable(Checkpoint("mariadb:1", log_file="mysql-bin.000003", log_pos=4),
                        "mariadb:2")
