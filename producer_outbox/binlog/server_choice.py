"""Which server the tailer reads the binlog from, and whether a checkpoint can resume there.

By default the tailer reads the binlog of ``mysql.host``, the server that also holds its
state (checkpoint, lock, heartbeat). ``tailer.source_hosts`` names other servers to read
instead, typically a replica: a replica is ``read_only``, so the state cannot live there.
The first of them that answers is read; each restart of the tailer tries them again in
order, so a list ``replica, primary`` falls back to the primary while the replica is down.

A binlog position carries over between servers only as a GTID: the same transaction has
the same GTID on the primary, on a replica with ``log_slave_updates`` and on a promoted
replica, while a file:pos names a byte of one server's files. A file:pos checkpoint stored
by another server is refused with the fix, rather than read at a meaningless offset.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from cachesync.producer_outbox.binlog.checkpoint import Checkpoint
from cachesync.runtime.mysql import MySQLParams, close_quietly
from cachesync.schema.errors import FatalError, RetryableError

log = logging.getLogger(__name__)


def first_answering(candidates: list[MySQLParams]) -> MySQLParams:
    """The first server of ``candidates`` that accepts a connection.

    Raises RetryableError naming each failure (all of them unreachable), FatalError as soon
    as one refuses the account (a wrong password stays wrong on the next server too).
    """
    failures = []
    for params in candidates:
        try:
            close_quietly(params.connect(database=None))
            return params
        except RetryableError as e:
            failures.append(f"{params.host}:{params.port}: {e}")
    raise RetryableError("no binlog source answers (tailer.source_hosts): " + "; ".join(failures))


def source_candidates(base: MySQLParams, hosts: tuple[tuple[str, int], ...]) -> list[MySQLParams]:
    """``base`` (account, TLS) at each of ``hosts``, without a default database: the tailer
    reads no table of the source, only its variables and its binlog."""
    return [replace(base, host=host, port=port, database=None) for host, port in hosts]


def check_resumable(checkpoint: Checkpoint | None, identity: str) -> None:
    """Raises FatalError when ``checkpoint`` is a file:pos written while reading another
    server than ``identity``: that offset means nothing in this server's binlog."""
    if checkpoint is None or checkpoint.gtid or not checkpoint.server:
        return
    if checkpoint.server != identity:
        raise FatalError(
            f"the stored checkpoint {checkpoint.describe()} is a file:pos of server "
            f"{checkpoint.server}, but the binlog source is {identity}: a file position does "
            "not carry over to another server (a GTID does; enable GTIDs). Resume with "
            "`cachesync tail --from-gtid <state>` or recover with `cachesync resync`")
