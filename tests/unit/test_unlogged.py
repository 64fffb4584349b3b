"""Changes the binlog does not carry, pure: binlog filters, accounts that may set sql_log_bin=0."""

from __future__ import annotations

import pytest

from cachesync.producer_outbox.unlogged_changes.risks import (BINLOG_FILTER, SQL_LOG_BIN, excluded_schemas,
                                                filter_risks, log_bin_risks, read_risks)
from tests.support.fakedb import FakeConnection


@pytest.mark.parametrize("do_db, ignore_db, excluded", [
    ("", "", []), ("app", "", []), ("other", "", ["app"]), ("other,App", "", []),
    ("", "app", ["app"]), ("", "logs,APP", ["app"]), ("", "logs", [])])
def test_binlog_filters_exclude_the_schemas_they_do_not_log(do_db, ignore_db, excluded):
    assert excluded_schemas(do_db, ignore_db, ["app"]) == excluded


def test_a_filter_excluding_a_mapped_schema_is_named_with_its_setting():
    [risk] = filter_risks("", "shop", ["shop", "app"])
    assert risk.kind == BINLOG_FILTER and "binlog_ignore_db=shop" in risk.detail
    assert "keep shop out of the binlog" in risk.detail and risk.certain


def test_accounts_that_may_turn_binary_logging_off_are_named_honestly():
    assert log_bin_risks("mariadb", [], True) == []
    [risk] = log_bin_risks("mariadb", ["'root'@'localhost'", "'ops'@'%'"], False)
    assert risk.kind == SQL_LOG_BIN and not risk.certain
    assert "SUPER or BINLOG ADMIN" in risk.detail and "'ops'@'%'" in risk.detail
    assert "can read" in risk.detail          # only the grants it could see
    assert "SESSION_VARIABLES_ADMIN" in log_bin_risks("mysql", ["'a'@'%'"], True)[0].detail


class _Server(FakeConnection):
    """SHOW MASTER STATUS with filters, and information_schema.user_privileges."""

    def __init__(self, status, grantees, others: int):
        self.status, self.grantees, self.others, self.sql = status, grantees, others, ""

    def execute(self, sql, args=()):
        self.sql = sql

    def fetchall(self):
        return [(g,) for g in self.grantees]

    def fetchone(self):
        return (self.others,) if "COUNT" in self.sql else self.status

    def commit(self):
        pass


def test_read_risks_reads_the_status_row_and_the_grants():
    conn = _Server(("mysql-bin.000001", 4, "", "shop"), ["'root'@'localhost'"], 3)
    risks = read_risks(conn, "mariadb", {"shop"}, lambda cur: (cur.execute("SHOW"), cur.fetchone())[1])
    assert [r.kind for r in risks] == [BINLOG_FILTER, SQL_LOG_BIN]
    assert "can read" not in risks[1].detail                 # other accounts were visible
