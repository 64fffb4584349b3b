import pytest

from cachesync.producer_outbox.binlog.preflight import ServerInfo, problems

GOOD_VARS = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL",
             "binlog_row_metadata": "FULL"}
GOOD_GRANTS = ("GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `cachesync`@`127.0.0.1`",)


def info(variables=GOOD_VARS, grants=GOOD_GRANTS):
    return ServerInfo("mariadb", 1, None, dict(variables), tuple(grants))


def test_a_ready_server_has_no_problems():
    assert problems(info()) == []


@pytest.mark.parametrize("change, expected", [
    ({"binlog_format": "MIXED"}, "binlog_format=MIXED, need binlog_format=ROW"),
    ({"binlog_row_image": "MINIMAL"}, "binlog_row_image=MINIMAL, need binlog_row_image=FULL"),
    ({"binlog_row_metadata": "MINIMAL"}, "binlog_row_metadata=MINIMAL, need binlog_row_metadata=FULL"),
    ({"log_bin": "OFF"}, "log_bin=OFF, need log_bin=ON"),
])
def test_each_wrong_variable_is_named(change, expected):
    found = problems(info({**GOOD_VARS, **change}))
    assert len(found) == 1 and expected in found[0]


def test_missing_variable_says_the_server_is_too_old():
    variables = {k: v for k, v in GOOD_VARS.items() if k != "binlog_row_metadata"}
    assert "binlog_row_metadata is unknown" in problems(info(variables))[0]


@pytest.mark.parametrize("grants, missing", [
    (("GRANT BINLOG MONITOR ON *.* TO `c`@`%`",), "REPLICATION SLAVE"),
    (("GRANT REPLICATION SLAVE ON *.* TO `c`@`%`",), "REPLICATION CLIENT"),
    (("GRANT SELECT ON `app`.* TO `c`@`%`",), "REPLICATION SLAVE"),
    (("GRANT ALL PRIVILEGES ON `cachesync`.* TO `c`@`%`",), "REPLICATION SLAVE"),
    (("GRANT REPLICATION SLAVE ADMIN, BINLOG MONITOR ON *.* TO `c`@`%`",), "REPLICATION SLAVE"),
])
def test_missing_privileges_are_named(grants, missing):
    assert any(f"lacks {missing}" in p for p in problems(info(grants=grants)))


def test_mysql_spelling_of_grants_is_accepted():
    grants = ("GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `c`@`%`",)
    assert problems(info(grants=grants)) == []


def test_all_privileges_on_star_star_is_enough():
    assert problems(info(grants=("GRANT ALL PRIVILEGES ON *.* TO `root`@`%` WITH GRANT OPTION",))) == []
