"""Quoting MySQL identifiers that come from configuration or the caller (pure).

Names are quoted, never pasted: a backtick inside a name is doubled, as the server
requires, so no name can end the identifier and inject SQL.
"""

from __future__ import annotations

import re

MAX_IDENTIFIER = 64
# What a name from configuration may be: unquoted-safe characters only, so the same name
# works in SQL, in a GRANT an operator types, and in file and metric names.
IDENTIFIER_PATTERN = r"[A-Za-z0-9_$]{1,64}"
_IDENTIFIER = re.compile(IDENTIFIER_PATTERN)


def quote(name: str) -> str:
    """```name``` with backticks doubled; raises ValueError for a name MySQL cannot have."""
    if not isinstance(name, str) or not name or len(name) > MAX_IDENTIFIER or "\0" in name:
        raise ValueError(f"not a MySQL identifier (1 to {MAX_IDENTIFIER} characters, no NUL): "
                         f"{name!r}")
    return "`" + name.replace("`", "``") + "`"


def qualified(db: str, table: str) -> str:
    """```db`.`table```, each part quoted."""
    return f"{quote(db)}.{quote(table)}"


def configured(name: str) -> str:
    """A configured name (``table`` or ``db.table``), checked against IDENTIFIER_PATTERN and
    quoted; raises ValueError naming what is wrong."""
    parts = name.split(".") if isinstance(name, str) else [name]
    if not 1 <= len(parts) <= 2 or not all(isinstance(p, str) and _IDENTIFIER.fullmatch(p)
                                           for p in parts):
        raise ValueError(f"{name!r} is not a table name: letters, digits, _ or $ (1 to "
                         f"{MAX_IDENTIFIER}), optionally db.table")
    return ".".join(quote(p) for p in parts)
