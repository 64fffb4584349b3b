"""Whole MariaDB transactions whose records the compiled run writes straight from the buffer.

``_speedups.plain_run`` takes the transactions the fast reader's buffer already holds, in
the common shape (GTID, table maps, rows, XID), and writes their records in C, when it has a
plan for their table maps. A plan is learned from the first transaction of a table map the
Python path encoded (``RowEncoder.compiled_plan``); a table no mapping names has none. The
binlog source asks ``CompiledRuns.take`` before each read of the reader, and hands it each
table map it encoded in Python (``learn``).
"""

from __future__ import annotations

from cachesync.producer_outbox.binlog.dumpstream import PlainRun
from cachesync.producer_outbox.ports import Record
from cachesync.producer_outbox.encode.rowevents import NO_PLAN, RowEncoder
from cachesync.producer_outbox.decode.rows import TxnContext
from cachesync.schema.gtid import MARIADB, GtidState
from cachesync.schema.values import canonical_text, to_json

# transactions the fast reader already buffered that go out as one Group (one tracker entry,
# one checkpoint): bounded so a stop or a checkpoint save is never far
FAST_BATCH = 256
PLAN_CACHE = 4096       # table maps the compiled run keeps a plan for (cleared when full)
# transactions read by the Python path after the compiled run refused one, before it is
# asked again: a table it cannot write costs it little
PLAIN_SKIP = 16


class CompiledRuns:
    """The compiled run ``run`` (``hotpath.compiled_run()``) over ``stream``'s buffer, with
    the plans it has: table-map body -> its plan (a capsule, or None: no mapping names the
    table), and the bodies left to Python (NO_PLAN)."""

    def __init__(self, run, stream, encoder: RowEncoder, identity: str, cluster: str = ""):
        self._run, self._stream, self._encoder, self._identity = run, stream, encoder, identity
        self._plans: dict[bytes, object] = {}
        self._no_plan: set[bytes] = set()
        self._version = (0, 0)      # the column types' and foreign keys' the plans are of
        self._skip = 0              # transactions left to Python before the run is asked again
        # the message ids' scope of every GTID transaction (TxnContext.id_scope)
        self._scope = TxnContext(identity, "", 0, 0.0, gtid=True, cluster=cluster).id_scope
        self.taken = 0              # transactions the compiled run took

    def wanted(self) -> bool:
        """Whether the next buffered transaction is the compiled run's to try (a batch of
        transactions framed in Python ends before it)."""
        return bool(self._plans) and not self._skip

    def passed(self) -> None:
        """One transaction went through Python."""
        if self._skip:
            self._skip -= 1

    def take(self, gtids: GtidState) -> PlainRun | None:
        """The buffered transactions the compiled run takes whole, once a table map of
        theirs has a plan; None otherwise (the reader frames the next transaction). Only
        between groups, outside XA, of a MariaDB (or empty) GTID state."""
        types, cascades = self._encoder.types, self._encoder.cascades
        # a DDL reloaded the types or the foreign keys: plans again
        version = (types.version if types is not None else 0,
                   cascades.version if cascades is not None else 0)
        if version != self._version:
            self._forget()
            self._version = version
        if not self._plans or gtids.flavor not in (None, MARIADB):
            return None
        if self._skip:        # it just refused a transaction: Python reads the next ones
            self._skip -= 1
            return None
        found = self._stream.plain_run(
            self._run[1], FAST_BATCH, self._plans, gtids.last_per_domain(),
            (self._scope, self._identity, gtids.ordinal, self._encoder.max_record_bytes,
             to_json, canonical_text, Record))
        if found is False:
            self._skip = PLAIN_SKIP
            return None
        if found is not None:
            self.taken += found.taken
        return found

    def learn(self, body: bytes, event, schema: str, table: str) -> None:
        """Remember what the compiled run does with this table map's rows (once per body)."""
        if body in self._plans or body in self._no_plan:
            return
        if len(self._plans) + len(self._no_plan) >= PLAN_CACHE:
            self._forget()
        plan = self._encoder.compiled_plan(event, schema, table)
        if plan is NO_PLAN:
            self._no_plan.add(body)
        else:
            self._plans[body] = plan
            self._skip = 0

    def _forget(self) -> None:
        self._plans.clear()
        self._no_plan.clear()
