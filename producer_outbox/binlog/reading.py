"""Reading the binlog stream safely: table identity and the library's errors.

Table ids are in-memory ids of one server run: after a restart the server hands the
same id to another table, and python-mysql-replication keeps its table maps across
files (it clears them only on a timestamped rotate, which a stopped or crashed server
never writes). It also drops the maps of tables it filters, so with ``only_tables``
a reused id decodes an unmapped table's rows with a mapped table's map. cachesync
therefore lets the library keep every map, and decides itself, from the map that
preceded a row event in the same event group, which table the rows belong to.
"""

from __future__ import annotations

import struct
from typing import Callable, Iterable, Iterator

import pymysql

from cachesync.producer_outbox.binlog.checksums import BinlogChecksumError
from cachesync.schema.errors import FatalError, RetryableError

# The server's "could not find the first log file / GTID" family (the binlog the
# checkpoint names was purged, or the GTID state is not in any binlog left).
ER_MASTER_FATAL_ERROR_READING_BINLOG = 1236

# What the library raises when bytes do not match the table map it decodes with
# (e.g. "AssertionError: Result length not requested length"; a packed DECIMAL whose digits
# are not digits: decimal.InvalidOperation, an ArithmeticError).
DECODE_ERRORS = (AssertionError, struct.error, KeyError, IndexError, ValueError, TypeError,
                 UnicodeDecodeError, NotImplementedError, AttributeError, ArithmeticError)

LOST_POSITION_HELP = (
    "Changes made since then cannot be read from the binlog any more. Recovery: "
    "`cachesync resync` (invalidates every key of the mapped tables and starts at the "
    "current position), or set tailer.on_lost_position: resync to do it automatically.")


class TableMaps:
    """Table id -> (schema, table), from the table maps of the current event group only.

    Every row event is preceded by the table map of its table within the same event
    group, so forgetting every map at a group boundary (GTID, BEGIN, COMMIT, XID,
    DDL, rotate, reconnect) costs nothing and rules out a stale map.
    """

    def __init__(self) -> None:
        self._maps: dict[int, tuple[str, str]] = {}

    def reset(self) -> None:
        self._maps.clear()

    def add(self, table_id: int, schema: str, table: str) -> None:
        self._maps[table_id] = (schema, table)

    def named(self, table_id: int) -> tuple[str, str] | None:
        """(schema, table) of ``table_id`` in the current event group, None if no map names it."""
        return self._maps.get(table_id)

    def table_of(self, event, where: Callable[[], str]) -> tuple[str, str]:
        """(schema, table) of a row event; raises FatalError (naming the position ``where()``
        gives) when no map of this event group names its table id, or when the library
        decoded it against another table."""
        found = self._maps.get(event.table_id)
        if found is None:
            raise FatalError(f"row event at {where()} for table id {event.table_id} has no table "
                             "map in its event group; refusing to guess its table (was the "
                             "stream started inside a transaction?)")
        if (getattr(event, "schema", None), getattr(event, "table", None)) != found:
            raise FatalError(f"row event at {where()}: table id {event.table_id} is "
                             f"{found[0]}.{found[1]} in this event group but the binlog library "
                             f"decoded it as {event.schema}.{event.table}; stopping before "
                             "publishing rows of the wrong table")
        return found


def read_events(stream: Iterable, where) -> Iterator:
    """The stream's events; a library or server failure becomes a cachesync error.

    ``where()`` names the current position. Raises RetryableError for a lost
    connection, FatalError for a purged position (exit 3, with the recovery), for an
    event whose checksum fails (BinlogChecksumError, naming the position before it) and for
    bytes the library cannot decode (deterministic: retrying would loop).
    """
    events = iter(stream)
    while True:
        try:
            event = next(events)
        except StopIteration:
            return
        except pymysql.err.OperationalError as e:
            raise _server_error(e, where()) from e
        except pymysql.err.InterfaceError as e:
            raise RetryableError(f"binlog connection lost at {where()}: {e}") from e
        except BinlogChecksumError as e:
            raise e.at(where()) from None
        except DECODE_ERRORS as e:
            raise decode_error(e, where()) from e
        yield event


def decode_error(error: Exception, where: str, table: str | None = None) -> FatalError:
    """The clear error for a binlog event the library could not decode."""
    of = f" of {table}" if table else ""
    return FatalError(f"cannot decode the binlog event{of} at {where}: "
                      f"{type(error).__name__}: {error}. The checkpoint stays before it; "
                      "check binlog_row_metadata=FULL and the python-mysql-replication version")


def _server_error(error: pymysql.err.OperationalError, where: str) -> Exception:
    code = error.args[0] if error.args else None
    if code == ER_MASTER_FATAL_ERROR_READING_BINLOG:
        return LostPositionError(f"the binlog position {where} is gone from the server "
                                 f"({error.args[1] if len(error.args) > 1 else error}). "
                                 + LOST_POSITION_HELP)
    return RetryableError(f"binlog connection failed at {where}: {error}")


class LostPositionError(FatalError):
    """The checkpoint's binlog file or GTID is no longer on the server (purged)."""
