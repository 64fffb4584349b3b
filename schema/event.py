"""The ChangeEvent envelope and its codec: the contract between producer and consumer."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Mapping, Sequence

from cachesync import speedups
from cachesync.schema import jsonfast
from cachesync.schema.errors import DecodeError
from cachesync.schema.values import from_json, to_json

ENVELOPE_VERSION = 1
# Version 2 adds table-level ops. Row events stay version 1, so a consumer that
# predates it keeps reading them, and dead-letters (never misapplies) a version-2
# table event as ``unsupported_version``; this consumer reads both.
TABLE_ENVELOPE_VERSION = 2
SUPPORTED_VERSIONS = frozenset({1, 2})
PACK_PREFIX = b'{"v":%d,"pack":' % ENVELOPE_VERSION     # how every packed record starts

Op = Literal["insert", "update", "delete", "truncate"]
ROW_OPS = frozenset({"insert", "update", "delete"})
# ``truncate``: what the binlog says about a whole table (TRUNCATE, DROP, RENAME,
# DROP DATABASE, DML logged as a statement); every key of the table is invalidated.
# ``extra`` carries ``reason`` and the first characters of the ``statement``.
TABLE_OPS = frozenset({"truncate"})
OPS = ROW_OPS | TABLE_OPS
# ``extra`` key of a row event too large for Kafka, sent with its key columns only
# (envelope version 2): invalidate its keys, write no value.
INVALIDATE_ONLY = "invalidate_only"
# ``extra`` key of a row event logged with a partial row image (binlog_row_image MINIMAL,
# NOBLOB or FULL_NODUP in the writing session): {"before": [...], "after": [...]}, the columns
# whose value that image does not know (treat them as changed). A template naming one renders
# no key from that image; the tailer invalidates the table as a whole for it.
ABSENT = "absent"
HEARTBEAT_KIND = "heartbeat"
SOURCE_KINDS = frozenset({"binlog", "outbox", HEARTBEAT_KIND})
# cachesync's own table (in the state database): its rows go out as HEARTBEAT_KIND events,
# which measure commit->apply lag and touch no key; no application table may use the name
HEARTBEAT_TABLE = "cachesync_heartbeat"


@dataclass(frozen=True)
class Source:
    """Where an event came from: enough to re-derive its id and to measure lag."""

    kind: str                 # "binlog" | "outbox" | "heartbeat" (lag only, no keys)
    server: str               # server identity, e.g. "mariadb:1" or a server_uuid
    position: str             # GTID ("0-1-42") or "file:pos" of the transaction start
    commit_ts: float          # source commit time, seconds since the epoch
    row_index: int = 0        # index of this row within its transaction


@dataclass(frozen=True)
class ChangeEvent:
    """One committed row change (binlog) or one application event (outbox)."""

    id: str
    source: Source
    db: str
    table: str
    op: Op
    pk: tuple[tuple[str, Any], ...]
    before: Mapping[str, Any] | None
    after: Mapping[str, Any] | None
    version: int
    keys: tuple[str, ...] = ()          # explicit keys (outbox), in addition to mapped ones
    schema_version: int = ENVELOPE_VERSION
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def qualified_table(self) -> str:
        return f"{self.db}.{self.table}"

    @property
    def pk_dict(self) -> dict[str, Any]:
        return dict(self.pk)

    @property
    def table_level(self) -> bool:
        """The event is about the whole table, not one row (no pk, no images)."""
        return self.op in TABLE_OPS


def encode(event: ChangeEvent) -> bytes:
    """Serialise an event to compact UTF-8 JSON; raises TypeError on an unencodable value."""
    doc = {
        "v": event.schema_version,
        "id": event.id,
        "src": [event.source.kind, event.source.server, event.source.position,
                event.source.commit_ts, event.source.row_index],
        "db": event.db,
        "tbl": event.table,
        "op": event.op,
        "pk": [[k, to_json(v)] for k, v in event.pk],
        "b": _row_to_json(event.before),
        "a": _row_to_json(event.after),
        "ver": event.version,
    }
    if event.keys:
        doc["keys"] = list(event.keys)
    if event.extra:
        doc["x"] = to_json(dict(event.extra))
        return jsonfast.dumps(doc, exact=False)
    return jsonfast.dumps(doc, exact=_finite(event.before) and _finite(event.after)
                          and _finite_values(v for _, v in event.pk)
                          and math.isfinite(event.source.commit_ts))


def _finite(row: Mapping[str, Any] | None) -> bool:
    return row is None or _finite_values(row.values())


def _finite_values(values: Iterable[Any]) -> bool:
    """No float among ``values`` is NaN or infinite (their sum is finite; a sum that merely
    overflows says False too, which only costs the exact path)."""
    return math.isfinite(sum(filter(_is_float, values), 0.0))


_is_float = float.__instancecheck__


def encode_pack(encoded: Sequence[bytes]) -> bytes:
    """Several encoded events as one record: ``{"v":1,"pack":[event,...]}``.

    The tailer packs the rows of one transaction, table and partition this way
    (``tailer.pack_rows``) so that Kafka carries one record per pack instead of
    one per row; every element keeps its own id, so dedup stays per row.
    """
    return PACK_PREFIX + b"[" + b",".join(encoded) + b"]}"


def decode(raw: bytes) -> ChangeEvent:
    """Parse one event's bytes; raises DecodeError with a reason code and the raw bytes."""
    doc = _envelope(raw)
    if "pack" in doc:
        raise DecodeError("invalid_envelope", "a pack of events where one event was expected", raw)
    return _event(doc, raw)


def decode_record(raw: bytes) -> list[ChangeEvent | DecodeError]:
    """The events of one Kafka record: a plain envelope gives one, a pack each element.

    Raises DecodeError when the record as a whole is unreadable. An element of a pack
    that is not an event comes back as a DecodeError in its place (its ``raw`` is that
    element's JSON), so the rest of the pack still applies and only it is dead-lettered.
    """
    doc = _envelope(raw)
    pack = doc.get("pack")
    if pack is None:
        return [_event(doc, raw)]
    if not isinstance(pack, list) or not pack:
        raise DecodeError("invalid_envelope", "pack must be a non-empty list", raw)
    out: list[ChangeEvent | DecodeError] = []
    for element in pack:
        try:
            if not isinstance(element, dict):
                raise DecodeError("invalid_envelope", "pack element is not an object")
            if element.get("v") not in SUPPORTED_VERSIONS:
                raise DecodeError("unsupported_version", f"envelope version {element.get('v')!r}")
            out.append(_event(element, None))
        except DecodeError as e:
            e.raw = json.dumps(element, separators=(",", ":"), ensure_ascii=False).encode()
            out.append(e)
    return out


def pack_elements(raw: bytes) -> list[bytes]:
    """The original bytes of each element of a pack record, in order.

    A dead letter carries the element exactly as it was published, not a re-encoding.
    Raises DecodeError when ``raw`` holds no well-formed top-level ``pack`` array.
    """
    out, begin, in_pack = [], 0, False
    for i, c, depth in _structure(raw):
        if not in_pack:
            if depth == 1 and raw.startswith(b'"pack"', i) and raw[i + 6:].lstrip()[:1] == b":":
                begin = raw.index(b"[", raw.index(b":", i + 6)) + 1
                in_pack = True
        elif i >= begin and depth == 2 and c in b",]":     # the array's own comma or bracket
            out.append(raw[begin:i].strip())
            if c == 0x5D:
                return out
            begin = i + 1
    raise DecodeError("invalid_envelope", "no closed top-level pack array", raw)


def _structure(raw: bytes):
    """``(index, byte, depth)`` of every byte outside JSON strings, plus each string's
    opening quote; depth counts the brackets open before the byte (a closer: after it)."""
    depth, in_str, escaped = 0, False, False
    for i, c in enumerate(raw):
        if in_str:
            if escaped:
                escaped = False
            elif c == 0x5C:
                escaped = True
            elif c == 0x22:
                in_str = False
            continue
        if c in b"]}":
            depth -= 1
            yield i, c, depth + 1
            continue
        yield i, c, depth
        if c == 0x22:
            in_str = True
        elif c in b"[{":
            depth += 1


def _envelope(raw: bytes) -> dict:
    try:
        doc = jsonfast.loads(raw)
    except (UnicodeDecodeError, ValueError) as e:
        raise DecodeError("invalid_json", str(e), raw) from e
    if not isinstance(doc, dict):
        raise DecodeError("invalid_envelope", "top level is not an object", raw)
    version = doc.get("v")
    if version not in SUPPORTED_VERSIONS:
        raise DecodeError("unsupported_version", f"envelope version {version!r}", raw)
    return doc


def _event(doc: dict, raw: bytes | None) -> ChangeEvent:
    if _from_plain_doc is not None:
        event = _from_plain_doc(doc, ChangeEvent, Source)
        if event is not None:           # the plain shape, built in C; else Python decides
            return event
    try:
        return _from_doc(doc)
    except (KeyError, TypeError, ValueError) as e:
        raise DecodeError("invalid_envelope", f"{type(e).__name__}: {e}", raw) from e


def _from_doc(doc: dict) -> ChangeEvent:
    kind, server, position, commit_ts, row_index = doc["src"]
    if kind not in SOURCE_KINDS:
        raise ValueError(f"source kind {kind!r}")
    op = doc["op"]
    if op not in OPS:
        raise ValueError(f"op {op!r}")
    if op in TABLE_OPS and doc["v"] < TABLE_ENVELOPE_VERSION:
        raise ValueError(f"op {op!r} needs envelope version {TABLE_ENVELOPE_VERSION}")
    plain = _PLAIN
    pk = tuple([(str(k), v if type(v) in plain else from_json(v)) for k, v in doc["pk"]])
    keys = doc.get("keys")
    extra = doc.get("x")
    return build_checked(ChangeEvent, {
        "id": _require_str(doc["id"], "id"),
        "source": build_checked(Source, {"kind": kind, "server": str(server), "position": str(position),
                                  "commit_ts": float(commit_ts), "row_index": int(row_index)}),
        "db": _require_str(doc["db"], "db"),
        "table": _require_str(doc["tbl"], "tbl"),
        "op": op,
        "pk": pk,
        "before": _row_from_json(doc.get("b")),
        "after": _row_from_json(doc.get("a")),
        "version": int(doc["ver"]),
        "keys": tuple([_require_str(k, "keys[]") for k in keys]) if keys else (),
        "schema_version": doc["v"],
        "extra": from_json(extra) if extra else {},
    })


# cachesync._speedups.event_from_doc (make install builds it): _from_doc of an envelope of
# the plain shape (row op, plain values, no explicit keys, no extra), None for anything
# else; the codec tests run with and without it (use_python).
# not built or switched off: _from_doc alone, same results
_compiled_from_doc = getattr(speedups(), "event_from_doc", None)
_from_plain_doc = _compiled_from_doc
ACCELERATED = _from_plain_doc is not None


def use_python(on: bool = True) -> None:
    """Build every event in Python (``on``), or go back to the compiled builder when built."""
    global _from_plain_doc, ACCELERATED
    _from_plain_doc = None if on else _compiled_from_doc
    ACCELERATED = _from_plain_doc is not None


def build_checked(cls, fields: dict):
    """A ChangeEvent or Source from a complete dict of fields the caller already checked.

    Equal to ``cls(**fields)``; the generated ``__init__`` of a frozen dataclass sets
    every field through ``object.__setattr__``, which made object creation a third of
    decoding, and the decoder (and the tailer) create two objects per row.
    """
    obj = object.__new__(cls)
    obj.__dict__.update(fields)
    return obj


def _require_str(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string")
    return value


# Values JSON carries as they are; checked by exact type first because most columns
# are one of these and to_json's isinstance chain is the codec's hot spot.
_PLAIN = frozenset({str, int, float, bool, type(None)})


def _row_to_json(row: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    if row is None:
        return None
    if type(row) is dict and _PLAIN.issuperset(map(type, row.values())):
        return row                                    # nothing to tag: serialise it as is
    plain = _PLAIN
    return {k: v if type(v) in plain else to_json(v) for k, v in row.items()}


def _row_from_json(row: Any) -> dict | None:
    if row is None:
        return None
    if not isinstance(row, dict):
        raise ValueError("row image must be an object")
    if _PLAIN.issuperset(map(type, row.values())):    # nothing tagged: json.loads' dict as is
        return row
    plain = _PLAIN
    return {k: v if type(v) in plain else from_json(v) for k, v in row.items()}


def beat_time(after: Mapping[str, Any] | None) -> float | None:
    """A heartbeat event's write time in epoch seconds (microsecond precision), or None."""
    if not after or after.get("beat_us") is None:
        return None
    return int(after["beat_us"]) / 1e6
