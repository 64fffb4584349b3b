"""When two different rows can render the same key: what ``lint`` reports and what update
mode refuses to write.

Two ways a key has more than one reading:

* **split**: two fields of one template are separated by a literal that a value may
  contain (``bk:{a}:{b}``: ``("x:y", "z")`` and ``("x", "y:z")`` both render ``bk:x:y:z``);
  two fields with nothing between them always split more than one way;
* **overlap**: a key of one template is also a key of another (``user:email:x`` is the
  ``user:{id}`` key of a row whose id is ``email:x``), or two tables share a template.

Whether a value "may contain" something depends on the column's type: lint knows the
SQL types (information_schema); the consumer knows the Python type of the row's value
(an int column never holds ``email:x``). Text columns may hold anything.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable, Mapping

from cachesync.schema.mapping import KeyTemplate, MissingColumnError
from cachesync.schema.values import canonical_text

ANY = re.compile(r".*", re.S)
INTEGER = re.compile(r"-?\d+")
_NUMBER = re.compile(r"-?[\d.]+(e-?\d+)?")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_DATETIME = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?")
_TIME = re.compile(r"-?\d+:\d{2}:\d{2}(\.\d+)?")
_HEX = re.compile(r"0x[0-9a-f]*")
# information_schema.columns.data_type -> the texts a value of it can render
_SQL_TEXTS = {
    **dict.fromkeys(("tinyint", "smallint", "mediumint", "int", "integer", "bigint", "bit",
                     "year"), INTEGER),
    **dict.fromkeys(("decimal", "numeric", "float", "double", "real"), _NUMBER),
    "date": _DATE, "datetime": _DATETIME, "timestamp": _DATETIME, "time": _TIME,
    **dict.fromkeys(("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob",
                     "geometry", "point", "linestring", "polygon", "multipoint",
                     "multilinestring", "multipolygon", "geometrycollection", "inet4", "inet6",
                     "uuid"), _HEX),
}


def sql_texts(data_type: str | None) -> re.Pattern:
    """The full-match pattern of the key texts a column of ``data_type`` renders (ANY: text)."""
    return _SQL_TEXTS.get((data_type or "").lower(), ANY)


def value_texts(value: Any) -> re.Pattern:
    """The same, judged from one value's Python type (the consumer has no SQL types)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return ANY
    if isinstance(value, int):
        return INTEGER
    if isinstance(value, (float, decimal.Decimal)):
        return _NUMBER
    if isinstance(value, dt.datetime):
        return _DATETIME
    if isinstance(value, dt.date):
        return _DATE
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _HEX
    return ANY


@dataclass(frozen=True)
class Separator:
    """The literal between two adjacent fields of a template."""

    left: str
    text: str
    right: str

    def may_occur_in(self, left: re.Pattern, right: re.Pattern) -> bool:
        """Whether a value of either field (texts ``left`` / ``right``) can contain it."""
        return not self.text or any(_can_contain(p, self.text) for p in (left, right))

    def occurs_in(self, left: str, right: str) -> bool:
        """Whether these two values make the key split more than one way."""
        return not self.text or any(c in left or c in right for c in set(self.text))


@lru_cache(maxsize=1024)
def separators(template: KeyTemplate) -> tuple[Separator, ...]:
    parts = template.parts
    return tuple(Separator(parts[i], parts[i + 1], parts[i + 2])
                 for i in range(1, len(parts) - 2, 2))


def _can_contain(texts: re.Pattern, literal: str) -> bool:
    if texts is ANY:
        return True
    sample = {INTEGER: "-0123456789", _NUMBER: "-.0123456789e", _DATE: "-0123456789",
              _DATETIME: " -.:0123456789", _TIME: "-.:0123456789", _HEX: "0123456789abcdefx"}
    return any(c in sample[texts] for c in literal)


@lru_cache(maxsize=1024)
def any_value_regex(template: KeyTemplate) -> re.Pattern:
    """Full-match pattern of every key ``template`` can render (fields: any text, grouped)."""
    parts = template.parts
    return re.compile("".join(re.escape(p) if i % 2 == 0 else "(.*)"
                              for i, p in enumerate(parts)), re.S)


def other_reading(key: str, template: KeyTemplate, others: Iterable[KeyTemplate],
                  texts: Mapping[str, re.Pattern], row: Mapping[str, Any] | None = None
                  ) -> KeyTemplate | None:
    """Another template that renders ``key`` from values its fields' types allow (``texts``:
    field -> pattern, absent = any), unless it is the same row's own key; None if none."""
    for other in others:
        if other is template:
            continue
        m = any_value_regex(other).fullmatch(key)
        if m is None or _own_key(other, row, key):
            continue
        if all(texts.get(f, ANY).fullmatch(v) for f, v in zip(other.fields, m.groups())):
            return other
    return None


def _own_key(template: KeyTemplate, row: Mapping[str, Any] | None, key: str) -> bool:
    if row is None:
        return False
    try:
        return template.render(row) == key
    except MissingColumnError:
        return False


def ambiguous_key(key: str, template: KeyTemplate, templates: Iterable[KeyTemplate],
                  row: Mapping[str, Any]) -> str | None:
    """Why ``key`` (``template`` rendered from ``row``) may also be another row's key, or None.
    Update mode invalidates such a key instead of writing it."""
    for sep in separators(template):
        if sep.occurs_in(canonical_text(row[sep.left]), canonical_text(row[sep.right])):
            return (f"a value of {{{sep.left}}} or {{{sep.right}}} contains the separator "
                    f"{sep.text!r} of {template.text!r}")
    other = other_reading(key, template, templates, _RowTexts(row), row)
    if other is not None:
        return f"the key is also a possible key of {other.text!r}"
    return None


class _RowTexts:
    """field -> ``value_texts`` of the row's value, computed only for the fields asked."""

    def __init__(self, row: Mapping[str, Any]):
        self._row = row

    def get(self, field: str, default: re.Pattern) -> re.Pattern:
        return value_texts(self._row[field]) if field in self._row else default


def sample_key(template: KeyTemplate, texts: Mapping[str, re.Pattern]) -> str:
    """A key ``template`` renders, each field a short value its type allows."""
    samples = {INTEGER: "0", _NUMBER: "0", _DATE: "2000-01-01", _DATETIME: "2000-01-01 00:00:00",
               _TIME: "00:00:00", _HEX: "0x00"}
    parts = template.parts
    return "".join(p if i % 2 == 0 else samples.get(texts.get(p, ANY), "a")
                   for i, p in enumerate(parts))
