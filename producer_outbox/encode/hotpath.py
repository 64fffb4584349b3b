"""The tailer's per-row work, compiled: a decoded row -> (Kafka key, record bytes, message id).

For every row of a mapped table the tailer builds a ChangeEvent (``rows.row_change``), its
Kafka key (``keys.kafka_key``), its message id (``ids.binlog_message_id``) and its JSON
(``event.encode``); on 20-80-row transactions that was over half of the tailer thread.
``cachesync._speedups.row_record`` writes the same three values straight from the row's
images, in C, without the intermediate objects, leaving out the columns the mapping does
not keep as it writes (``rows.trim_image`` is then not needed for the row).

It returns None, and the tailer takes its Python path for that row, wherever it would not
produce exactly the Python path's bytes or where the Python path decides something: a
float Python writes with an exponent (orjson and the stdlib differ there), NaN or an
infinity, text UTF-8 cannot hold, a key column missing from the image or whose key text
raises, a row index past the budget, a record over ``max_record_bytes`` (the Python path
sends it invalidate-only, with its WARNING and counter). Rows with a partial image or
partial JSON, outbox tables and filtered rows never reach it (the tailer's call site).
A differential test (tests/unit/test_hotpath.py) holds it to the Python path's bytes.

``compiled_run`` goes one step further for whole transactions the fast reader's buffer
holds (``_speedups.plain_run``, called by ``binlog_source``): it decodes their rows from
the buffer by the table map's column plan (``rowdecode``, ``RowEncoder.compiled_plan``), the
same plan the Python decoder (``fastrows``) is generated from, and writes every record
with the same code, stopping before any transaction the Python path must decide. The
differential tests (tests/unit/test_plain_run.py, the integration one) hold it to the
Python path's records.

The compiled path is used when the extension is built (``make install``) and
``CACHESYNC_NO_SPEEDUPS`` is not set; ``record`` and ``compiled_run()`` are None otherwise.
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
