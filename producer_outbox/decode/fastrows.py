"""The row decoder's Python implementation: a function generated from a table's column plan.

``decode_rows`` returns the rows python-mysql-replication's ``RowsEvent.rows`` would, quirks
included, built by a Python function generated from the table's column plan (``rowdecode``, the
design the compiled run reads too; no type dispatch at run time), or None where the library would
raise or only a corrupt event could take it off the library's results. It reads the library's
internals through ``cachesync.runtime.library_adapter``; the tests compare it with the library
on real and synthetic events, which is what to rerun when upgrading the library. The row
layout, the quirks reproduced and how decoders are cached: docs/internals.md, "Row decoding per
table".
"""

from __future__ import annotations

import struct
from typing import Callable

from pymysqlreplication.constants import NONE_SOURCE
from pymysqlreplication.row_event import (DeleteRowsEvent, PartialUpdateRowsEvent,
                                          UpdateRowsEvent, WriteRowsEvent)

from cachesync.runtime.library_adapter import (has_unread, ignores_decode_errors,
                                                       packet_bytes, packet_position)
from cachesync.producer_outbox.decode.rowdecode import (AS_IS, JSON_DOC, RUNTIME, UINT_LE, Field,
                                                 Kind, json_partial, reader, table_plan)

# The images of one row and the keys the library stores them under.
_IMAGE_KEYS = {
    WriteRowsEvent: (("values", "none_sources"),),
    DeleteRowsEvent: (("values", "none_sources"),),
    UpdateRowsEvent: (("before_values", "before_none_sources"),
                      ("after_values", "after_none_sources")),
}
_IMAGE_KEYS[PartialUpdateRowsEvent] = _IMAGE_KEYS[UpdateRowsEvent]

# Exceptions a generated decoder raises on input the library would reject or
# decode in some way it does not reproduce (truncated event, undecodable
# string, impossible date, fraction out of range): decode_rows then returns None.
GIVE_UP = (ValueError, IndexError, struct.error)

# (schema, table) -> (snapshot of the columns' attributes, decoders for that layout)
_LAYOUTS: dict[tuple[str, str], tuple[list[dict], dict]] = {}


def decode_rows(event) -> list[dict] | None:
    """``event.rows``, decoded by the table's specialised decoder, or None.

    ``event`` is a WriteRowsEvent, UpdateRowsEvent or DeleteRowsEvent whose rows
    have not been read. Nothing is consumed from its packet, so ``event.rows``
    still works afterwards (and is what to use when this returns None: a column
    type or event variant the fast path does not cover, or data it would not
    decode exactly as the library does).
    """
    kind = type(event)
    if kind not in _IMAGE_KEYS or not event.complete:
        return None
    wrapper = event.packet
    if has_unread(wrapper):     # bytes pushed back by `unread`
        return None
    decoder = table_decoder(event.table_map[event.table_id], kind, event.columns_present_bitmap,
                            getattr(event, "columns_present_bitmap2", None),
                            ignores_decode_errors(event), event.number_of_columns)
    if decoder is None:
        return None
    packet = wrapper.packet
    start = packet_position(packet)
    try:
        return decoder(packet_bytes(packet), start, start + event.event_size - wrapper.read_bytes)
    except GIVE_UP:
        return None


def _layout_decoders(table) -> dict:
    """The decoders of ``table``'s column layout: shared while the layout is unchanged."""
    columns = list(map(vars, table.columns))
    name = (table.schema, table.table)
    known = _LAYOUTS.get(name)
    if known is None or known[0] != columns:
        known = _LAYOUTS[name] = ([dict(c) for c in columns], {})
    return known[1]


def table_decoder(table, kind, bitmap: bytes, bitmap2: bytes | None, ignore_errors: bool,
                  number_of_columns: int) -> Callable | None:
    """The generated decoder of ``table``'s rows in a ``kind`` event (a library row event
    class) with these columns-present bitmaps, or None when the fast path does not cover it.

    The decoder is ``decoder(data, start, end) -> rows``: ``data[start:end]`` is the event's
    row section; it raises one of ``GIVE_UP`` where the library's result would differ.
    """
    decoders = table.__dict__.get("_fastrows")
    if decoders is None:
        decoders = table._fastrows = _layout_decoders(table)
    key = (kind, bitmap, bitmap2, ignore_errors, number_of_columns)
    try:
        return decoders[key]
    except KeyError:
        decoder = decoders[key] = _build(table.columns, key)
        return decoder


def _build(columns, key) -> Callable | None:
    """Compile the decoder for ``columns`` and ``key`` (None: unsupported)."""
    kind, bitmap, bitmap2, ignore_errors, number_of_columns = key
    images = _IMAGE_KEYS[kind]
    errors = "ignore" if ignore_errors else "strict"
    plan = table_plan(columns)
    if (number_of_columns != len(columns) or plan is None
            or not any(any(b) for b in (bitmap, bitmap2) if b)):
        return None     # (no column present: rows of no bytes, malformed; the library's)
    fields = [reader(c, errors) for c in plan]
    names = [c.name for c in columns]
    per_image, heads = [fields] * len(images), [[]] * len(images)
    if kind is PartialUpdateRowsEvent:
        per_image, heads = _partial_json(plan, fields)
    return _compile(per_image, names, images, (bitmap, bitmap2)[:len(images)], heads)


def _partial_json(plan, fields: list) -> tuple[list, list]:
    """(fields per image, statements before each image) of a PARTIAL_UPDATE_ROWS_EVENT, as
    the library (with jsoncolumns' reader) reads it: JSON values keep their document; the
    after image starts with the value options (1: PARTIAL_JSON, else the fast path gives
    up) and then one partial bit per JSON column of the table, set where the column's
    value is a diff vector."""
    json_columns = [i for i, c in enumerate(plan) if c.kind == Kind.JSON]
    before, after = list(fields), list(fields)
    for k, i in enumerate(json_columns):
        before[i] = Field(JSON_DOC, length_size=fields[i].length_size)
        after[i] = Field(json_partial, length_size=fields[i].length_size, const=1 << k)
    width = (len(json_columns) + 7) // 8
    head = ["opts = data[pos]",
            "if opts > 1: raise ValueError('binlog row value options')",
            "pos += 1",
            "if opts:",
            f"    pbits = _from_bytes(data[pos:pos + {width}], 'little')",
            f"    pos += {width}",
            "else:",
            "    pbits = 0"]
    return [before, after], [[], head]


# -- code generation ----------------------------------------------------------------------

def _indent(lines: list) -> list:
    return ["    " + line for line in lines]


def _compile(per_image: list, names: list, images, bitmaps, heads: list) -> Callable:
    """Generate and compile ``decode(data, pos, end) -> rows``.

    ``data`` is the whole packet, ``pos`` where the first row starts, ``end`` where
    the rows end. ``per_image``: the fields of each image; ``heads``: the statements
    that read what precedes each image's null bitmap. Returns None instead of rows that
    would overrun the packet.
    """
    scope = dict(RUNTIME)

    def bind(value, prefix: str) -> str:
        name = f"{prefix}{len(scope)}"
        scope[name] = value
        return name

    body, row = [], []
    for n, ((values_key, ns_key), bitmap) in enumerate(zip(images, bitmaps)):
        fields = per_image[n]
        consts = [None if f.const is None else bind(f.const, "K") for f in fields]
        image = _Image(fields, consts, names, bitmap, bind)
        body += heads[n] + image.lines() + [f"values{n} = {image.values_display()}",
                                            f"ns{n} = ns"]
        row += [f"{values_key!r}: values{n}", f"{ns_key!r}: ns{n}"]
    source = "\n".join(["def decode(data, pos, end):",
                        "    rows = []",
                        "    while pos < end:",
                        *_indent(_indent(body)),
                        f"        rows.append({{{', '.join(row)}}})",
                        "    return rows if pos <= len(data) else None"])
    exec(compile(source, "<fastrows>", "exec"), scope)
    return scope["decode"]


class _Image:
    """Statements reading one row image: its values into ``v<i>``, None sources into ``ns``.

    Consecutive present fixed-width columns form a run: when none of them is NULL
    (the usual case), one struct call per byte order reads them all at fixed
    offsets; otherwise each is read in turn.
    """

    def __init__(self, fields, consts, names, bitmap: bytes, bind):
        self.fields, self.consts, self.names, self.bind = fields, consts, names, bind
        present = [i for i in range(len(fields)) if bitmap[i >> 3] & (1 << (i & 7))]
        self.null_bit = {i: 1 << k for k, i in enumerate(present)}
        # The library sizes the null bitmap by every bit set in the columns-present
        # bitmap, padding bits included.
        self.null_bytes = (sum(bin(b).count("1") for b in bitmap) + 7) // 8

    def values_display(self) -> str:
        return "{" + ", ".join(f"{name!r}: v{i}" for i, name in enumerate(self.names)) + "}"

    def lines(self) -> list:
        n = self.null_bytes
        out = ["nulls = data[pos]" if n == 1 else
               f"nulls = _from_bytes(data[pos:pos + {n}], 'little')" if n else "nulls = 0",
               f"pos += {n}", "ns = {}"]
        run = []
        for i, field in enumerate(self.fields):
            if i in self.null_bit and field.codes:
                run.append(i)
                continue
            out += self._run(run)
            run = []
            if i in self.null_bit:
                out += self._nullable(i, self._prefixed(i))
            else:
                out += [f"v{i} = None", f"ns[{self.names[i]!r}] = {NONE_SOURCE.COLS_BITMAP!r}"]
        return out + self._run(run)

    def _raws(self, i: int) -> list:
        """Names for the struct values of fixed-width column ``i``."""
        if self.fields[i].convert is AS_IS:
            return [f"v{i}"]
        return [f"r{i}_{k}" for k in range(self.fields[i].raw_count)]

    def _convert(self, i: int, raws: list) -> list:
        return self.fields[i].convert(f"v{i}", raws, repr(self.names[i]), self.consts[i])

    def _nullable(self, i: int, read: list) -> list:
        return [f"if nulls & {self.null_bit[i]}:",
                f"    v{i} = None",
                f"    ns[{self.names[i]!r}] = {NONE_SOURCE.NULL!r}",
                "else:", *_indent(read)]

    def _prefixed(self, i: int) -> list:
        """Length-prefixed column ``i`` at ``pos``."""
        size = self.fields[i].length_size
        if size == 1:
            length = ["n = data[pos]"]
        else:
            codes, expr = UINT_LE[size]
            unpack = self.bind(struct.Struct("<" + codes).unpack_from, "U")
            parts = [f"n{k}" for k in range(len(codes))]
            length = [f"{', '.join(parts)}, = {unpack}(data, pos)", f"n = {expr.format(*parts)}"]
        return [*length, f"pos += {size}", *self._convert(i, ["data[pos:pos + n]"]), "pos += n"]

    def _fixed(self, i: int) -> list:
        """Fixed-width column ``i`` at ``pos``."""
        field = self.fields[i]
        unpack = self.bind(struct.Struct(field.endian + field.codes).unpack_from, "U")
        raws = self._raws(i)
        return [f"{', '.join(raws)}, = {unpack}(data, pos)", f"pos += {field.width}",
                *self._convert(i, raws)]

    def _run(self, run: list) -> list:
        one_by_one = [line for i in run for line in self._nullable(i, self._fixed(i))]
        if len(run) < 2:
            return one_by_one
        mask = sum(self.null_bit[i] for i in run)
        return [f"if nulls & {mask}:", *_indent(one_by_one),
                "else:", *_indent(self._at_fixed_offsets(run))]

    def _at_fixed_offsets(self, run: list) -> list:
        """The columns of ``run``, none NULL: one unpack per byte order, then conversions."""
        out, raws = [], {}
        for endian in "<>":
            members = [i for i in run if self.fields[i].endian == endian]
            if not members:
                continue
            fmt = "".join(self.fields[i].codes if i in members else f"{self.fields[i].width}x"
                          for i in run)
            for i in members:
                raws[i] = self._raws(i)
            unpack = self.bind(struct.Struct(endian + fmt).unpack_from, "U")
            out.append(f"{', '.join(r for i in members for r in raws[i])}, = {unpack}(data, pos)")
        for i in run:
            out += self._convert(i, raws[i])
        return out + [f"pos += {sum(self.fields[i].width for i in run)}"]
