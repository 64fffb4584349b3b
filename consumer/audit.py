"""Audit verdicts: what a table's rows say its cached keys should hold (no I/O imports).

For an update-mode table cachesync writes the values itself, so a cached value must
equal :func:`cachesync.consumer.core.writes.render_value` of the row. A delete-mode table's
values are written by the application (cache-aside); when such a value is a JSON
object, every field it shares with the row's columns must equal the row's value
(rendered the same way), otherwise the value cannot be checked and is "unverified".
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from cachesync.consumer.core.writes import KIND_HASH, render_value
from cachesync.schema.mapping import TableMapping

CONSISTENT, STALE, MISSING, UNVERIFIED = "consistent", "stale", "missing", "unverified"
KEYS_IN_REPORT = 100          # stale/extra keys listed in the report (all are repaired)


def expected_entries(row: Mapping[str, Any], mapping: TableMapping) -> list[tuple[str, tuple]]:
    """``[(key, (kind, expected text))]`` for one row: the keys its templates render
    (NULL fields render none) and the value update mode would write (delete mode too:
    its JSON form is what application values are compared with)."""
    as_json = mapping if mapping.updates else dataclasses.replace(
        mapping, value_format="json", value_columns=None)
    expected = render_value(row, as_json)
    out = []
    for template in mapping.keys:
        key = template.render(row)
        if key is not None:
            out.append((key, expected))
    return out


def verdict(mapping: TableMapping, expected: tuple[str, str], cached: Any) -> str:
    """Compare one cached value (bytes from GET, a dict from HGETALL, None) with the row."""
    if cached is None or cached == {}:
        return MISSING
    kind, text = expected
    if mapping.updates:
        if kind == KIND_HASH:
            want = json.loads(text)
            pairs = dict(zip(want[::2], want[1::2]))
            got = {_text(k): _text(v) for k, v in cached.items()} if isinstance(cached, dict) else None
            return CONSISTENT if got == pairs else STALE
        return CONSISTENT if _json(cached) == json.loads(text) else STALE
    value = _json(cached)
    if not isinstance(value, dict):
        return UNVERIFIED
    row = json.loads(text)
    shared = [f for f in value if f in row]
    if not shared:
        return UNVERIFIED
    return CONSISTENT if all(_same(value[f], row[f]) for f in shared) else STALE


@dataclass
class AuditReport:
    table: str
    rows: int
    consistent: int = 0
    stale: int = 0
    missing: int = 0
    unverified: int = 0
    extra: int | None = None            # None when sampling (unknown)
    stale_keys: list[str] = field(default_factory=list)
    extra_keys: list[str] = field(default_factory=list)
    repaired: int = 0
    sampled: bool = False

    @property
    def cached(self) -> int:
        return self.consistent + self.stale + self.unverified + (self.extra or 0)

    @property
    def staleness_ratio(self) -> float:
        """Share of cached entries that serve wrong data: stale values and extra keys."""
        return round((self.stale + (self.extra or 0)) / self.cached, 6) if self.cached else 0.0

    def to_dict(self) -> dict:
        doc = dataclasses.asdict(self)
        doc["stale_keys"] = self.stale_keys[:KEYS_IN_REPORT]
        doc["extra_keys"] = self.extra_keys[:KEYS_IN_REPORT]
        return {**doc, "keys": self.consistent + self.stale + self.missing + self.unverified,
                "staleness_ratio": self.staleness_ratio}


def _json(raw: Any) -> Any:
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return None


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _same(cached: Any, current: Any) -> bool:
    if isinstance(cached, (int, float)) and isinstance(current, (int, float)) \
            and not isinstance(cached, bool) and not isinstance(current, bool):
        return cached == current
    if isinstance(cached, (int, float)) and isinstance(current, str):   # DECIMAL as text
        try:
            return float(current) == cached
        except ValueError:
            return False
    return cached == current
