"""What an account may do on a database, read from its ``SHOW GRANTS`` lines (pure).

Global (``*.*``), database (```db`.*``, ``LIKE`` wildcards ``_``/``%`` included) and
table-level grants are told apart; ``ALL PRIVILEGES`` covers every privilege.
"""

from __future__ import annotations

import re

_GRANT = re.compile(r"^GRANT (?P<privs>.+?) ON (?P<target>\S+) TO ", re.I)
# the state database: checkpoints, dedup claims, heartbeats, locks
STATE_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE", "CREATE")


def _unquote(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def _like(pattern: str, name: str) -> bool:
    """MySQL's LIKE of a database name in a grant: ``_`` one character, ``%`` any run,
    ``\\_`` a literal underscore."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if c == "%" else "." if c == "_" else re.escape(c))
        i += 1
    return re.fullmatch("".join(out), name) is not None


def privileges_on(grants: tuple[str, ...] | list[str], db: str, table: str | None = None
                  ) -> set[str]:
    """Privileges the grants give on ``db`` (all its tables), or on ``db.table`` when given."""
    out: set[str] = set()
    for line in grants:
        m = _GRANT.match(line)
        if not m:
            continue
        target = m.group("target")
        db_part, _, table_part = target.partition(".")
        applies = (db_part == "*" or _like(_unquote(db_part), db)) and (
            table_part == "*" or (table is not None and _unquote(table_part) == table))
        if applies:
            privs = {p.strip().upper() for p in m.group("privs").split(",")}
            out |= {"ALL"} if "ALL PRIVILEGES" in privs or "ALL" in privs else privs
    return out


def missing(grants, db: str, needed, table: str | None = None) -> list[str]:
    """The privileges of ``needed`` the grants do not give on ``db`` (or ``db.table``)."""
    have = privileges_on(grants, db, table)
    return [] if "ALL" in have else [p for p in needed if p not in have]
