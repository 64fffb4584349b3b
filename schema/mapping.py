"""The mapping-config model: which Redis keys a table's rows map to, and how to treat them.

Parsed from plain data (the YAML loader lives in ``cachesync.config``); every
error names the source, the table and the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Mapping

from cachesync.schema.errors import ConfigError, PoisonError
from cachesync.schema.keys import INTERNAL_PREFIX
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
}
_FIELDS = frozenset(FIELD_DOCS)
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
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES
    # outbox events' explicit keys must match one of these (cachesync.schema.trust); none = refused
    explicit_keys: tuple[KeyPattern, ...] = ()

    @property
    def updates(self) -> bool:
        return self.mode == "update"

    @cached_property
    def single_field_templates(self) -> tuple[tuple[str, str, str], ...] | None:
        """(text before, field, text after) of each key template when every one names a
        single column (the usual mapping), else None."""
        singles = tuple(t._single for t in self.keys)
        return None if any(s is None for s in singles) else singles

    @property
    def tombstone_s(self) -> int:
        return self.tombstone_ttl_s or self.ttl_s

    @property
    def db(self) -> str:
        return self.table.split(".", 1)[0]

    @property
    def name(self) -> str:
        return self.table.split(".", 1)[1]


@dataclass(frozen=True)
class MappingSet:
    """All table mappings, looked up by ``db.table``."""

    tables: Mapping[str, TableMapping]

    def get(self, db: str, table: str) -> TableMapping | None:
        return self.tables.get(f"{db}.{table}")

    @property
    def schemas(self) -> tuple[str, ...]:
        return tuple(sorted({m.db for m in self.tables.values()}))


def parse_mappings(raw: Any, source: str = "<config>") -> MappingSet:
    """Build a MappingSet from ``{"db.table": {...}}``; raises ConfigError naming the field."""
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError(f"{source}: 'tables' must be a non-empty mapping of db.table -> settings")
    tables = {}
    for name, spec in raw.items():
        tables[str(name)] = _parse_table(str(name), spec, source)
    return MappingSet(tables)


def _parse_table(name: str, spec: Any, source: str) -> TableMapping:
    where = f"{source}: tables.{name}"
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
    templates = _templates(spec, where, required=not explicit)
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
    return TableMapping(
        table=name, keys=templates, mode=mode, ttl_s=ttl, ttl_jitter=float(jitter),
        value_format=value_format,
        value_columns=tuple(value_columns) if value_columns else None,
        version_column=version_column,
        tombstone_ttl_s=_positive_int(spec, "tombstone_ttl", None, where),
        double_delete_s=float(double_delete) if double_delete is not None else None,
        max_value_bytes=_positive_int(spec, "max_value_bytes", DEFAULT_MAX_VALUE_BYTES, where),
        explicit_keys=explicit,
    )


def _templates(spec: Mapping, where: str, required: bool) -> tuple[KeyTemplate, ...]:
    """The parsed ``keys``; optional only for an entry that allows explicit keys (an
    outbox aggregate type whose events carry their keys)."""
    keys = spec.get("keys", None if required else [])
    if not isinstance(keys, list) or (required and not keys) \
            or not all(isinstance(k, str) for k in keys):
        raise ConfigError(f"{where}.keys: expected a non-empty list of key templates")
    try:
        templates = tuple(KeyTemplate.parse(k) for k in keys)
    except ValueError as e:
        raise ConfigError(f"{where}.keys: {e}") from None
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
