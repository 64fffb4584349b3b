"""ALTER TABLE clauses that change column values without row events, and whom they concern (pure).

Redefining a column rewrites every row's value in place, with no row event: a narrower
type truncates or rounds (``MODIFY price DECIMAL(10,1)``), another charset re-encodes
(``CONVERT TO CHARACTER SET``), a renamed column carries its values under a new name. Adding
or dropping a column changes what a row holds too. Whether that leaves a cached value or
key stale depends on what the table's mapping reads:

* a redefined or renamed column that a key template, the version column or (update mode)
  a value column reads: the key text or the cached value may change;
* a column added or dropped in update mode when the mapping caches every column (no
  ``value_columns``), or a dropped value column: the cached value has the wrong shape.

Such a table is invalidated as a whole (reason ``alter_columns``). Adding or dropping a
column a delete-mode table does not key on changes no key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cachesync.producer_outbox.binlog.statements import clean

ALTER_COLUMNS = "alter_columns"

_IDENT = r"(`(?:[^`]|``)+`|[A-Za-z0-9_$]+)"
_STRINGS = re.compile(r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.)*\"", re.S)
_HEAD = re.compile(rf"^ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE\s+(?:IF\s+EXISTS\s+)?{_IDENT}"
                   rf"(?:\s*\.\s*{_IDENT})?\s*", re.I)
_NOT_A_COLUMN = (r"(?:INDEX|KEY|UNIQUE|PRIMARY|FOREIGN|CONSTRAINT|FULLTEXT|SPATIAL|CHECK|"
                 r"PERIOD|SYSTEM|PARTITION|PARTITIONING|DEFAULT|VECTOR)\b")
_REDEFINE = [
    re.compile(rf"^MODIFY\s+(?:COLUMN\s+)?(?:IF\s+EXISTS\s+)?{_IDENT}", re.I),
    re.compile(rf"^CHANGE\s+(?:COLUMN\s+)?(?:IF\s+EXISTS\s+)?{_IDENT}\s+{_IDENT}", re.I),
    re.compile(rf"^RENAME\s+COLUMN\s+{_IDENT}\s+TO\s+{_IDENT}", re.I),
]
_CONVERT = re.compile(r"^CONVERT\s+TO\b", re.I)
_DROP = re.compile(rf"^DROP\s+(?:COLUMN\s+)?(?:IF\s+EXISTS\s+)?(?!{_NOT_A_COLUMN}){_IDENT}", re.I)
_ADD = re.compile(rf"^ADD\s+(?:COLUMN\s+)?(?:IF\s+NOT\s+EXISTS\s+)?(?!{_NOT_A_COLUMN})(\(|{_IDENT})",
                  re.I)


@dataclass(frozen=True)
class ColumnChanges:
    """What an ALTER TABLE does to columns (lower-cased names)."""

    redefined: frozenset[str] = frozenset()    # values rewritten in place (or renamed)
    every_column: bool = False                 # CONVERT TO CHARACTER SET: every text column
    dropped: frozenset[str] = frozenset()
    added: bool = False

    def __bool__(self) -> bool:
        return bool(self.redefined or self.every_column or self.dropped or self.added)


def column_changes(query: str) -> ColumnChanges:
    """The column clauses of an ALTER TABLE (empty for any other statement)."""
    text = clean(query)
    head = _HEAD.match(text)
    if head is None:
        return ColumnChanges()
    redefined, dropped, every, added = set(), set(), False, False
    for clause in _clauses(_STRINGS.sub("''", text[head.end():])):
        for pattern in _REDEFINE:
            m = pattern.match(clause)
            if m:
                redefined.update(_name(g) for g in m.groups())
        every = every or bool(_CONVERT.match(clause))
        m = _DROP.match(clause)
        if m:
            dropped.add(_name(m.group(1)))
        added = added or bool(_ADD.match(clause))
    return ColumnChanges(frozenset(redefined), every, frozenset(dropped), added)


def altered_table(query: str, default_db: str | None) -> tuple[str, str] | None:
    """(db, table) an ALTER TABLE names (lower-cased), or None."""
    head = _HEAD.match(clean(query))
    if head is None:
        return None
    first, second = head.group(1), head.group(2)
    if second is not None:
        return _name(first), _name(second)
    return (default_db.lower(), _name(first)) if default_db else None


def concerns(mapping, changes: ColumnChanges) -> bool:
    """Whether ``changes`` can leave a key or cached value of ``mapping`` stale (module doc)."""
    if not changes or not mapping.keys:
        return False
    read = {f.lower() for t in mapping.keys for f in t.fields}
    if mapping.version_column:
        read.add(mapping.version_column.lower())
    every_value = mapping.updates and mapping.value_columns is None
    if mapping.updates and mapping.value_columns is not None:
        read.update(c.lower() for c in mapping.value_columns)
    if changes.every_column or every_value and (changes.redefined or changes.dropped
                                                or changes.added):
        return True
    return bool(read & changes.redefined) or (mapping.updates and bool(read & changes.dropped))


def _clauses(body: str) -> list[str]:
    """``body`` split at its top-level commas (not those inside parentheses)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(body[start:i].strip())
            start = i + 1
    out.append(body[start:].strip())
    return [c for c in out if c]


def _name(ident: str) -> str:
    return (ident[1:-1].replace("``", "`") if ident.startswith("`") else ident).lower()
