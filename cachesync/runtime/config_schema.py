"""The settings as a JSON Schema (for editors and CI checks) and as an effective view with
where each value came from; both read the declarations in :mod:`cachesync.runtime.config`."""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any

from cachesync.runtime.config import SECTIONS, Secret, Settings, mask_url
from cachesync.schema.mapping import _FIELDS as TABLE_FIELDS

_TYPES = {"int": "integer", "float": "number", "bool": "boolean", "str": "string",
          "Secret": "string", "Properties": "object"}


def json_schema() -> dict:
    """A JSON Schema (2020-12) of the settings file: every section, field, type, default and
    bound; unknown sections and fields are refused, as ``cachesync`` refuses them."""
    sections = {name: {"type": "object", "additionalProperties": False,
                       "properties": {f.name: _field_schema(f) for f in fields(cls)}}
                for name, cls in SECTIONS.items()}
    table = {"type": "object", "additionalProperties": False, "required": [],
             "properties": {name: {} for name in sorted(TABLE_FIELDS)}}
    sections["tables"] = {"type": "object", "minProperties": 1, "additionalProperties": table,
                          "propertyNames": {"pattern": r"^(?:re:.+|[^.]+\.[^.]+)$"},
                          "description": "db.table, a glob (db.user_*) or re:<expression> "
                                         "-> key templates and mode"}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://cachesync.invalid/settings.schema.json",
            "title": "cachesync settings", "type": "object", "additionalProperties": False,
            "required": ["tables"], "properties": sections}


def _field_schema(f) -> dict:
    out: dict[str, Any] = {"type": _TYPES.get(f.type, "string")}
    if f.default is not MISSING:
        out["default"] = shown(f.default)
    if f.type == "Secret":
        out["writeOnly"] = True
    doc = f.metadata.get("doc")
    if doc:
        out["description"] = doc
    rule = f.metadata.get("rule")
    if rule is not None:
        out.update(_rule_schema(rule))
    return out


def _rule_schema(rule) -> dict:
    out: dict[str, Any] = {}
    if rule.lo is not None:
        out["exclusiveMinimum" if rule.lo_open else "minimum"] = rule.lo
    if rule.hi is not None:
        out["maximum"] = rule.hi
    if rule.choices is not None:
        out["enum"] = list(rule.choices)
    if rule.pattern is not None:
        out["pattern"] = f"^(?:{rule.pattern})$"
    if rule.what:
        out.setdefault("description", rule.what)
    return out


def effective(settings: Settings, origins: dict[str, str]) -> dict[str, dict[str, Any]]:
    """``{"mysql.port": {"value": 3306, "from": "default"}, ...}``; secrets masked."""
    out = {}
    for name in SECTIONS:
        section = getattr(settings, name)
        for f in fields(section):
            key = f"{name}.{f.name}"
            out[key] = {"value": shown(getattr(section, f.name)), "from": origins.get(key, "default")}
    out["tables"] = {"value": sorted(m.table for m in settings.tables.entries),
                     "from": settings.origin}
    return out


def shown(value: Any) -> Any:
    """A value as it may be printed: a secret URL with its password masked, any other
    secret as ``***`` (empty stays empty)."""
    if isinstance(value, Secret):
        if not value:
            return ""
        return mask_url(value) if "://" in value else "***"
    return value
