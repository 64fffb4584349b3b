"""The tailer's per-row work, compiled: a decoded row -> (Kafka key, record bytes, message id).

``record`` (``cachesync._speedups.row_record``) writes a row's Kafka key, message id and record
bytes exactly as the Python path does, or returns None and leaves the row to it;
``compiled_run()`` decodes and writes whole buffered transactions. Both are None when the
extension is not built or ``CACHESYNC_NO_SPEEDUPS`` is set, and differential tests hold them to
the Python path's bytes. When each hands a row back: docs/internals.md, "The compiled row
writer".
"""

from __future__ import annotations

import os

from cachesync.schema.event import HEARTBEAT_KIND, HEARTBEAT_TABLE
from cachesync.schema.values import canonical_text, to_json

try:
    from cachesync._speedups import row_record as _row_record
except ImportError:          # no C compiler at install: the Python path does every row
    _row_record = None
try:     # the compiled run of buffered transactions (binlog_source, compiled_plan)
    from cachesync._speedups import compile_plan as _compile_plan
    from cachesync._speedups import plain_run as _plain_run
except ImportError:
    _compile_plan = _plain_run = None

NO_SPEEDUPS = "CACHESYNC_NO_SPEEDUPS"    # set (non-empty): every row takes the Python path


def _compiled(ctx, row_index: int, db: str, table: str, op: str, primary_key, before,
              after, max_bytes: int, keep=None):
    """(key, value, msg_id) of one row, or None: the Python path decides (see the module).
    ``keep``: the columns the images keep (``rows.trim_image``; None: every column)."""
    kind = HEARTBEAT_KIND if table == HEARTBEAT_TABLE else "binlog"
    return _row_record(ctx.id_scope, ctx.server, ctx.position, ctx.commit_ts, ctx.ordinal,
                       row_index, kind, db, table, op, primary_key, before, after, max_bytes,
                       to_json, canonical_text, keep)


def compiled_record():
    """The compiled row writer, or None (not built, or switched off by CACHESYNC_NO_SPEEDUPS)."""
    if _row_record is None or os.environ.get(NO_SPEEDUPS):
        return None
    return _compiled


def compiled_run():
    """(compile_plan, plain_run) of the compiled run of whole buffered transactions
    (``binlog_source``), or None: not built, or switched off with the row writer."""
    if _plain_run is None or compiled_record() is None:
        return None
    return _compile_plan, _plain_run


record = compiled_record()
