"""``lint`` checks on the keys themselves: templates two rows can render identically, and key
columns whose collation makes MySQL equal what the keys keep apart.

* ``ambiguous-key``: two fields of a template are separated by a literal that a value of
  one of them may contain (``bk:{a}:{b}`` with text columns), or by nothing at all;
* ``overlapping-keys``: a key of one template can also be a key of another, e.g. the
  literal prefix ``user:email:`` is a possible value of ``{id}`` in ``user:{id}`` when
  ``id`` is text, or two tables share a template;
* ``ci-collation``: a template field under a case-insensitive (``_ci``) collation: MySQL
  treats ``abc`` and ``ABC `` as the same value, keys are byte-exact;
* ``key-text-changed``: a template field whose key text changed in this version (MariaDB
  INET4/INET6/UUID: the server's text, formerly 0x-hex; TIME: negative values with a
  fraction): keys cached before the upgrade need one flush;
* ``reserved-key``: a template that can render a key under ``cachesync:`` (``{name}`` with a
  text column): the consumer dead-letters such rows (cachesync.schema.trust).

What a value "may contain" comes from the live column types (information_schema). Without
them (``--offline``) every field is assumed to be an integer, so only what collides
whatever the types is reported.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from cachesync.schema.collisions import (INTEGER, other_reading, sample_key, separators,
                                         sql_texts)
from cachesync.schema.keys import INTERNAL_PREFIX
from cachesync.schema.keytext import TEXT_FORM_TYPES
from cachesync.schema.mapping import KeyTemplate, MappingSet, TableMapping

# table -> lower-cased column -> (information_schema data_type, collation or None)
ColumnTypes = Mapping[str, Mapping[str, tuple[str, str | None]]]


def field_texts(mapping: TableMapping, types: ColumnTypes | None) -> dict:
    """field -> the pattern of texts its column renders (offline: integers)."""
    fields = {f for t in mapping.keys for f in t.fields}
    if types is None:
        return dict.fromkeys(fields, INTEGER)
    live = types.get(mapping.table, {})
    return {f: sql_texts(live.get(f.lower(), (None, None))[0]) for f in fields}


def check_collisions(mappings: MappingSet, types: ColumnTypes | None, finding) -> list:
    """``ambiguous-key`` and ``overlapping-keys`` findings (``finding(check, table, text)``)."""
    texts = {name: field_texts(m, types) for name, m in mappings.tables.items()}
    everywhere = [(m.table, t) for m in mappings.tables.values() for t in m.keys]
    found = []
    for mapping in mappings.tables.values():
        mine = texts[mapping.table]
        for template in mapping.keys:
            found += [finding("ambiguous-key", mapping.table, _split_message(template, sep))
                      for sep in separators(template)
                      if sep.may_occur_in(mine[sep.left], mine[sep.right])]
            found += [finding("overlapping-keys", mapping.table, message)
                      for message in _overlaps(template, mine, everywhere, texts)]
    return found


def _split_message(template: KeyTemplate, sep) -> str:
    what = (f"nothing separates {{{sep.left}}} from {{{sep.right}}}" if not sep.text else
            f"a value of {{{sep.left}}} or {{{sep.right}}} may contain the separator "
            f"{sep.text!r}")
    return (f"{template.text!r}: {what}, so two different rows can render the same key; "
            "delete mode invalidates both, update mode invalidates such keys instead of "
            "writing them: use a separator the values cannot contain")


def _overlaps(template: KeyTemplate, mine: Mapping, everywhere: Iterable, texts: Mapping
              ) -> list[str]:
    sample = sample_key(template, mine)
    out = []
    for table, other in everywhere:
        if other is not template and other_reading(sample, template, [other], texts[table]):
            out.append(f"keys of {template.text!r} (e.g. {sample!r}) can also be keys of "
                       f"{other.text!r} ({table}): a row of one can invalidate or, in update "
                       "mode, overwrite the other's key; give each template its own literal "
                       "prefix")
    return out


def _key_columns(mapping: TableMapping, types: ColumnTypes | None) -> list[tuple[str, str, str]]:
    """(field, data type, collation or '') of each template field the live table has."""
    live = (types or {}).get(mapping.table, {})
    fields = dict.fromkeys(f for t in mapping.keys for f in t.fields)
    return [(f, *(x or "" for x in live[f.lower()])) for f in fields if f.lower() in live]


def check_collations(mapping: TableMapping, types: ColumnTypes | None, finding) -> list:
    """``ci-collation`` findings: template fields under a case-insensitive collation."""
    return [finding("ci-collation", mapping.table,
                    f"column {f!r} uses the collation {collation}: MySQL treats 'abc' "
                    "and 'ABC ' as the same value, but keys are byte-exact, so a key the "
                    "application builds from other text than the stored one is never "
                    "invalidated; build keys from the stored value (or normalise it, e.g. "
                    "LOWER(TRIM(...)), in both the column and the application)")
            for f, _, collation in _key_columns(mapping, types) if collation.endswith("_ci")]


def check_binary_forms(mapping: TableMapping, types: ColumnTypes | None, finding) -> list:
    """``key-text-changed`` findings: key columns whose key text this version renders
    differently from earlier ones (INET4/INET6/UUID: the server's text, formerly 0x-hex of
    their bytes; TIME: negative values with a fraction; MySQL JSON: the server's text,
    formerly a rendering of the library's dict), so keys cached before the upgrade
    under the old text are not invalidated by later changes."""
    out = []
    for f, data_type, _ in _key_columns(mapping, types):
        kind = data_type.lower()
        if kind in TEXT_FORM_TYPES:
            out.append(finding(
                "key-text-changed", mapping.table,
                f"column {f!r} is {kind.upper()}: its key text is the server's text (e.g. "
                "10.0.0.1, ::ffff:1.2.3.4, 123e4567-e89b-12d3-a456-426614174000); cachesync "
                "before this version rendered 0x-hex of its bytes: after upgrading, flush the "
                "keys cached under the old text once (cachesync resync) and build the "
                "application's keys from the column's text"))
        elif kind == "json":           # MySQL's JSON (MariaDB reports a JSON column as longtext)
            out.append(finding(
                "key-text-changed", mapping.table,
                f"column {f!r} is JSON: its key text is the server's text ({{\"a\": 1}}, as "
                "CAST(col AS CHAR) prints it); cachesync before this version rendered MySQL "
                "JSON keys (and update-mode values) in another form: after upgrading, flush "
                "the keys cached under it once (cachesync resync)"))
        elif kind == "time":
            out.append(finding(
                "key-text-changed", mapping.table,
                f"column {f!r} is TIME: a negative value with a fraction (-00:00:00.000001) "
                "renders as the server prints it; cachesync before this version rendered "
                "such values wrong (-00:00:00.999999): after upgrading, flush the keys of "
                "such rows once (cachesync resync)"))
    return out


def check_reserved(mapping: TableMapping, types: ColumnTypes | None, finding) -> list:
    """``reserved-key`` findings: a template whose keys can begin with ``cachesync:`` (its
    text before the first field is the start of that prefix, and the field's column can
    render the rest); the consumer dead-letters such rows (reason ``reserved_key``)."""
    texts = field_texts(mapping, types)
    out = []
    for template in mapping.keys:
        head, first = template.parts[0], template.parts[1]
        rest = INTERNAL_PREFIX[len(head):]
        if INTERNAL_PREFIX.startswith(head) and texts[first].fullmatch(rest):
            out.append(finding("reserved-key", mapping.table,
                               f"{template.text!r}: a row whose {{{first}}} begins with {rest!r} "
                               f"renders a key under {INTERNAL_PREFIX!r} (cachesync's own); the "
                               "consumer dead-letters it (reserved_key): start the template "
                               "with a literal prefix"))
    return out


def live_column_types(conn, tables: Iterable[str]) -> dict[str, dict[str, tuple[str, str | None]]]:
    """``db.table -> column (lower-cased) -> (data_type, collation)`` from information_schema;
    absent tables are left out."""
    out: dict[str, dict[str, tuple[str, str | None]]] = {}
    pairs = [t.split(".", 1) for t in tables]
    if not pairs:
        return out
    where = " OR ".join(["(table_schema = %s AND table_name = %s)"] * len(pairs))
    with conn.cursor() as cur:
        cur.execute("SELECT table_schema, table_name, column_name, data_type, collation_name "
                    f"FROM information_schema.columns WHERE {where}",
                    [v for pair in pairs for v in pair])
        for schema, table, column, data_type, collation in cur.fetchall():
            out.setdefault(f"{schema}.{table}", {})[column.lower()] = (data_type, collation)
    return out
