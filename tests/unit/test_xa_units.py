"""XA statements and the bounded hold of a prepared group (pure)."""

import pytest

from cachesync.producer_outbox.xa import XaGroup, xa_statement


@pytest.mark.parametrize("text, expected", [
    ("XA START X'6131',X'',1", ("START", "X'6131',X'',1", False)),
    ("XA END X'6131',X'',1", ("END", "X'6131',X'',1", False)),
    ("XA COMMIT X'6131',X'',1", ("COMMIT", "X'6131',X'',1", False)),
    ("XA COMMIT 'a' ONE PHASE", ("COMMIT", "'a'", True)),
    ("xa rollback  X'31',X'',1", ("ROLLBACK", "X'31',X'',1", False)),
    ("XA BEGIN 'a' JOIN", ("START", "'a'", False)),
    ("BEGIN", None),
    ("XACT", None),
])
def test_xa_statements(text, expected):
    assert xa_statement(text) == expected


def test_a_group_over_its_bound_keeps_only_its_tables():
    group = XaGroup(max_rows=3)
    group.touch("app", "users")
    group.hold(("r1",), 2)
    assert group.records == [("r1",)] and not group.overflowed
    group.hold(("r2",), 2)
    group.touch("app", "orders")
    group.hold(("r3",), 1)
    assert group.overflowed and group.records == [] and group.rows == 5
    assert list(group.tables) == [("app", "users"), ("app", "orders")]
