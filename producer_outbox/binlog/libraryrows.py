"""python-mysql-replication's rows of a rows event, read in a loop bounded by the event.

The library's ``RowsEvent.rows`` reads rows ``while packet.read_bytes < event_size``, one
row read each. A row that consumes no bytes never ends that loop: a rows event
whose columns-present bitmap says that no column is present (bytes a server never writes,
but a damaged or hostile stream can hold, with a valid checksum) makes an endless list of
empty rows, a tailer that stalls without an error and grows until the host runs out of
memory. ``library_rows`` runs the same loop and raises ``MalformedRowsError`` for a row
that consumed nothing or read past the event's end; the rows event then becomes a
table-level invalidation of its table (``rowevents``), never a hang.

Library internals it touches, through ``library_adapter`` (rerun
tests/unit/test_binlog_fuzz.py when the pin moves): one row's reading, ``RowsEvent.complete``,
``RowsEvent.event_size``, the packet wrapper's ``read_bytes``, and the event's cache of its
rows (set so that a later ``event.rows`` returns these rows instead of reading the packet
again).
"""

from __future__ import annotations

from cachesync.runtime.library_adapter import cache_rows, cached_rows, fetch_one_row


class MalformedRowsError(ValueError):
    """A rows event whose bytes do not divide into rows inside the event."""


def library_rows(event) -> list[dict]:
    """``event.rows`` as the library decodes them, in a loop that ends with the event;
    raises MalformedRowsError, or what the library raises for bytes it cannot read."""
    cached = cached_rows(event)
    if cached is not None:
        return cached
    rows: list[dict] = []
    if event.complete:
        packet, size = event.packet, event.event_size
        while packet.read_bytes < size:
            before = packet.read_bytes
            rows.append(fetch_one_row(event))
            if packet.read_bytes <= before:
                raise MalformedRowsError(f"row {len(rows)} of the rows event consumed no "
                                         "bytes (no column present): the event is malformed")
            if packet.read_bytes > size:
                raise MalformedRowsError(f"row {len(rows)} of the rows event ends "
                                         f"{packet.read_bytes - size} bytes past the event")
    cache_rows(event, rows)
    return rows
