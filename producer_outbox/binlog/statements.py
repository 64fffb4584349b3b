"""Which mapped tables a binlog Query event changes as a whole, and why (pure).

Row-based logging carries DML as row events; a Query event carries DDL, the
transaction markers, and DML the server logged as a statement (binlog_format
STATEMENT or MIXED). cachesync cannot tell which rows such a statement touched, so
every mapped table it names is invalidated as a whole. Naming is decided by the
identifiers the statement contains: a false match costs cache misses, a missed
table would be silent staleness.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable

TRUNCATE, DROP, RENAME, DROP_DATABASE, STATEMENT = (
    "truncate", "drop", "rename", "drop_database", "statement")
# ALTER TABLE forms that change what a table's rows are without row events (see alter_kind)
PARTITION, TABLESPACE, IGNORE_UNIQUE, REPAIR = ("partition", "tablespace", "alter_ignore", "repair")

_COMMENTS = re.compile(r"/\*(?!!).*?\*/|--[^\n]*|#[^\n]*", re.S)
_VERSIONED_COMMENT = re.compile(r"/\*!\d*\s?(.*?)\*/", re.S)
IDENT = r"(?:`(?:[^`]|``)+`|[A-Za-z0-9_$]+)"
_NAME = re.compile(rf"({IDENT})(?:\s*\.\s*({IDENT}))?")
_ALTER_RENAME = re.compile(r"\bRENAME\s+(?!(?:COLUMN|INDEX|KEY|CONSTRAINT)\b)", re.I)
_DROP_DATABASE = re.compile(rf"^DROP\s+(?:SCHEMA|DATABASE)\s+(?:IF\s+EXISTS\s+)?({IDENT})", re.I)
_KINDS = [
    (re.compile(r"^TRUNCATE\b", re.I), TRUNCATE),
    (re.compile(r"^DROP\s+(?:SCHEMA|DATABASE)\b", re.I), DROP_DATABASE),
    (re.compile(r"^DROP\s+TABLE\b", re.I), DROP),
    (re.compile(r"^CREATE\s+OR\s+REPLACE\s+TABLE\b", re.I), DROP),
    (re.compile(r"^RENAME\s+TABLES?\b", re.I), RENAME),
    (re.compile(r"^(?:INSERT|UPDATE|DELETE|REPLACE|LOAD\s+DATA|LOAD\s+XML)\b", re.I), STATEMENT),
    (re.compile(r"^WITH\b.*\b(?:UPDATE|DELETE|INSERT)\b", re.I | re.S), STATEMENT),
]


@dataclass(frozen=True)
class TableChange:
    """A mapped table a statement changed as a whole."""

    db: str
    table: str
    reason: str          # truncate | drop | rename | drop_database | statement | partition
                         # | tablespace | alter_ignore | repair | partial_row_image ...


def statement_kind(query: str) -> str | None:
    """The reason a statement changes whole tables, or None (other DDL, markers, XA)."""
    text = clean(query)
    if _ALTER_TABLE.match(text):
        return alter_kind(text)
    if _REPAIR.match(text):       # MyISAM/Aria repair may drop the rows it cannot read
        return REPAIR
    for pattern, kind in _KINDS:
        if pattern.match(text):
            return kind
    return None


# Partition clauses that only read or check rows; every other one rewrites, moves, drops or
# swaps (EXCHANGE, CONVERT) a partition's rows without a row event.
_PARTITION_CLAUSE = re.compile(r"\bPARTITION(?:S|ING)?\b", re.I)
_READ_ONLY_PARTITION = re.compile(
    r"^(?:ANALYZE|CHECK|OPTIMIZE|REPAIR)\s+PARTITION\b(?:(?!\b(?:TRUNCATE|DROP|EXCHANGE|"
    r"REORGANIZE|COALESCE|REBUILD|REMOVE|CONVERT|ADD|DISCARD|IMPORT)\b).)*$", re.I | re.S)
_TABLESPACE = re.compile(r"\b(?:DISCARD|IMPORT)\b[^;]*?\bTABLESPACE\b", re.I)
_IGNORE_UNIQUE = re.compile(r"^ALTER\s+(?:ONLINE\s+)?IGNORE\b.*\bADD\s+(?:CONSTRAINT\b.*\b)?"
                            r"(?:UNIQUE|PRIMARY)\b", re.I | re.S)
_ALTER_TABLE = re.compile(r"^ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE\b", re.I)
_ALTER_HEAD = re.compile(rf"^ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE\s+(?:IF\s+EXISTS\s+)?"
                         rf"{IDENT}(?:\s*\.\s*{IDENT})?\s*", re.I)
_REPAIR = re.compile(r"^REPAIR\s+(?:NO_WRITE_TO_BINLOG\s+|LOCAL\s+)?TABLES?\b", re.I)
_LITERALS = re.compile(r"`(?:[^`]|``)*`|'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.)*\"", re.S)


def alter_kind(text: str) -> str | None:
    """Why an ALTER TABLE (comments removed) changes the table's rows as a whole, or None.

    The classes that change what rows hold without row events: renaming the table;
    partition maintenance that drops, truncates, swaps or moves rows (TRUNCATE, DROP,
    EXCHANGE, REORGANIZE, COALESCE, REBUILD, ADD, CONVERT PARTITION, PARTITION BY, REMOVE
    PARTITIONING; not ANALYZE/CHECK/OPTIMIZE/REPAIR PARTITION); a tablespace discarded or
    imported; ALTER IGNORE adding a unique key (drops the duplicate rows). A column
    added, dropped or redefined changes no row's identity and is logged as DDL.
    """
    if _ALTER_RENAME.search(_LITERALS.sub(" ", text)):
        return RENAME
    bare = _LITERALS.sub(" ", _ALTER_HEAD.sub("", text))
    if _TABLESPACE.search(bare):
        return TABLESPACE
    if _PARTITION_CLAUSE.search(bare) and not _READ_ONLY_PARTITION.match(bare.strip()):
        return PARTITION
    if _IGNORE_UNIQUE.match(text):
        return IGNORE_UNIQUE
    return None


def table_changes(query: str, default_db: str | None,
                  mapped: Iterable[tuple[str, str]],
                  matches: Callable[[str, str], bool] | None = None) -> list[TableChange]:
    """The mapped (db, table) pairs ``query`` changes as a whole, in mapping order, then
    the names it contains that ``matches`` (lower-cased db, table) accepts: tables of a
    pattern not seen yet, such as the target of a RENAME into a pattern.

    Unqualified names resolve to ``default_db`` (the Query event's current database).
    """
    kind = statement_kind(query)
    if kind is None:
        return []
    text = clean(query)
    if kind == DROP_DATABASE:
        m = _DROP_DATABASE.match(text)
        dropped = unquote(m.group(1)).lower() if m else None
        return [TableChange(db, t, kind) for db, t in mapped if db.lower() == dropped]
    names = _names(text, default_db)
    mapped = list(mapped)
    out = [TableChange(db, t, kind) for db, t in mapped if (db.lower(), t.lower()) in names]
    if matches is not None:
        seen = {(db.lower(), t.lower()) for db, t in mapped}
        out += [TableChange(db, t, kind) for db, t in sorted(names - seen)
                if db is not None and matches(db, t)]
    return out


def mapped_names(query: str, default_db: str | None,
                 mapped: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The mapped (db, table) pairs ``query`` names anywhere, whatever it does to them."""
    names = _names(clean(query), default_db)
    return [(db, t) for db, t in mapped if (db.lower(), t.lower()) in names]


def clean(query: str) -> str:
    """The statement without comments (MariaDB's versioned ``/*!...*/`` keep their text)."""
    return _COMMENTS.sub(" ", _VERSIONED_COMMENT.sub(r" \1 ", query)).strip()


def _names(text: str, default_db: str | None) -> set[tuple[str | None, str]]:
    """Every identifier as (db, name), lower-cased; a bare name resolves to ``default_db``."""
    out: set[tuple[str | None, str]] = set()
    default = default_db.lower() if default_db else None
    for first, second in _NAME.findall(text):
        a, b = unquote(first).lower(), unquote(second).lower() if second else None
        if b is not None:
            out.add((a, b))
        elif default:
            out.add((default, a))
    return out


def unquote(ident: str) -> str:
    """An identifier ``IDENT`` matched, without its backquotes (case kept)."""
    return ident[1:-1].replace("``", "`") if ident.startswith("`") else ident
