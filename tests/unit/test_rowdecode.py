"""The column plan (producer_outbox/decode/rowdecode.py): every kind it knows is read alike by its
two implementations, the compiled run (``_speedups.compile_plan`` / ``read_value``) and the
Python decoder ``fastrows`` generates from the plan, or left by both to the same reader.

Adding a ``Kind`` without its C reading (or its Python reading) fails here: the differential
layout (tests/unit/test_fastrows_unit.py, LAYOUT) must hold a column of it, and the compiled
run must write, for random values of each column of it, exactly the records the Python path
writes from the twin's rows (or stop before a transaction the Python path decides).
"""

from __future__ import annotations

import random

import pytest
from pymysqlreplication.constants import FIELD_TYPE as I
from pymysqlreplication.row_event import WriteRowsEvent
from pymysqlreplication.table import Table

from cachesync.producer_outbox.decode import fastrows, rowdecode
from cachesync.producer_outbox.encode import hotpath
from cachesync.producer_outbox.decode.rowdecode import COMPILED_KINDS, Kind
from cachesync.producer_outbox.decode.rows import TxnContext
from tests.unit.test_fastrows_unit import LAYOUT, column, gen_any, row_image
from tests.unit.test_plain_run import (MAP_BODY, SERVER, TABLE_MAP, UPDATE, WRITE, event,
                                       plan_of, python_records, rows_event, run, transaction)

speedups = pytest.importorskip("cachesync._speedups", reason="the C accelerator is not built")

KEY = (column("long", I.LONG), gen_any(4))
JSON_COLUMN = column("doc", I.JSON, length_size=4)
VECTOR = 242        # MySQL 9's VECTOR: a type no kind reads (the library decodes its table)


def _of_kind(kind: Kind) -> list:
    return [(c, gen) for c, gen in LAYOUT if rowdecode.column_plan(c).kind == kind]


def test_every_kind_the_compiled_run_reads_has_columns_in_the_differential_layout():
    assert {rowdecode.column_plan(c).kind for c, _ in LAYOUT} == COMPILED_KINDS
    assert COMPILED_KINDS == set(Kind) - {Kind.JSON}


@pytest.mark.skipif(hotpath.compiled_run() is None,
                    reason="the compiled run is not built or switched off")
@pytest.mark.parametrize("kind", sorted(COMPILED_KINDS), ids=lambda k: k.name)
def test_the_compiled_run_writes_the_python_paths_records_for_every_kind(kind):
    """Each column of the kind, kept by the mapping, through both implementations."""
    rng = random.Random(f"kind-{kind.name}")
    for col, gen in _of_kind(kind):
        layout = [KEY, (col, gen)]
        columns = [c for c, _ in layout]
        assert rowdecode.reader(rowdecode.column_plan(col), "strict") is not None
        plans = {MAP_BODY: plan_of(columns, None)}       # every column kept: decoded
        taken = 0
        for etype in (WRITE, UPDATE):
            images = 2 if etype == UPDATE else 1
            for gno in range(20, 60):
                body = b"".join(row_image(rng, layout, range(2)) for _ in range(images))
                ctx = TxnContext(SERVER, f"0-7-{gno}", gno, 1700000000.0, gtid=True)
                want = python_records(columns, None, etype, body, ctx)
                found = run(transaction(gno, [event(TABLE_MAP, MAP_BODY, log_pos=200),
                                              rows_event(etype, 2, body)]), plans)
                if want is None:        # the Python path decides: the run stops before it
                    assert found is False, f"{col.name}: the run took what Python decides"
                    continue
                assert found and found[3] == want, f"{col.name}: {body.hex()}"
                taken += 1
        assert taken >= 10, f"{col.name}: only {taken} of 80 transactions taken"   # (floats
        # with an exponent, NaN: the Python path writes them)


def test_json_is_read_by_the_twin_only_and_the_compiled_run_refuses_it():
    """MySQL's binary JSON (jsoncolumns decodes it, in Python): no compiled plan, so every
    rows event of the table goes through the twin, which decodes it."""
    spec = rowdecode.column_plan(JSON_COLUMN)
    assert spec.kind == Kind.JSON and rowdecode.reader(spec, "strict") is not None
    plan = rowdecode.table_plan([KEY[0], JSON_COLUMN])
    assert rowdecode.compiled_columns(plan, None) is None
    with pytest.raises(ValueError, match="column spec"):
        speedups.compile_plan("db", "t", "binlog", "long",
                              ((int(spec.kind), spec.a, spec.b, spec.name, None),))


@pytest.mark.parametrize("type_", [VECTOR, I.GEOMETRY, I.VAR_STRING, I.DATETIME, I.TIMESTAMP])
def test_a_type_without_a_kind_is_left_to_the_library_by_both(type_):
    """No plan: no generated decoder (``event.rows``, the library, decodes the table) and no
    compiled plan (``RowEncoder.compiled_plan`` leaves the table to the Python path)."""
    columns = [KEY[0], column("v", type_, length_size=4)]
    assert rowdecode.column_plan(columns[1]) is None and rowdecode.table_plan(columns) is None
    full = b"\xff"
    decoder = fastrows.table_decoder(Table(7, "db", "t", columns), WriteRowsEvent, full, None,
                                     False, len(columns))
    assert decoder is None


def test_an_unnamed_column_leaves_the_table_to_the_library():
    assert rowdecode.table_plan([KEY[0], column(None, I.LONG)]) is None


def test_the_plan_kinds_are_the_c_kinds():
    """compile_plan takes every kind by its number, with the parameters column_plan gives."""
    for col, _ in LAYOUT:
        specs = rowdecode.compiled_columns((rowdecode.column_plan(col),), None)
        assert speedups.compile_plan("db", "t", "binlog", "long", specs) is not None
    with pytest.raises(ValueError, match="column spec"):    # out of range: refused, not misread
        speedups.compile_plan("db", "t", "binlog", "long", ((int(Kind.DATE), 4, 0, "d", None),))
