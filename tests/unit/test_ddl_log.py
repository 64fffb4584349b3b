"""The tailer logs DDL it reads from the binlog, never a password in it."""

import pytest

from cachesync.producer_outbox.binlog_source import _SECRETS


@pytest.mark.parametrize("statement, shown", [
    ("CREATE USER w@'127.0.0.1' IDENTIFIED BY '3c4c'", "CREATE USER w@'127.0.0.1' IDENTIFIED BY '***'"),
    ("ALTER USER x IDENTIFIED WITH mysql_native_password BY 'p''q'",
     "ALTER USER x IDENTIFIED WITH mysql_native_password BY '***'"),
    ("CREATE USER x IDENTIFIED BY PASSWORD '*94BDCEBE'", "CREATE USER x IDENTIFIED BY PASSWORD '***'"),
    ("CREATE USER a IDENTIFIED VIA ed25519 USING PASSWORD('s')",
     "CREATE USER a IDENTIFIED VIA ed25519 USING PASSWORD('***')"),
    ("SET PASSWORD FOR x = PASSWORD('abc')", "SET PASSWORD FOR x = PASSWORD('***')"),
    ("SET PASSWORD = \"abc\"", "SET PASSWORD = '***'"),
    ("GRANT SELECT ON a.* TO b", "GRANT SELECT ON a.* TO b"),
])
def test_passwords_are_masked(statement, shown):
    assert _SECRETS.sub(r"\1'***'", statement) == shown
