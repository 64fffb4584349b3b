"""The benchmark's peer readers (bench/peers): Debezium, Canal and go-mysql built, run on one
binlog range of the real MariaDB, and counting exactly that range's row changes per operation,
with their CPU seconds over it.

The first run in a clean clone downloads the readers' jars from Maven Central (with an empty
Maven repository 281 s for Debezium and 154 s for Canal on the loaded 2-core host, 35-40 s each
with Maven's plugins already there); later runs reuse bench/peers/<peer>/target.
"""

from __future__ import annotations

import pytest

from bench import peers
from bench.common import Sandbox, Stack
from bench.tailer import DDL, SINGLE_ROW, write_changes

pytestmark = pytest.mark.integration

ROWS = 2000
BEFORE = 300        # row changes committed just before the range: a reader starting early counts them


@pytest.fixture
def box(stack):
    box = Sandbox(Stack(), "peers")
    box.create_schema(DDL, DDL.replace("CREATE TABLE t ", "CREATE TABLE s "))
    yield box
    box.cleanup()


def _write_before(box: Sandbox, table: str) -> None:
    """BEFORE inserts of ids write_changes never uses, each its own transaction."""
    with box.stack.admin(box.db) as conn, conn.cursor() as cur:
        for i in range(BEFORE):
            cur.execute(f"INSERT INTO {table} VALUES (%s, 1, 'before', 1.0, '2024-01-01')",
                        (10**12 + i,))


@pytest.mark.parametrize("table, txn_rows", [("t", (20, 80)), ("s", SINGLE_ROW)],
                         ids=["M-multi-row-transactions", "S-single-row-transactions"])
def test_each_peer_reads_exactly_the_range(box, table, txn_rows):
    _write_before(box, table)
    data = write_changes(box, table, ROWS, txn_rows=txn_rows)
    assert sum(data["ops"].values()) == ROWS
    assert all(data["ops"].values()), data["ops"]     # inserts, updates and deletes all there
    for peer in peers.PEERS:
        result = peers.read_range(peer, box.stack.env, database=box.db, table=table,
                                  data=data, rows=ROWS, server_id=box.new_server_id(),
                                  timeout_s=300)
        assert result["rows"] == ROWS, (peer, result)
        # per operation, the same as written: a start before the range would add BEFORE inserts
        assert result["ops"] == data["ops"], (peer, result)
        assert result["seconds"] > 0 and result["rows_per_s"] == pytest.approx(
            ROWS / result["seconds"], rel=0.01), (peer, result)
        assert result["cpu_s"] >= 0 and result["cpu_s_per_100k_rows"] == pytest.approx(
            result["cpu_s"] / ROWS * 100_000, abs=1e-3), (peer, result)


def test_a_range_shorter_than_asked_is_an_error_not_a_figure(box):
    # both readers stop through the same watchdog (Args.watchdog): Canal, the faster to
    # start, stands for both
    data = write_changes(box, "t", 200)
    with pytest.raises(RuntimeError, match="the canal reader failed .*timed out after 200 of 201 rows"):
        peers.read_range("canal", box.stack.env, database=box.db, table="t", data=data,
                         rows=201, server_id=box.new_server_id(), timeout_s=30)
