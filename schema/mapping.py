"""The mapping-config model: which Redis keys a table's rows map to, and how to treat them.

Parsed from plain data (the YAML loader lives in ``cachesync.config``); every
error names the source, the table and the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from schema.errors import ConfigError, PoisonError
from schema.values import canonical_text

MODES = ("delete", "update")
DEFAULT_TTL_S = 3600
DEFAULT_TTL_JITTER = 0.1
_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_$]*)\}")
_TABLE = re.compile(r"^[^.\s]+\.[^.\s]+$")


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
        values = {}
        for name in self.fields:
            if name not in row:
                raise MissingColumnError(self.text, name)
            value = row[name]
            if value is None:
                return None
            values[name] = canonical_text(value)
        return _FIELD.sub(lambda m: values[m.group(1)], self.text)


@dataclass(frozen=True)
class TableMapping:
    """How one table's changes reach the cache."""

    table: str                       # "db.table"
    keys: tuple[KeyTemplate, ...]
    mode: str = "delete"
    ttl_s: int = DEFAULT_TTL_S
    ttl_jitter: float = DEFAULT_TTL_JITTER
    version_column: str | None = None
    value_columns: tuple[str, ...] | None = None

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
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{where}: expected a mapping with at least 'keys'")
    unknown = set(spec) - {"keys", "mode", "ttl", "ttl_jitter", "version_column", "value_columns"}
    if unknown:
        raise ConfigError(f"{where}: unknown field(s) {sorted(unknown)}")
    keys = spec.get("keys")
    if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
        raise ConfigError(f"{where}.keys: expected a non-empty list of key templates")
    try:
        templates = tuple(KeyTemplate.parse(k) for k in keys)
    except ValueError as e:
        raise ConfigError(f"{where}.keys: {e}") from None
    mode = spec.get("mode", "delete")
    if mode == "update" or "version_column" in spec or "value_columns" in spec:
        raise ConfigError(f"{where}: update mode (mode, version_column, value_columns) is not "
                          "available in this version; use mode: delete")
    if mode not in MODES:
        raise ConfigError(f"{where}.mode: expected one of {list(MODES)}, got {mode!r}")
    ttl = spec.get("ttl", DEFAULT_TTL_S)
    if not isinstance(ttl, int) or isinstance(ttl, bool) or ttl <= 0:
        raise ConfigError(f"{where}.ttl: expected a positive number of seconds, got {ttl!r}")
    jitter = spec.get("ttl_jitter", DEFAULT_TTL_JITTER)
    if not isinstance(jitter, (int, float)) or not 0 <= jitter < 1:
        raise ConfigError(f"{where}.ttl_jitter: expected a fraction in [0, 1), got {jitter!r}")
    value_columns = spec.get("value_columns")
    if value_columns is not None and (not isinstance(value_columns, list) or not value_columns):
        raise ConfigError(f"{where}.value_columns: expected a non-empty list of columns")
    return TableMapping(
        table=name, keys=templates, mode=mode, ttl_s=ttl, ttl_jitter=float(jitter),
        version_column=spec.get("version_column"),
        value_columns=tuple(value_columns) if value_columns else None,
    )
