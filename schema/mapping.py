"""The mapping-config model: which Redis keys a table's rows map to, and how to treat them.

Parsed from plain data (the YAML loader lives in ``cachesync.runtime.config``); every
error names the source, the table and the field.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Iterable, Mapping

from cachesync.schema.errors import ConfigError, PoisonError
from cachesync.schema.key_formats import FORMATS, KeyFormat
from cachesync.schema.keys import INTERNAL_PREFIX
from cachesync.schema.patterns import TablePattern, globs_overlap, is_pattern
from cachesync.schema.sqlnames import qualified
from cachesync.schema.trust import KeyPattern
from cachesync.schema.values import canonical_text

MODES = ("delete", "update")
VALUE_FORMATS = ("json", "hash")
DEFAULT_TTL_S = 3600
DEFAULT_TTL_JITTER = 0.1
# A rendered value larger than this is not written: the key is invalidated instead
# (readers refill it), so one huge row cannot stall Redis or be lost.
DEFAULT_MAX_VALUE_BYTES = 512 * 1024
# A table entry's fields: name -> (default as the reference shows it, user-facing doc). The
# configuration reference (docs/reference/configuration.md) is generated from this.
FIELD_DOCS: dict[str, tuple[str, str]] = {
    "keys": ("required", "key templates, `{column}` fields; never under `cachesync:` (refused at "
             "load). Optional in an entry with `explicit_keys` only (an outbox aggregate type)"),
    "key_format": ("`framework.key_format`", "the form the application's cache gives its keys: "
                   "`plain` (the template is the Redis key), `django`, `rails`, `laravel` or "
                   "`spring`: the template is the key as the application passes it to its "
                   "cache (`author:{id}`), and the prefixes and version of the `framework` "
                   "section are added as that framework adds them"),
    "explicit_keys": ("none", "the explicit keys (outbox `keys=`) events of this table/aggregate "
                      "type may delete: patterns, `{name}` = one key segment (no `:`), `*` = any "
                      "text. Without it, explicit keys are refused. An entry with "
                      "`explicit_keys` only names an outbox aggregate type: give it a name no "
                      "real table of `relay.outbox_db` has"),
    "mode": ("`delete`", "`delete`: invalidate (cache-aside); `update`: write the new value, "
             "fenced by version"),
    "ttl": (f"`{DEFAULT_TTL_S}`", "TTL of every value update mode writes (and the one your "
            "`read_through` fills should use)"),
    "ttl_jitter": (f"`{DEFAULT_TTL_JITTER}`", "the TTL is shortened by up to this fraction at "
                   "random, so keys written together expire apart"),
    "value": ("`json`", "update mode: `json` (a string, `GET`) or `hash` (one field per non-NULL "
              "column, `HGETALL`)"),
    "value_columns": ("every column", "update mode: the columns written"),
    "version_column": ("source position", "update mode: a column that grows with the row "
                       "(`version`, `updated_at`); the source position breaks ties"),
    "tombstone_ttl": ("`ttl`", "update mode: how long a delete's version tombstone refuses "
                      "older updates"),
    "max_value_bytes": (f"`{DEFAULT_MAX_VALUE_BYTES}`", "update mode: a larger value is not "
                        "written; the key is invalidated (and fenced) instead"),
    "double_delete": ("off", "delete mode: seconds after which the keys are deleted a second "
                      "time (the \"delayed double delete\")"),
    "prefill": ("off", "delete mode: `json` or `hash`, the value `cachesync snapshot` may fill "
                "the table's missing keys with, rendered as update mode renders it (it must be "
                "what your readers cache); each fill is lease-guarded like `read_through`'s. "
                "Off: snapshot leaves the table to your readers"),
    "prefill_columns": ("every column", "delete mode, with `prefill`: the columns of the value"),
    "watch_columns": ("every column", "an UPDATE that changes none of these columns invalidates "
                      "and writes nothing (counted in `cachesync_consumer_unwatched_updates`); key template "
                      "columns and, in update mode, value and version columns are always watched"),
    "ignore_columns": ("none", "an UPDATE that changes only these columns invalidates and writes "
                       "nothing; not with `watch_columns`"),
}
_FIELDS = frozenset(FIELD_DOCS)
# fields a template may name that are not columns: the row's database and table (patterns)
TABLE_FIELDS = ("_db", "_table")
_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_$]*)\}")
_TABLE = re.compile(r"^[^.\s]+\.[^.\s]+$")
_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")


class MissingColumnError(PoisonError):
    """A key template names a column the row image does not have."""

    def __init__(self, template: str, column: str):
        super().__init__("missing_column", f"template {template!r} names column {column!r}, "
                                           "which the row image does not have")


@dataclass(frozen=True)
class KeyTemplate:
    """``user:email:{email}``: literal text with ``{column}`` fields."""

    text: str
    fields: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> "KeyTemplate":
        """Raises ValueError when the template has no field or an unbalanced brace."""
        fields = tuple(_FIELD.findall(text))
        if not fields:
            raise ValueError(f"key template {text!r} names no {{column}}")
        literal = _FIELD.sub("", text)
        if "{" in literal or "}" in literal:
            raise ValueError(f"key template {text!r} has an unbalanced brace")
        return cls(text, fields)

    def render(self, row: Mapping[str, Any]) -> str | None:
        """The key for ``row``, or None when a field is NULL (no key exists for it).

        Raises MissingColumnError when the row has no such column.
        """
        single = self._single
        if single is not None:                  # one field, the usual template: no list, no format
            head, name, tail = single
            value = self._column(row, name)
            if value is None:
                return None
            return head + (value if type(value) is str else canonical_text(value)) + tail
        values = []
        for name in self.fields:
            value = self._column(row, name)
            if value is None:
                return None
            values.append(canonical_text(value))
        return self._format.format(*values)

    def _column(self, row: Mapping[str, Any], name: str) -> Any:
        try:
            return row[name]
        except KeyError:
            raise MissingColumnError(self.text, name) from None

    @cached_property
    def parts(self) -> list[str]:
        """``[literal, field, literal, ..., literal]``: the text split at its fields."""
        return _FIELD.split(self.text)

    @cached_property
    def glob(self) -> str:
        """The Redis SCAN pattern of every key this template renders: ``user:email:*``
        (the literal text glob-escaped, each field ``*``)."""
        return "*".join(_GLOB_SPECIAL.sub(r"\\\1", part) for part in _FIELD.split(self.text)[::2])

    @cached_property
    def regex(self) -> re.Pattern:
        """Full-match pattern of this template's keys, a field being text without ``:`` (the
        key separator), so ``user:{id}`` does not claim ``user:email:x`` of another template."""
        parts = _FIELD.split(self.text)
        return re.compile("".join(re.escape(p) if i % 2 == 0 else "[^:]+"
                                  for i, p in enumerate(parts)))

    @cached_property
    def _single(self) -> tuple[str, str, str] | None:
        """(text before, field, text after) of a one-field template, else None."""
        parts = self.parts
        return (parts[0], parts[1], parts[2]) if len(parts) == 3 else None

    @cached_property
    def _format(self) -> str:
        """The template as a positional format string: ``user:{0}``, literal braces doubled."""
        parts, at = [], 0
        for i, m in enumerate(_FIELD.finditer(self.text)):
            parts += [self.text[at:m.start()].replace("{", "{{").replace("}", "}}"), "{%d}" % i]
            at = m.end()
        return "".join([*parts, self.text[at:].replace("{", "{{").replace("}", "}}")])


@dataclass(frozen=True)
class TableMapping:
    """How one table's changes reach the cache."""

    table: str                       # "db.table"
    keys: tuple[KeyTemplate, ...]    # empty for an outbox aggregate type with explicit keys only
    mode: str = "delete"             # "delete": invalidate; "update": write the new value, fenced
    ttl_s: int = DEFAULT_TTL_S
    ttl_jitter: float = DEFAULT_TTL_JITTER
    value_format: str = "json"       # update mode: "json" string or Redis "hash"
    value_columns: tuple[str, ...] | None = None    # update mode; None = every column
    version_column: str | None = None               # update mode; None = source position
    tombstone_ttl_s: int | None = None              # update mode; None = ttl_s
    double_delete_s: float | None = None            # delete mode: delayed second delete
    prefill: str | None = None                      # delete mode: snapshot's value format
    prefill_columns: tuple[str, ...] | None = None  # delete mode, with prefill; None = every one
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES
    # outbox events' explicit keys must match one of these (cachesync.schema.trust); none = refused
    explicit_keys: tuple[KeyPattern, ...] = ()
    # column filters: an UPDATE that changes no watched column invalidates and writes nothing
    watch_columns: frozenset[str] | None = None     # None: every column
    ignore_columns: frozenset[str] = frozenset()
    pattern: str | None = None       # the tables: entry (a pattern) this table was matched by

    @cached_property
    def always_watched(self) -> frozenset[str] | None:
        """Columns no filter can leave out: the key fields and, in update mode, the version
        column and the value columns (every column when value_columns is not given: None)."""
        cols = {f for t in self.keys for f in t.fields}
        if self.updates:
            if self.value_columns is None:
                return None
            cols.update(self.value_columns)
            cols.update([self.version_column] if self.version_column else [])
        return frozenset(cols)

    @property
    def filters_columns(self) -> bool:
        """The table has a column filter that can leave an update out."""
        return ((self.watch_columns is not None or bool(self.ignore_columns))
                and self.always_watched is not None)

    def watches(self, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> bool:
        """Whether an update from ``before`` to ``after`` changes a watched column. A column
        missing from either image (a partial row image) counts as changed."""
        if before is None or after is None or not self.filters_columns:
            return True
        always = self.always_watched
        for column in before.keys() | after.keys():
            if column in before and column in after and before[column] == after[column]:
                continue
            if column in always or (column not in self.ignore_columns if self.watch_columns
                                    is None else column in self.watch_columns):
                return True
        return False

    @property
    def updates(self) -> bool:
        return self.mode == "update"

    @cached_property
    def single_field_templates(self) -> tuple[tuple[str, str, str], ...] | None:
        """(text before, field, text after) of each key template when every one names a
        single column (the usual mapping), else None."""
        singles = tuple(t._single for t in self.keys)
        return None if any(s is None for s in singles) else singles

    @cached_property
    def prefill_mapping(self) -> "TableMapping | None":
        """A delete-mode table with ``prefill``: the update-mode twin that renders the values
        ``snapshot`` fills its keys with (never applied to changes); else None."""
        if self.prefill is None:
            return None
        return dataclasses.replace(self, mode="update", value_format=self.prefill,
                                   value_columns=self.prefill_columns, prefill=None,
                                   prefill_columns=None, double_delete_s=None)

    @property
    def tombstone_s(self) -> int:
        return self.tombstone_ttl_s or self.ttl_s

    @property
    def db(self) -> str:
        return self.table.split(".", 1)[0]

    @property
    def name(self) -> str:
        return self.table.split(".", 1)[1]


class AmbiguousTableError(ConfigError):
    """Two pattern entries match one table."""


@dataclass(frozen=True)
class MappingSet:
    """All table mappings, looked up by ``db.table``: exact entries first, then patterns
    (``cachesync.schema.patterns``), a pattern's mapping instantiated once per table."""

    tables: Mapping[str, TableMapping]                     # exact entries
    patterns: tuple[tuple[TablePattern, TableMapping], ...] = ()
    # (db, table) -> the mapping a pattern gave it, or None; filled on first lookup
    _resolved: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    def get(self, db: str, table: str) -> TableMapping | None:
        """The mapping of ``db.table``, or None; raises AmbiguousTableError when two
        patterns match it (and no exact entry does)."""
        mapping = self.tables.get(f"{db}.{table}")
        if mapping is not None or not self.patterns:
            return mapping
        try:
            return self._resolved[(db, table)]
        except KeyError:
            mapping = self._resolved[(db, table)] = self._match(db, table)
            return mapping

    def _match(self, db: str, table: str) -> TableMapping | None:
        found = [(p, m) for p, m in self.patterns if p.matches(db, table)]
        if len(found) > 1:
            raise AmbiguousTableError(f"table {db}.{table} matches two tables: entries, "
                                      f"{found[0][0].text!r} and {found[1][0].text!r}; make "
                                      "them disjoint or map the table by its exact name")
        return instantiate(found[0][1], db, table) if found else None

    def is_mapped_loosely(self, db: str, table: str) -> bool:
        """A name found in a statement (lower-cased) is mapped, comparing case-insensitively."""
        return any(p.matches(db, table, loose=True) for p, _ in self.patterns) or any(
            f"{db}.{table}" == name.lower() for name in self.tables)

    def resolved(self) -> list[TableMapping]:
        """The tables patterns have matched so far (looked up or ``known``)."""
        return [m for m in list(self._resolved.values()) if m is not None]

    def known(self, names: Iterable[tuple[str, str]]) -> list[TableMapping]:
        """Match existing tables (information_schema's) against the patterns; their
        mappings; raises AmbiguousTableError naming the first table two patterns match."""
        return [m for m in (self.get(db, t) for db, t in names)
                if m is not None and m.pattern is not None]

    @property
    def entries(self) -> list[TableMapping]:
        """Every entry as written: exact tables, then pattern templates (``table`` is the
        pattern's text)."""
        return [*self.tables.values(), *(m for _, m in self.patterns)]

    def replace_each(self, change: Callable[[TableMapping], TableMapping]) -> "MappingSet":
        """The same entries, each passed through ``change``."""
        return MappingSet({n: change(m) for n, m in self.tables.items()},
                          tuple((p, change(m)) for p, m in self.patterns))

    def keyed_schemas(self) -> set[str]:
        """The databases whose tables' changes reach the cache: of exact entries with key
        templates, of such patterns whose database part is literal, and of the tables
        patterns have matched so far."""
        dbs = {m.db for m in self.tables.values() if m.keys}
        dbs |= {p.glob[0] for p, m in self.patterns
                if m.keys and p.glob is not None and not set("*?[") & set(p.glob[0])}
        return dbs | {m.db for m in self.resolved() if m.keys}

    @property
    def schemas(self) -> tuple[str, ...]:
        return tuple(sorted({m.db for m in self.tables.values()}))


def parse_mappings(raw: Any, source: str = "<config>",
                   key_format: KeyFormat = KeyFormat()) -> MappingSet:
    """Build a MappingSet from ``{"db.table": {...}}``, each key template in the form of
    ``key_format`` (an entry's own ``key_format`` names another form with the same prefixes
    and version); raises ConfigError naming the field."""
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError(f"{source}: 'tables' must be a non-empty mapping of db.table -> settings")
    tables, patterns = {}, []
    for name, spec in raw.items():
        name = str(name)
        if is_pattern(name):
            try:
                pattern = TablePattern.parse(name)
            except ValueError as e:
                raise ConfigError(f"{source}: tables.{name}: {e}") from None
            patterns.append((pattern, _parse_table(name, spec, source, key_format, pattern=True)))
        else:
            tables[name] = instantiate(_parse_table(name, spec, source, key_format),
                                       *name.split(".", 1))
    _check_disjoint(patterns, source)
    return MappingSet(tables, tuple(patterns))


def _check_disjoint(patterns: list, source: str) -> None:
    """Two globs that can name one table are a load error (regular expressions are
    checked against the live tables: ``MappingSet.known``)."""
    for i, (a, _) in enumerate(patterns):
        for b, _ in patterns[i + 1:]:
            if globs_overlap(a, b):
                raise ConfigError(f"{source}: tables: entries {a.text!r} and {b.text!r} can "
                                  "match the same table; make them disjoint or map the "
                                  "table by its exact name (exact names win over patterns)")


def instantiate(mapping: TableMapping, db: str, table: str) -> TableMapping:
    """``mapping`` for the table ``db.table``: ``{_db}``/``{_table}`` in its templates
    replaced by the names; raises ConfigError when a name cannot appear in a key."""
    keys = mapping.keys
    if any(f in TABLE_FIELDS for t in keys for f in t.fields):
        try:
            keys = tuple(KeyTemplate.parse(t.text.replace("{_db}", db).replace("{_table}", table))
                         for t in keys)
        except ValueError as e:
            raise ConfigError(f"tables.{mapping.table}: table {db}.{table}: {e}") from None
    if not is_pattern(mapping.table):            # an exact entry
        return mapping if keys is mapping.keys else dataclasses.replace(mapping, keys=keys)
    return dataclasses.replace(mapping, table=f"{db}.{table}", keys=keys, pattern=mapping.table)


def _parse_table(name: str, spec: Any, source: str, key_format: KeyFormat,
                 pattern: bool = False) -> TableMapping:
    where = f"{source}: tables.{name}"
    if not pattern:
        if not _TABLE.match(name):
            raise ConfigError(f"{where}: table must be written as db.table")
        try:
            qualified(*name.split(".", 1))      # what MySQL allows: 1 to 64 characters, no NUL
        except ValueError as e:
            raise ConfigError(f"{where}: {e}") from None
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where}: expected a mapping with at least 'keys'")
    unknown = set(spec) - _FIELDS
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {sorted(unknown)}; "
                          f"expected some of {sorted(_FIELDS)}")
    explicit = _explicit_keys(spec, where)
    templates = _templates(spec, where, required=not explicit,
                           key_format=_entry_format(spec, key_format, where))
    mode = spec.get("mode", "delete")
    if mode not in MODES:
        raise ConfigError(f"{where}.mode: expected one of {list(MODES)}, got {mode!r}")
    ttl = _positive_int(spec, "ttl", DEFAULT_TTL_S, where)
    jitter = spec.get("ttl_jitter", DEFAULT_TTL_JITTER)
    if not isinstance(jitter, (int, float)) or isinstance(jitter, bool) or not 0 <= jitter < 1:
        raise ConfigError(f"{where}.ttl_jitter: expected a fraction in [0, 1), got {jitter!r}")
    update_only = sorted({"value", "value_columns", "version_column", "tombstone_ttl"} & set(spec))
    if mode != "update" and update_only:
        raise ConfigError(f"{where}: {', '.join(update_only)} only apply to mode: update")
    if mode == "update" and "double_delete" in spec:
        raise ConfigError(f"{where}.double_delete: only applies to mode: delete (update mode "
                          "writes fenced values; a second delete would only cause misses)")
    value_format = spec.get("value", "json")
    if value_format not in VALUE_FORMATS:
        raise ConfigError(f"{where}.value: expected one of {list(VALUE_FORMATS)}, "
                          f"got {value_format!r}")
    value_columns = spec.get("value_columns")
    if value_columns is not None and (not isinstance(value_columns, list) or not value_columns
                                      or not all(isinstance(c, str) for c in value_columns)):
        raise ConfigError(f"{where}.value_columns: expected a non-empty list of column names")
    version_column = spec.get("version_column")
    if version_column is not None and (not isinstance(version_column, str) or not version_column):
        raise ConfigError(f"{where}.version_column: expected a column name such as "
                          f"updated_at or version, got {version_column!r}")
    double_delete = spec.get("double_delete")
    if double_delete is not None and (not isinstance(double_delete, (int, float))
                                      or isinstance(double_delete, bool)
                                      or not 0 < double_delete <= 60):
        raise ConfigError(f"{where}.double_delete: expected a delay in seconds in (0, 60], "
                          f"got {double_delete!r}")
    watch, ignore = _column_filter(spec, where)
    prefill, prefill_columns = _prefill(spec, mode, templates, where)
    return TableMapping(
        table=name, keys=templates, mode=mode, ttl_s=ttl, ttl_jitter=float(jitter),
        watch_columns=watch, ignore_columns=ignore,
        value_format=value_format,
        value_columns=tuple(value_columns) if value_columns else None,
        version_column=version_column,
        tombstone_ttl_s=_positive_int(spec, "tombstone_ttl", None, where),
        double_delete_s=float(double_delete) if double_delete is not None else None,
        max_value_bytes=_positive_int(spec, "max_value_bytes", DEFAULT_MAX_VALUE_BYTES, where),
        explicit_keys=explicit, prefill=prefill, prefill_columns=prefill_columns,
    )


def _prefill(spec: Mapping, mode: str, templates, where: str
             ) -> tuple[str | None, tuple[str, ...] | None]:
    """(prefill, prefill_columns): refused in update mode (snapshot writes ``value`` there)
    and without a key template (nothing to fill)."""
    prefill, columns = spec.get("prefill"), spec.get("prefill_columns")
    if prefill is None:
        if columns is not None:
            raise ConfigError(f"{where}.prefill_columns: only applies with prefill")
        return None, None
    if mode == "update":
        raise ConfigError(f"{where}.prefill: only applies to mode: delete (snapshot fills an "
                          "update-mode table with its `value`, through the version fence)")
    if prefill not in VALUE_FORMATS:
        raise ConfigError(f"{where}.prefill: expected one of {list(VALUE_FORMATS)}, "
                          f"got {prefill!r}")
    if not templates:
        raise ConfigError(f"{where}.prefill: no key template to fill")
    if columns is not None and (not isinstance(columns, list) or not columns
                                or not all(isinstance(c, str) and c for c in columns)):
        raise ConfigError(f"{where}.prefill_columns: expected a non-empty list of column names")
    return prefill, tuple(columns) if columns else None


def _column_filter(spec: Mapping, where: str) -> tuple[frozenset[str] | None, frozenset[str]]:
    """(watch_columns or None, ignore_columns): at most one of them given."""
    if "watch_columns" in spec and "ignore_columns" in spec:
        raise ConfigError(f"{where}: give watch_columns or ignore_columns, not both")
    out = {}
    for name in ("watch_columns", "ignore_columns"):
        value = spec.get(name)
        if value is not None and (not isinstance(value, list) or not value
                                  or not all(isinstance(c, str) and c for c in value)):
            raise ConfigError(f"{where}.{name}: expected a non-empty list of column names")
        out[name] = frozenset(value) if value else None
    return out["watch_columns"], out["ignore_columns"] or frozenset()


def _entry_format(spec: Mapping, key_format: KeyFormat, where: str) -> KeyFormat:
    """The entry's ``key_format`` (the section's prefixes and version), else ``key_format``."""
    name = spec.get("key_format", key_format.name)
    if name not in FORMATS:
        raise ConfigError(f"{where}.key_format: expected one of {list(FORMATS)}, got {name!r}")
    return key_format if name == key_format.name else dataclasses.replace(key_format, name=name)


def _templates(spec: Mapping, where: str, required: bool,
               key_format: KeyFormat = KeyFormat()) -> tuple[KeyTemplate, ...]:
    """The parsed ``keys``, each in the form of ``key_format``; optional only for an entry
    that allows explicit keys (an outbox aggregate type whose events carry their keys)."""
    keys = spec.get("keys", None if required else [])
    if not isinstance(keys, list) or (required and not keys) \
            or not all(isinstance(k, str) for k in keys):
        raise ConfigError(f"{where}.keys: expected a non-empty list of key templates")
    try:
        templates = tuple(KeyTemplate.parse(key_format.full(k)) for k in keys)
    except ValueError as e:
        raise ConfigError(f"{where}.keys: {e}") from None
    tableonly = [t.text for t in templates if set(t.fields) <= set(TABLE_FIELDS)]
    if tableonly:
        raise ConfigError(f"{where}.keys: {tableonly[0]!r} names no column besides "
                          "{_db}/{_table}: every row would render the same key")
    reserved = [t.text for t in templates if t.text.startswith(INTERNAL_PREFIX)]
    if reserved:
        raise ConfigError(f"{where}.keys: {reserved[0]!r}: keys under {INTERNAL_PREFIX!r} are "
                          "cachesync's own (versions, leases); choose another prefix")
    return templates


def _explicit_keys(spec: Mapping, where: str) -> tuple[KeyPattern, ...]:
    """The parsed ``explicit_keys`` allow-list (empty when absent)."""
    raw = spec.get("explicit_keys", [])
    if not isinstance(raw, list):
        raise ConfigError(f"{where}.explicit_keys: expected a list of key patterns such as "
                          "'leaderboard:{board}' or 'page:*'")
    try:
        return tuple(KeyPattern.parse(p) for p in raw)
    except ValueError as e:
        raise ConfigError(f"{where}.explicit_keys: {e}") from None


def _positive_int(spec: Mapping, name: str, default, where: str):
    value = spec.get(name, default)
    if value is default:
        return value
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{where}.{name}: expected a positive whole number, got {value!r}")
    return value
