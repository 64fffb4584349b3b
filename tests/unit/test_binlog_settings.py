"""producer_outbox.binlog.settings: every binlog-shaping setting and what cachesync does (pure)."""

import pytest

from cachesync.producer_outbox.binlog.settings import (DEGRADED, OK, TABLE_LEVEL,
                                                       settings_report, summary)
from cachesync.producer_outbox.binlog.preflight import ServerInfo

MYSQL = {"binlog_format": "ROW", "binlog_row_image": "FULL", "binlog_row_metadata": "FULL",
         "binlog_transaction_compression": "ON", "binlog_row_value_options": "PARTIAL_JSON",
         "gtid_mode": "ON", "binlog_checksum": "CRC32", "binlog_encryption": "OFF",
         "binlog_rows_query_log_events": "OFF"}
MARIADB = {"binlog_format": "ROW", "binlog_row_image": "FULL", "binlog_row_metadata": "FULL",
           "gtid_strict_mode": "OFF", "log_bin_compress": "ON", "binlog_checksum": "NONE",
           "encrypt_binlog": "OFF", "binlog_annotate_row_events": "ON"}


@pytest.mark.parametrize("flavor, variables", [("mysql", MYSQL), ("mariadb", MARIADB)])
def test_every_setting_of_the_flavor_gets_one_line(flavor, variables):
    reports = settings_report(flavor, variables)
    assert {r.name for r in reports} == set(variables)
    assert all(r.says and "\n" not in r.line() for r in reports)


@pytest.mark.parametrize("flavor, name, value, outcome, says", [
    ("mysql", "binlog_transaction_compression", "ON", OK, "zstd"),
    ("mysql", "binlog_row_value_options", "PARTIAL_JSON", None, "PARTIAL_UPDATE_ROWS_EVENT"),
    ("mysql", "gtid_mode", "OFF_PERMISSIVE", DEGRADED, "gtid_mode=ON"),
    ("mariadb", "log_bin_compress", "ON", OK, "zlib"),
    ("mariadb", "gtid_strict_mode", "OFF", DEGRADED, "gtid_strict_mode=ON"),
    ("mariadb", "binlog_format", "ROW", TABLE_LEVEL, "STATEMENT or MIXED"),
])
def test_what_each_value_means(flavor, name, value, outcome, says):
    (report,) = [r for r in settings_report(flavor, {name: value}) if r.name == name]
    assert says in report.says
    if outcome is not None:
        assert report.outcome == outcome


def test_a_setting_the_server_lacks_is_named_as_such():
    reports = settings_report("mysql", {})
    assert all(r.value == "(unknown)" for r in reports)


def test_the_server_info_reports_its_settings():
    info = ServerInfo("mariadb", 1, None, MARIADB, ())
    assert [r.name for r in info.binlog_settings()][:3] == [
        "binlog_format", "binlog_row_image", "binlog_row_metadata"]


def test_the_start_summary_is_one_line_naming_the_degraded_settings():
    line = summary(settings_report("mariadb", MARIADB))
    assert "\n" not in line and line.startswith("binlog settings: binlog_format=ROW, ")
    assert "log_bin_compress=ON" in line
    assert line.endswith("; degraded: gtid_strict_mode (`cachesync doctor` names the fix)")
    healthy = summary(settings_report("mysql", {**MYSQL, "binlog_row_value_options": None}))
    assert "degraded" not in healthy and "binlog_row_value_options" not in healthy
