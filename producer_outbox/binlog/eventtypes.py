"""Every binlog event type, and what the tailer does with it (pure).

The rule: no event that can carry row changes of a mapped table is dropped. Each type is

* ``DECODED``: read exactly (rows, GTIDs, statements, transaction boundaries, stream control);
* ``EXPANDED``: a compressed or container form, turned into the plain events it holds before
  anything reads it (MySQL's TRANSACTION_PAYLOAD_EVENT, MariaDB's compressed events);
* ``NO_ROWS``: carries no row change by its definition (stream metadata, the text of a
  statement whose rows follow, the data blocks of a LOAD DATA that a later event executes);
* ``TABLE_LEVEL``: may carry row changes cachesync cannot decode exactly: the tables it may
  touch are invalidated as a whole (the table of its table id when the event names one,
  else every mapped table), with a WARNING and a metric.

A type this table does not know is ``NO_ROWS`` only when the server flagged it
LOG_EVENT_IGNORABLE_F (MySQL and MariaDB: a replica that does not know such an event may
skip it, it changes no data); any other unknown type is ``TABLE_LEVEL``. So an event type
added by a future server is never skipped in silence.
"""

from __future__ import annotations

from dataclasses import dataclass

DECODED, EXPANDED, NO_ROWS, TABLE_LEVEL = "decoded", "expanded", "no_rows", "table_level"
LOG_EVENT_IGNORABLE_F = 0x80      # common header flag (binlog_event.h, MariaDB log_event.h)


@dataclass(frozen=True)
class EventType:
    code: int
    name: str
    outcome: str
    rows_shaped: bool = False     # the body starts with the table id of a preceding table map


_ALL = (
    EventType(0, "UNKNOWN_EVENT", TABLE_LEVEL),
    EventType(1, "START_EVENT_V3", NO_ROWS),
    EventType(2, "QUERY_EVENT", DECODED),            # DML logged as a statement: table level
    EventType(3, "STOP_EVENT", NO_ROWS),
    EventType(4, "ROTATE_EVENT", DECODED),
    EventType(5, "INTVAR_EVENT", NO_ROWS),           # context of the statement that follows
    EventType(6, "LOAD_EVENT", TABLE_LEVEL),
    EventType(7, "SLAVE_EVENT", NO_ROWS),
    EventType(8, "CREATE_FILE_EVENT", NO_ROWS),      # LOAD DATA file blocks: executed by 10/18
    EventType(9, "APPEND_BLOCK_EVENT", NO_ROWS),
    EventType(10, "EXEC_LOAD_EVENT", TABLE_LEVEL),
    EventType(11, "DELETE_FILE_EVENT", NO_ROWS),
    EventType(12, "NEW_LOAD_EVENT", TABLE_LEVEL),
    EventType(13, "RAND_EVENT", NO_ROWS),
    EventType(14, "USER_VAR_EVENT", NO_ROWS),
    EventType(15, "FORMAT_DESCRIPTION_EVENT", DECODED),
    EventType(16, "XID_EVENT", DECODED),
    EventType(17, "BEGIN_LOAD_QUERY_EVENT", NO_ROWS),
    EventType(18, "EXECUTE_LOAD_QUERY_EVENT", TABLE_LEVEL),   # LOAD DATA as a statement
    EventType(19, "TABLE_MAP_EVENT", DECODED),
    EventType(20, "PRE_GA_WRITE_ROWS_EVENT", TABLE_LEVEL, rows_shaped=True),
    EventType(21, "PRE_GA_UPDATE_ROWS_EVENT", TABLE_LEVEL, rows_shaped=True),
    EventType(22, "PRE_GA_DELETE_ROWS_EVENT", TABLE_LEVEL, rows_shaped=True),
    EventType(23, "WRITE_ROWS_EVENT_V1", DECODED),
    EventType(24, "UPDATE_ROWS_EVENT_V1", DECODED),
    EventType(25, "DELETE_ROWS_EVENT_V1", DECODED),
    EventType(26, "INCIDENT_EVENT", TABLE_LEVEL),    # the primary lost changes it could not log
    EventType(27, "HEARTBEAT_LOG_EVENT", DECODED),
    EventType(28, "IGNORABLE_LOG_EVENT", NO_ROWS),
    EventType(29, "ROWS_QUERY_LOG_EVENT", NO_ROWS),  # the statement text of the rows after it
    EventType(30, "WRITE_ROWS_EVENT", DECODED),
    EventType(31, "UPDATE_ROWS_EVENT", DECODED),
    EventType(32, "DELETE_ROWS_EVENT", DECODED),
    EventType(33, "GTID_LOG_EVENT", DECODED),
    EventType(34, "ANONYMOUS_GTID_LOG_EVENT", NO_ROWS),   # gtid_mode=OFF: file:pos ids
    EventType(35, "PREVIOUS_GTIDS_LOG_EVENT", NO_ROWS),
    EventType(36, "TRANSACTION_CONTEXT_EVENT", NO_ROWS),  # group replication certification
    EventType(37, "VIEW_CHANGE_EVENT", NO_ROWS),
    EventType(38, "XA_PREPARE_LOG_EVENT", DECODED),
    # binlog_row_value_options=PARTIAL_JSON: JSON diffs applied to the before image
    # (jsoncolumns); an after value they cannot give goes out as a partial image does
    EventType(39, "PARTIAL_UPDATE_ROWS_EVENT", DECODED),
    EventType(40, "TRANSACTION_PAYLOAD_EVENT", EXPANDED),
    EventType(41, "HEARTBEAT_LOG_EVENT_V2", NO_ROWS),
    EventType(42, "GTID_TAGGED_LOG_EVENT", DECODED),
    # MariaDB
    EventType(160, "ANNOTATE_ROWS_EVENT", NO_ROWS),
    EventType(161, "BINLOG_CHECKPOINT_EVENT", NO_ROWS),
    EventType(162, "GTID_EVENT", DECODED),
    EventType(163, "GTID_LIST_EVENT", NO_ROWS),
    EventType(164, "START_ENCRYPTION_EVENT", NO_ROWS),  # the dump thread sends decrypted events
    EventType(165, "QUERY_COMPRESSED_EVENT", EXPANDED),
    EventType(166, "WRITE_ROWS_COMPRESSED_EVENT_V1", EXPANDED),
    EventType(167, "UPDATE_ROWS_COMPRESSED_EVENT_V1", EXPANDED),
    EventType(168, "DELETE_ROWS_COMPRESSED_EVENT_V1", EXPANDED),
    EventType(169, "WRITE_ROWS_COMPRESSED_EVENT", EXPANDED),
    EventType(170, "UPDATE_ROWS_COMPRESSED_EVENT", EXPANDED),
    EventType(171, "DELETE_ROWS_COMPRESSED_EVENT", EXPANDED),
)
TYPES: dict[int, EventType] = {t.code: t for t in _ALL}
_CODES = {t.name: t.code for t in _ALL}
FORMAT_DESCRIPTION, TABLE_MAP = _CODES["FORMAT_DESCRIPTION_EVENT"], _CODES["TABLE_MAP_EVENT"]
TRANSACTION_PAYLOAD, GTID_TAGGED = _CODES["TRANSACTION_PAYLOAD_EVENT"], _CODES["GTID_TAGGED_LOG_EVENT"]
EXPANDED_TYPES = frozenset(t.code for t in _ALL if t.outcome == EXPANDED)
# the rows events the binlog library reads: v1, v2 and MySQL's partial JSON update
LIBRARY_ROWS = frozenset(t.code for t in _ALL if t.outcome == DECODED
                         and t.name.endswith(("_ROWS_EVENT", "_ROWS_EVENT_V1")))


def event_type(code: int, flags: int) -> EventType:
    """What ``code`` is; an unknown code is NO_ROWS only when flagged ignorable (module doc)."""
    known = TYPES.get(code)
    if known is not None:
        return known
    ignorable = bool(flags & LOG_EVENT_IGNORABLE_F)
    return EventType(code, f"unknown event type {code}", NO_ROWS if ignorable else TABLE_LEVEL)


# 1: the tailer's own event (not the library's): TABLE_LEVEL types and the tagged GTID;
# 2: unknown, decided by the ignorable flag. One lookup per event on the hot path.
_OWN_TABLE = bytearray(256)
for _code in range(256):
    if _code not in TYPES:
        _OWN_TABLE[_code] = 2
    elif TYPES[_code].outcome == TABLE_LEVEL or _code == GTID_TAGGED:
        _OWN_TABLE[_code] = 1
OWN_TABLE = bytes(_OWN_TABLE)


def is_own(code: int, flags: int) -> bool:
    """Whether the event is built by cachesync itself (a tagged GTID, or one to invalidate
    at table level) rather than by python-mysql-replication."""
    own = OWN_TABLE[code]
    return own == 1 or (own == 2 and not flags & LOG_EVENT_IGNORABLE_F)


_LENGTH_WIDTHS = {252: 2, 253: 3, 254: 8}


def length_encoded(data, pos: int) -> tuple[int, int]:
    """MySQL's length-encoded integer (``net_field_length``) at ``pos``: (value, next
    position). One byte below 251, else 0xFC + 2, 0xFD + 3 or 0xFE + 8 little-endian bytes;
    raises ValueError for another first byte or bytes cut short."""
    first = data[pos]
    if first < 251:
        return first, pos + 1
    width = _LENGTH_WIDTHS.get(first)
    if width is None:
        raise ValueError(f"bad length-encoded integer {first:#x}")
    end = pos + 1 + width
    if end > len(data):
        raise ValueError("length-encoded integer cut short")
    return int.from_bytes(data[pos + 1:end], "little"), end
