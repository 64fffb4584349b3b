"""Quoting MySQL identifiers that come from configuration or the caller (pure).

Names are quoted, never pasted: a backtick inside a name is doubled, as the server
requires, so no name can end the identifier and inject SQL.
"""

from __future__ import annotations

MAX_IDENTIFIER = 64


def quote(name: str) -> str:
    """```name``` with backticks doubled; raises ValueError for a name MySQL cannot have."""
    if not isinstance(name, str) or not name or len(name) > MAX_IDENTIFIER or "\0" in name:
        raise ValueError(f"not a MySQL identifier (1 to {MAX_IDENTIFIER} characters, no NUL): "
                         f"{name!r}")
    return "`" + name.replace("`", "``") + "`"


def qualified(db: str, table: str) -> str:
    """```db`.`table```, each part quoted."""
    return f"{quote(db)}.{quote(table)}"
