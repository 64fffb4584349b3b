"""``cachesync init``: a commented config proposed from information_schema.

One entry per table, or one pattern per family of shards (tables whose names differ only
in a trailing number, in one database or across databases that differ the same way).
Key templates are placeholders built from the primary key: rename their literal part to
the application's own key names. Tables that cannot be mapped are listed with the reason.
"""

from __future__ import annotations

import fnmatch
import re
from collections import defaultdict

from cachesync.producer_outbox.decode.matched import SYSTEM_SCHEMAS
from cachesync.schema.key_formats import FRAMEWORK, plain_row_key
from cachesync.schema.patterns import is_shadow_table

_NUMBERED = re.compile(r"^(.*?)(\d+)$")
# key columns whose values have no stable text (cachesync.schema.keytext)
UNKEYABLE_TYPES = {"json", "geometry", "point", "linestring", "polygon", "blob", "longblob",
                   "mediumblob", "tinyblob", "float", "double"}


# Tables a framework keeps for itself (migrations, sessions, queues, auth plumbing): an
# application does not cache their rows by key, so `init --framework` leaves them out (and
# lists them, so that one that is cached after all can be added by hand). Globs, compared
# case-insensitively.
BOOKKEEPING: dict[str, tuple[str, ...]] = {n: f.bookkeeping for n, f in FRAMEWORK.items()}


def is_bookkeeping(framework: str | None, table: str) -> bool:
    """Whether ``table`` is one of ``framework``'s own tables."""
    return framework is not None and any(
        fnmatch.fnmatchcase(table.lower(), glob) for glob in BOOKKEEPING[framework])


def framework_key(framework: str | None, table: str, fields: list[str]) -> str:
    """The placeholder key of a table's row in ``framework``'s usual form, as the application
    passes it to its cache (the key format adds prefixes and versions); ``table:id`` without
    one."""
    placeholders = ["{%s}" % f for f in fields]
    return (FRAMEWORK[framework].row_key if framework else plain_row_key)(table, placeholders)


def visible_databases(conn, state_db: str) -> tuple[str, ...]:
    """The databases the account sees, but the server's own and cachesync's state database."""
    with conn.cursor() as cur:
        cur.execute("SELECT schema_name FROM information_schema.schemata")
        names = [str(r[0]) for r in cur.fetchall()]
    return tuple(sorted(n for n in names if n not in SYSTEM_SCHEMAS and n != state_db))


def read_schema(conn, databases: list[str]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(db, table) -> primary key [(column, data_type)] in key order ([] when it has none)."""
    marks = ", ".join(["%s"] * len(databases))
    out: dict = {}
    with conn.cursor() as cur:
        cur.execute(f"SELECT table_schema, table_name FROM information_schema.tables WHERE "
                    f"table_type = 'BASE TABLE' AND table_schema IN ({marks})", databases)
        for db, t in cur.fetchall():
            out[(db, t)] = []
        cur.execute("SELECT k.table_schema, k.table_name, k.column_name, c.data_type "
                    "FROM information_schema.key_column_usage k JOIN information_schema.columns c "
                    "ON c.table_schema = k.table_schema AND c.table_name = k.table_name "
                    "AND c.column_name = k.column_name WHERE k.constraint_name = 'PRIMARY' "
                    f"AND k.table_schema IN ({marks}) ORDER BY k.ordinal_position", databases)
        for db, t, col, dtype in cur.fetchall():
            out.setdefault((db, t), []).append((col, dtype.lower()))
    return out


def propose(schema: dict, framework: str | None = None
            ) -> tuple[list[dict], list[tuple[str, str]]]:
    """(entries, unmappable): each entry {name, keys, tables, comment}; unmappable
    [(db.table, reason)]. With ``framework``, its bookkeeping tables are left out (listed as
    unmappable) and keys take its usual form."""
    entries, unmappable, families = [], [], defaultdict(list)
    for (db, t), pk in sorted(schema.items()):
        name = f"{db}.{t}"
        if is_shadow_table(t) or t.startswith("cachesync_"):
            continue
        if is_bookkeeping(framework, t):
            unmappable.append((name, f"{framework}'s own table"))
            continue
        if not pk:
            unmappable.append((name, "no primary key: a row has no stable identity to key"))
            continue
        bad = [c for c, dtype in pk if dtype in UNKEYABLE_TYPES]
        if bad:
            unmappable.append((name, f"primary key column(s) {', '.join(bad)} of a type "
                                     "without a stable key text"))
            continue
        m = _NUMBERED.match(t)
        families[(_stem(db), m.group(1) if m else t, bool(m))].append((db, t, pk))
    for (dbstem, stem, numbered), members in families.items():
        pk = members[0][2]
        fields = ":".join("{%s}" % c for c, _ in pk)
        shape = {tuple(c for c, _ in p) for _, _, p in members}
        if numbered and len(members) > 1 and len(shape) == 1:
            dbs = sorted({db for db, _, _ in members})
            name = _family_pattern(dbs, stem, [t for _, t, _ in members])
            scope = "{_db}:{_table}" if len(dbs) > 1 else "{_table}"
            entries.append({"name": name, "keys": [f"{stem.rstrip('_') or 'row'}:{scope}:{fields}"],
                            "comment": f"{len(members)} shards: " + ", ".join(
                                f"{db}.{t}" for db, t, _ in members[:4]) + (" ..." if len(members) > 4 else "")})
        else:
            for db, t, p in members:
                entries.append({"name": f"{db}.{t}", "comment": "",
                                "keys": [framework_key(framework, t, [c for c, _ in p])]})
    return sorted(entries, key=lambda e: e["name"]), unmappable


def _stem(db: str) -> str:
    m = _NUMBERED.match(db)
    return m.group(1) if m else db


def _family_pattern(dbs: list[str], stem: str, tables: list[str]) -> str:
    """A pattern naming the numbered tables of the family: a glob with one ``[0-9]`` per
    digit when every number has the same width, else a regular expression."""
    db_digits = {len(_NUMBERED.match(d).group(2)) for d in dbs} if len(dbs) > 1 else {0}
    digits = {len(_NUMBERED.match(t).group(2)) for t in tables}
    plain = not any(set("*?[") & set(x) for x in (stem, *dbs))
    if len(db_digits) == 1 and len(digits) == 1 and plain:
        db_part = dbs[0] if len(dbs) == 1 else _stem(dbs[0]) + "[0-9]" * db_digits.pop()
        return f"{db_part}.{stem}" + "[0-9]" * digits.pop()
    db_part = re.escape(dbs[0]) if len(dbs) == 1 else re.escape(_stem(dbs[0])) + r"\d+"
    return f"re:{db_part}\\.{re.escape(stem)}\\d+"


def render(entries: list[dict], unmappable: list[tuple[str, str]], databases: list[str],
           framework: str | None = None) -> str:
    """The config text, commented."""
    flag = f" --framework {framework}" if framework else ""
    lines = [f"# cachesync config proposed by `cachesync init{flag} {' '.join(databases)}`.",
             "# Connection settings come from the environment (CACHESYNC_MYSQL_HOST, ...).",
             "# Key templates are PLACEHOLDERS built from each primary key: rename the literal",
             "# part (before the first {) to the keys your application caches, add the",
             "# other keys it builds from a row (e.g. user:email:{email}), and remove the",
             "# tables it does not cache. Then: cachesync lint -c <this file>",
             *_framework_section(framework),
             "tables:"]
    for e in entries:
        if e["comment"]:
            lines.append(f"  # {e['comment']}")
        lines.append(f"  {_quote(e['name'])}:")
        keys = ", ".join(f'"{k}"' for k in e["keys"])
        lines.append(f"    keys: [{keys}]     # placeholder")
    if unmappable:
        lines.append("# Not mapped:")
        lines += [f"#   {name}: {why}" for name, why in unmappable]
    return "\n".join(lines) + "\n"


# what each framework's section says (docs/frameworks.md tells where the values come from)
def _framework_section(framework: str | None) -> list[str]:
    """The ``framework:`` section: keys are written as the application passes them to its
    cache; the key format adds the framework's prefixes and version."""
    if framework is None:
        return []
    return ["# Keys below are written as the application passes them to its cache; the",
            f"# {framework} key format adds its prefixes (and version). Framework caches hold",
            "# serialized objects: cachesync deletes their keys (mode: delete).",
            "framework:", f"  key_format: {framework}", *FRAMEWORK[framework].settings]


def _quote(name: str) -> str:
    return "'" + name.replace("'", "''") + "'" if not re.fullmatch(r"[A-Za-z0-9_.$]+", name) else name


def unreadable(conn, databases: list[str], schema: dict) -> list[str]:
    """Why each of ``databases`` shows no table: the account's missing SELECT (with the
    GRANT that gives it), or that the database has none the account can see."""
    from cachesync.runtime.grants import missing
    seen = {db for db, _ in schema}
    empty = [db for db in databases if db not in seen]
    if not empty:
        return []
    with conn.cursor() as cur:
        cur.execute("SELECT CURRENT_USER()")
        (account,), = cur.fetchall()
        cur.execute("SHOW GRANTS")
        grants = [str(r[0]) for r in cur.fetchall()]
    user, _, host = str(account).rpartition("@")
    return [f"{db}: the account {account} has no SELECT on it; an administrator can run: "
            f"GRANT SELECT ON `{db}`.* TO '{user}'@'{host}'"
            if missing(grants, db, ["SELECT"]) else f"{db}: no table (or no such database)"
            for db in empty]
