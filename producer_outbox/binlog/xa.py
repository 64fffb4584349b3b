"""XA transactions in the binlog: publish at XA COMMIT, never at PREPARE (pure).

MariaDB and MySQL write a prepared XA transaction's rows in its own event group
(``XA START`` ... rows ... ``XA END``, ``XA PREPARE``), and the decision later in
another group: ``XA COMMIT xid`` or ``XA ROLLBACK xid``. ``XA COMMIT ... ONE PHASE``
is a normal transaction on MariaDB and an XA_PREPARE event flagged one-phase on
MySQL. The tailer holds a prepared group's records (encoded, ready to send) here
until its decision, and keeps its checkpoint before the group meanwhile, so a
tailer killed between PREPARE and COMMIT reads the group again on restart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# MariaDB Gtid_log_event flags2: the group is the prepare part of an XA transaction.
FL_PREPARED_XA = 64

_XA = re.compile(r"^XA\s+(START|BEGIN|END|PREPARE|COMMIT|ROLLBACK)\s*(.*?)"
                 r"(\s+ONE\s+PHASE|\s+JOIN|\s+RESUME|\s+SUSPEND(?:\s+FOR\s+MIGRATE)?)?\s*$",
                 re.I | re.S)


def xa_statement(text: str) -> tuple[str, str, bool] | None:
    """(verb, xid, one_phase) of an XA statement, or None; the xid is the statement's
    own text (the binlog writes it the same way, ``X'6131',X'',1``, in every group)."""
    m = _XA.match(text)
    if m is None:
        return None
    verb = "START" if m.group(1).upper() == "BEGIN" else m.group(1).upper()
    suffix = (m.group(3) or "").upper()
    return verb, " ".join(m.group(2).split()), "ONE" in suffix


@dataclass
class XaGroup:
    """The records of one XA event group, held instead of sent.

    Beyond ``max_rows`` rows the records are dropped and only the mapped tables are
    kept (``overflowed``): a commit then invalidates those tables as a whole, so
    memory stays bounded whatever the transaction's size.
    """

    max_rows: int
    xid: str = ""
    records: list[tuple[Any, ...]] = field(default_factory=list)
    tables: dict[tuple[str, str], None] = field(default_factory=dict)
    rows: int = 0
    overflowed: bool = False

    def hold(self, record: tuple[Any, ...], rows: int) -> None:
        self.rows += rows
        if self.rows > self.max_rows:
            self.overflowed = True
            self.records.clear()
        else:
            self.records.append(record)

    def touch(self, db: str, table: str) -> None:
        self.tables[(db, table)] = None


@dataclass
class Prepared:
    """A prepared XA group waiting for its decision: its records, its tracker entry
    (open, which holds the checkpoint before it) and the checkpoint after it."""

    group: XaGroup
    txn: Any
    checkpoint: Any
