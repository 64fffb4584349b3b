"""Every server setting that shapes what the binlog holds, and what cachesync does about it (pure).

``settings_report(flavor, variables)`` returns one ``SettingReport`` per setting the server
has (MySQL and MariaDB name different ones): its value and, in one line, what the tailer
does with the binlog that value makes. The tailer logs ``summary`` at start (each report's
line at DEBUG); ``cachesync doctor`` and the preflight share them. Settings the tailer cannot run with at all are the
preflight's problems (preflight.REQUIRED_VARIABLES); the outcomes here are

* ``ok``: nothing to do, or decoded exactly;
* ``table_level``: some changes are invalidated per table rather than per key (named);
* ``degraded``: cachesync runs, with a weaker guarantee the line names.
"""

from __future__ import annotations

from dataclasses import dataclass

from cachesync.producer_outbox.binlog.eventtypes import DECODED, TYPES

OK, TABLE_LEVEL, DEGRADED = "ok", "table_level", "degraded"
UNKNOWN = "(unknown)"        # the value of a setting this server does not have
_PARTIAL_UPDATE_ROWS = 39


@dataclass(frozen=True)
class SettingReport:
    name: str
    value: str
    outcome: str         # ok | table_level | degraded
    says: str            # what cachesync does, one line

    def line(self) -> str:
        return f"{self.name}={self.value}: {self.says}"


def _compression(value: str) -> tuple[str, str]:
    if value.upper() == "ON":
        return OK, ("each transaction is one zstd TRANSACTION_PAYLOAD_EVENT: decompressed and "
                    "decoded like an uncompressed one")
    return OK, "transactions are not compressed"


def _row_value_options(value: str) -> tuple[str, str]:
    if "PARTIAL_JSON" not in value.upper():
        return OK, "JSON updates are logged as full values"
    if TYPES[_PARTIAL_UPDATE_ROWS].outcome == DECODED:
        return OK, ("partial JSON updates (PARTIAL_UPDATE_ROWS_EVENT) are decoded: the diffs "
                    "apply to the before image; a session's MINIMAL/NOBLOB image leaves the "
                    "new document unknown, so its keys are invalidated without a value")
    return TABLE_LEVEL, ("a partial JSON update (PARTIAL_UPDATE_ROWS_EVENT) invalidates its "
                         "table as a whole; set binlog_row_value_options='' for per-key "
                         "invalidation")


def _gtid_mode(value: str) -> tuple[str, str]:
    if value.upper() == "ON":
        return OK, "checkpoints are GTID sets (tagged GTIDs too): they carry over to a replica"
    return DEGRADED, ("checkpoints are file:pos of this server: a failover needs `cachesync "
                      "resync`; set gtid_mode=ON (with enforce_gtid_consistency=ON)")


def _gtid_strict(value: str) -> tuple[str, str]:
    if value.upper() == "ON":
        return OK, "GTID sequence numbers grow per domain: update-mode versions keep growing"
    return DEGRADED, ("a transaction may not advance the GTID history, so update-mode fences "
                      "may keep an older value until its TTL (each one is logged and counted); "
                      "set gtid_strict_mode=ON")


def _log_bin_compress(value: str) -> tuple[str, str]:
    if value.upper() == "ON":
        return OK, ("compressed query and row events (zlib) are decompressed and decoded like "
                    "uncompressed ones")
    return OK, "events are not compressed"


def _statements_too(value: str) -> tuple[str, str]:
    return OK, ("statement text events (annotations) carry no rows and are not read")


def _encryption(value: str) -> tuple[str, str]:
    return OK, "the server decrypts what it sends to replicas: nothing to do"


def _checksum(value: str) -> tuple[str, str]:
    if value.upper() == "NONE":
        return OK, "events carry no checksum: read as they arrive"
    return OK, ("each event's checksum is verified before it is read; one that fails stops "
                "the tailer naming its position")


def _format(value: str) -> tuple[str, str]:
    if value.upper() == "ROW":
        return TABLE_LEVEL, ("rows are decoded; a session that sets STATEMENT or MIXED logs "
                             "DML as statements, which invalidate their tables as a whole")
    return TABLE_LEVEL, "DML logged as statements invalidates its tables as a whole"


def _row_image(value: str) -> tuple[str, str]:
    if value.upper() == "FULL":
        return OK, ("full row images; a session that sets MINIMAL or NOBLOB gets its keys "
                    "invalidated as far as its images name them, its table as a whole otherwise")
    return DEGRADED, "partial row images: keys invalidated as far as the images name them"


def _row_metadata(value: str) -> tuple[str, str]:
    if value.upper() == "FULL":
        return OK, "table maps name every column: DDL never breaks decoding"
    return DEGRADED, "table maps without column names; set binlog_row_metadata=FULL"


# name -> (flavors it exists on, what it means)
_SETTINGS = {
    "binlog_format": ("mysql mariadb", _format),
    "binlog_row_image": ("mysql mariadb", _row_image),
    "binlog_row_metadata": ("mysql mariadb", _row_metadata),
    "binlog_transaction_compression": ("mysql", _compression),
    "binlog_row_value_options": ("mysql", _row_value_options),
    "gtid_mode": ("mysql", _gtid_mode),
    "gtid_strict_mode": ("mariadb", _gtid_strict),
    "log_bin_compress": ("mariadb", _log_bin_compress),
    "binlog_checksum": ("mysql mariadb", _checksum),
    "binlog_encryption": ("mysql", _encryption),
    "encrypt_binlog": ("mariadb", _encryption),
    "binlog_rows_query_log_events": ("mysql", _statements_too),
    "binlog_annotate_row_events": ("mariadb", _statements_too),
}
SETTING_NAMES = tuple(_SETTINGS)


def settings_report(flavor: str, variables: dict[str, str]) -> list[SettingReport]:
    """One report per binlog-shaping setting of ``flavor`` (``variables``: as the server
    named them, lower case); a setting the server does not have says so."""
    out = []
    for name, (flavors, meaning) in _SETTINGS.items():
        if flavor not in flavors.split():
            continue
        value = variables.get(name)
        if value is None:
            out.append(SettingReport(name, UNKNOWN, OK, "not a setting of this server"))
            continue
        outcome, says = meaning(value)
        out.append(SettingReport(name, value, outcome, says))
    return out


def summary(reports: list[SettingReport]) -> str:
    """One line for the start log: every setting the server has, with its value, and the
    degraded ones named (what each means is its own ``line()``)."""
    known = [r for r in reports if r.value != UNKNOWN]
    text = "binlog settings: " + ", ".join(f"{r.name}={r.value}" for r in known)
    degraded = [r.name for r in known if r.outcome == DEGRADED]
    if degraded:
        text += f"; degraded: {', '.join(degraded)} (`cachesync doctor` names the fix)"
    return text
