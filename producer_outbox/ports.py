"""The producer's ports: a change source feeds the pipeline, which sends through a
publisher and moves a checkpoint store (pure: no I/O import).

A source (``producer_outbox.binlog_source``, the outbox relay's ``relay_source``, or
``memory.MemorySource`` in tests) yields the items below in commit order;
``producer_outbox.publish.pipeline.Pipeline`` packs and sends the records, tracks the
acknowledgements and saves progress only for groups whose every record Kafka
acknowledged (a resume position only past them all: ``CheckpointStore``). A group is ``Begin`` ... ``Commit``; the items
between are its records and table-level events, and, for an XA transaction, what the
source learnt about it (``Hold`` ... ``Prepared``, later ``Decide`` in another group).
A group of records only may come as one ``Group`` item, which says exactly what its
``Begin``, ``Record`` items and ``Commit`` say (``Group.items``).
Items carry what the pipeline needs and nothing of the binlog: the source already
turned rows into encoded events (message ids, keys, values).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, NamedTuple, Protocol, Sequence, Union

from cachesync.producer_outbox.decode.rows import TxnContext
from cachesync.producer_outbox.binlog.statements import TableChange

if TYPE_CHECKING:       # checkpoint.py holds the MySQL store too: no I/O import here
    from cachesync.producer_outbox.binlog.checkpoint import Checkpoint


# Begin, Record and Commit are named tuples: one per row or per transaction, they cost a
# third of what a frozen dataclass costs to build; the rarer items are frozen dataclasses.

class Begin(NamedTuple):
    """A transaction group opens (rows, table events and XA items follow, then Commit)."""

    ctx: TxnContext


class Record(NamedTuple):
    """One encoded row event of the open group: sent alone or in its table's pack."""

    db: str
    table: str
    key: str            # the Kafka key, db.table:pk
    value: bytes        # the encoded ChangeEvent
    msg_id: str         # the record's ``id`` header


@dataclass(frozen=True, slots=True)
class TableEvent:
    """A table-level change of a mapped table: one copy goes to every partition."""

    ctx: TxnContext
    index: int          # the row index its message ids take
    change: TableChange
    statement: str      # what caused it (an excerpt goes into the event and the WARNING)


class Commit(NamedTuple):
    """The open group ended; ``checkpoint`` is where to resume after it (a binlog
    ``Checkpoint``), or the group's own progress for a store that is not in order (an
    outbox row's ``OutboxMark``)."""

    checkpoint: Checkpoint


class Group(NamedTuple):
    """A whole group of records (no table-level or XA item): ``Begin(ctx)``, ``records``,
    ``Commit(checkpoint)`` in one item, so the pipeline opens, counts and closes it at once
    (a single-row transaction costs per item what a row costs). It may hold several
    consecutive transactions (the binlog source's buffered ones): ``ctx`` is the first's,
    ``checkpoint`` the one after the last, so the checkpoint passes all of them or none."""

    ctx: TxnContext
    records: list[Record]
    checkpoint: Checkpoint

    def items(self) -> list:
        """The same group as separate items."""
        return [Begin(self.ctx), *self.records, Commit(self.checkpoint)]


@dataclass(frozen=True, slots=True)
class Hold:
    """The open group is the prepare part of an XA transaction: its records are held,
    not sent, until its decision (XA START, or MariaDB's GTID flagged prepared-XA)."""


@dataclass(frozen=True, slots=True)
class Release:
    """XA COMMIT ... ONE PHASE: the held records go out as part of the open group;
    ``tables`` are invalidated at table level if there were too many to hold."""

    ctx: TxnContext
    index: int
    tables: tuple[tuple[str, str], ...]
    statement: str


@dataclass(frozen=True, slots=True)
class Unhold:
    """The open XA group ended without a prepare (nothing held is kept)."""


@dataclass(frozen=True, slots=True)
class Prepared:
    """XA PREPARE ended the open group: its records wait for the decision on ``xid``;
    ``checkpoint`` is where to resume after it, kept back until then."""

    xid: str
    checkpoint: Checkpoint
    tables: tuple[tuple[str, str], ...]    # the mapped tables its rows touched


@dataclass(frozen=True, slots=True)
class Decide:
    """XA COMMIT or XA ROLLBACK of ``xid``, inside the open group. A commit of a group
    the pipeline does not hold (prepared before the start position, or too large)
    invalidates ``unknown_tables`` (every mapped table) or its own tables at table level."""

    xid: str
    commit: bool
    ctx: TxnContext
    index: int
    statement: str
    unknown_tables: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Pulse:
    """The source read an event (a heartbeat, a rotate, DDL, a rows event after its
    records): the pipeline may save its checkpoint and see a stop request, as at a Commit.
    A source yields one at least every few seconds while it waits, so a stop is seen."""


PULSE = Pulse()


@dataclass(frozen=True, slots=True)
class Idle:
    """The source has nothing buffered and its server said nothing for a moment: the
    pipeline sends what it batched (packs that span groups), then does what a Pulse does.
    Only a source that ``signals_idle`` yields it."""


IDLE = Idle()

Change = Union[Begin, Record, TableEvent, Commit, Group, Hold, Release, Unhold, Prepared, Decide,
               Pulse, Idle]


class ChangeSource(Protocol):
    """Committed changes in commit order, as the items above.

    ``changes`` raises RetryableError (connection lost, stream cut inside a group) or
    FatalError (a position or a setting that cannot work); a data problem is an item
    (a table-level event), never an exception.
    """

    def changes(self) -> Iterator[Change]: ...

    def close(self) -> None: ...


class IdleSignals(Protocol):
    """A source that says when it has nothing buffered (it yields ``IDLE``): the pipeline
    closes its packs then (packs span transactions only with such a source)."""

    signals_idle: bool


class Publisher(Protocol):
    """Sends keyed records with an ``id`` header (and a ``flush`` one when given:
    schema.flushes); each ``send`` ends in exactly one of its callbacks (``on_ack`` once
    the broker has it, ``on_error`` after retries), possibly on another thread. ``send``
    may raise KafkaError synchronously (buffer full)."""

    def send(self, topic: str, key: str, value: bytes, msg_id: str,
             on_ack: Callable[[], None], on_error: Callable[[Exception], None],
             partition: int | None = None, flush: bytes | None = None) -> None: ...

    def partitions(self, topic: str, timeout_s: float | None = None) -> list[int]:
        """The topic's partition ids, sorted; raises RetryableError without metadata (after
        ``timeout_s``, or the client's own limit)."""
        ...

    def flush(self, timeout_s: float | None = None) -> None:
        """Wait until every record sent before it was acknowledged or failed."""
        ...

    def close(self, timeout_s: float = 10) -> None: ...


class CheckpointStore(Protocol):
    """A source's durable progress, of one of two kinds (raises RetryableError or FatalError).

    ``in_order`` (the binlog's ``MySQLCheckpointStore``): one resume position. The pipeline
    ``save``s the newest checkpoint before which every group was acknowledged; ``load``
    gives it back after a restart.

    Not ``in_order`` (the outbox's ``OutboxCheckpoints``): each group is progress by itself,
    since a row is published once Kafka acknowledged it, whatever became of the rows before
    it. The pipeline hands ``save_each`` every group acknowledged since its last call (their
    ``Commit`` checkpoints, in commit order); ``load`` gives None, the source finding what is
    left by itself. A store implements the save of its kind.
    """

    in_order: bool

    def load(self) -> Checkpoint | None: ...

    def save(self, checkpoint: Checkpoint) -> None: ...

    def save_each(self, checkpoints: Sequence[Any]) -> None: ...

    def close(self) -> None: ...
