"""Test data shared by the binlog decoding tests: a table with every column type the
generated row decoders support, its random and edge-case rows, and a writer."""

from __future__ import annotations

import contextlib
import datetime
import json
import random
import uuid


def write(stack, db, statements) -> tuple[str, int]:
    """Run ``statements`` (SQL text, or (SQL, rows) for executemany) in one session.

    Returns the binlog position before them.
    """
    return write_range(stack, db, statements)[0]


def write_range(stack, db, statements) -> tuple[tuple[str, int], tuple[str, int]]:
    """Like ``write``; returns the binlog positions (file, pos) before and after them."""
    with stack.admin(db) as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        start = cur.fetchone()[:2]
        for statement in statements:
            if isinstance(statement, tuple):
                cur.executemany(*statement)
            else:
                cur.execute(statement)
        cur.execute("SHOW MASTER STATUS")
        end = cur.fetchone()[:2]
    return start, end


@contextlib.contextmanager
def scratch_database(stack, prefix: str):
    """A database of its own for one test (``<prefix>_<random>``), dropped after it."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    try:
        yield name
    finally:
        with stack.admin() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")


# -- a table with every supported column type ---------------------------------------------

def _int(bits, unsigned=False):
    low, high = (0, 2 ** bits - 1) if unsigned else (-2 ** (bits - 1), 2 ** (bits - 1) - 1)
    return lambda r: r.choice([low, high, 0, r.randint(low, high)])


def _decimal(precision, scale):
    def value(r):
        digits = "".join(r.choice("0123456789") for _ in range(precision))
        text = f"{digits[:precision - scale]}.{digits[precision - scale:]}".strip(".") or "0"
        return ("-" if r.random() < 0.5 else "") + text
    return value


def _text(alphabet, longest):
    def value(r):
        return "".join(r.choice(alphabet) for _ in range(r.choice([0, 1, r.randint(0, longest)])))
    return value


def _datetime(fsp):
    def value(r):
        t = datetime.datetime(r.randint(1000, 9999), r.randint(1, 12), r.randint(1, 28),
                              r.randint(0, 23), r.randint(0, 59), r.randint(0, 59),
                              r.randint(0, 999999))
        return t.isoformat(" ", "microseconds")
    return value


def _timestamp(r):
    t = datetime.datetime(1970, 1, 1) + datetime.timedelta(
        seconds=r.randint(1, 2 ** 31 - 1), microseconds=r.randint(0, 999999))
    return t.isoformat(" ", "microseconds")


def _time(r):
    seconds, micro = r.randint(0, 838 * 3600 + 59 * 60 + 58), r.randint(0, 999999)
    sign = r.choice(["", "-"])
    return f"{sign}{seconds // 3600}:{seconds // 60 % 60:02}:{seconds % 60:02}.{micro:06}"


UNICODE = "aZ é€中😀'\"\\\0"
# (name, SQL type, random value); every column but id is nullable
COLUMNS = [
    ("ti", "TINYINT", _int(8)), ("uti", "TINYINT UNSIGNED", _int(8, True)),
    ("si", "SMALLINT", _int(16)), ("usi", "SMALLINT UNSIGNED", _int(16, True)),
    ("mi", "MEDIUMINT", _int(24)), ("umi", "MEDIUMINT UNSIGNED", _int(24, True)),
    ("i", "INT", _int(32)), ("ui", "INT UNSIGNED", _int(32, True)),
    ("bi", "BIGINT", _int(64)), ("ubi", "BIGINT UNSIGNED", _int(64, True)),
    ("f", "FLOAT", lambda r: r.choice([0.0, -1.5, 3.4e38, r.uniform(-1e30, 1e30)])),
    ("d", "DOUBLE", lambda r: r.choice([-0.0, 1.7976931348623157e308, r.uniform(-1e300, 1e300)])),
    ("dec65", "DECIMAL(65,30)", _decimal(65, 30)), ("dec65i", "DECIMAL(65,0)", _decimal(65, 0)),
    ("dec10", "DECIMAL(10,0)", _decimal(10, 0)), ("dec5", "DECIMAL(5,5)", _decimal(5, 5)),
    ("dec18", "DECIMAL(18,9)", _decimal(18, 9)), ("dec7", "DECIMAL(7,3)", _decimal(7, 3)),
    ("vc", "VARCHAR(20)", _text(UNICODE, 20)), ("vcl", "VARCHAR(300)", _text(UNICODE, 300)),
    ("c", "CHAR(10)", _text(UNICODE, 10)),
    ("cl", "CHAR(5) CHARACTER SET latin1", _text("aé€ ", 5)),
    ("ca", "VARCHAR(10) CHARACTER SET ascii", _text("az09 ", 10)),
    ("u16", "VARCHAR(10) CHARACTER SET utf16", _text(UNICODE, 10)),
    ("uc2", "CHAR(4) CHARACTER SET ucs2", _text("aé€中", 4)),
    ("vb", "VARBINARY(20)", lambda r: r.randbytes(r.randint(0, 20))),
    ("bn", "BINARY(4)", lambda r: r.randbytes(r.randint(0, 4))),
    ("tt", "TINYTEXT", _text(UNICODE, 60)), ("tx", "TEXT", _text(UNICODE, 500)),
    ("mt", "MEDIUMTEXT", _text(UNICODE, 500)), ("lt", "LONGTEXT", _text(UNICODE, 500)),
    ("tb", "TINYBLOB", lambda r: r.randbytes(r.randint(0, 255))),
    ("bl", "BLOB", lambda r: r.randbytes(r.randint(0, 300))),
    ("mb", "MEDIUMBLOB", lambda r: r.randbytes(r.randint(0, 300))),
    ("lb", "LONGBLOB", lambda r: r.randbytes(r.randint(0, 300))),
    ("js", "JSON", lambda r: json.dumps({"k": r.random(), "s": _text(UNICODE, 5)(r)})),
    *[(f"dt{n}", f"DATETIME({n})", _datetime(n)) for n in range(7)],
    *[(f"ts{n}", f"TIMESTAMP({n}) NULL", _timestamp) for n in range(7)],
    *[(f"tm{n}", f"TIME({n})", _time) for n in range(7)],
    ("dte", "DATE", lambda r: f"{r.randint(1000, 9999)}-{r.randint(1, 12)}-{r.randint(1, 28)}"),
    ("yr", "YEAR", lambda r: r.choice([0, 1901, 2155, r.randint(1901, 2155)])),
    ("en", "ENUM('a','b','ç')", lambda r: r.choice("abç")),
    ("st", "SET('x','y','z')", lambda r: ",".join(r.sample("xyz", r.randint(0, 3)))),
    ("b1", "BIT(1)", lambda r: r.randint(0, 1)), ("b10", "BIT(10)", lambda r: r.getrandbits(10)),
    ("b64", "BIT(64)", lambda r: r.getrandbits(64)),
    ("ip", "INET6", lambda r: r.choice(["::", "::1", "2001:db8::ff00:42:8329", "10.1.2.3"])),
    ("uu", "UUID", lambda r: str(uuid.UUID(int=r.getrandbits(128)))),
]
NAMES = [name for name, _, _ in COLUMNS]
INSERT = (f"INSERT INTO every_type (id, {', '.join(NAMES)}) "
          f"VALUES (%s, {', '.join(['%s'] * len(NAMES))})")


def random_rows(ids, seed):
    r = random.Random(seed)
    return [(i, *[None if r.random() < 0.15 else value(r) for _, _, value in COLUMNS]) for i in ids]


def special_rows():
    """NULLs, minimums, maximums and zero or odd dates (under sql_mode='')."""
    minimum = {"ti": -128, "uti": 0, "si": -32768, "usi": 0, "mi": -8388608, "umi": 0,
               "i": -2 ** 31, "ui": 0, "bi": -2 ** 63, "ubi": 0, "f": -3.4e38,
               "d": -1.7976931348623157e308, "dec65": "-" + "9" * 35 + "." + "9" * 30,
               "dec65i": "-" + "9" * 65, "dec10": "-9999999999", "dec5": "-0.99999",
               "dec18": "-0.000000001", "dec7": "0.000", "vc": "", "vcl": "", "c": "",
               "cl": "", "ca": "", "u16": "", "uc2": "", "vb": b"", "bn": b"", "tt": "",
               "tx": "", "mt": "", "lt": "", "tb": b"", "bl": b"", "mb": b"", "lb": b"",
               "js": "[]", **{f"dt{n}": "1000-01-01 00:00:00" for n in range(7)},
               **{f"ts{n}": "1970-01-01 00:00:01" for n in range(7)},
               **{f"tm{n}": "-838:59:59" for n in range(7)},
               "dte": "1000-01-01", "yr": 1901, "en": "a", "st": "", "b1": 0, "b10": 0,
               "b64": 0, "ip": "::", "uu": "00000000-0000-0000-0000-000000000000"}
    maximum = {"ti": 127, "uti": 255, "si": 32767, "usi": 65535, "mi": 8388607, "umi": 16777215,
               "i": 2 ** 31 - 1, "ui": 2 ** 32 - 1, "bi": 2 ** 63 - 1, "ubi": 2 ** 64 - 1,
               "f": 3.4e38, "d": 1.7976931348623157e308, "dec65": "9" * 35 + "." + "9" * 30,
               "dec65i": "9" * 65, "dec10": "9999999999", "dec5": "0.99999",
               "dec18": "999999999.999999999", "dec7": "-9999.999", "vc": "😀" * 20,
               "vcl": "é" * 300, "c": "中" * 10, "cl": "€é", "ca": "z" * 10, "u16": "😀" * 5,
               "uc2": "中中中中", "vb": b"\0\xff" * 10, "bn": b"\xff\0\xff\0", "tt": "x" * 255,
               "tx": "€" * 21000, "mt": "m" * 70000, "lt": "l" * 70000, "tb": b"\xff" * 255,
               "bl": b"\0" * 65535, "mb": b"\x01" * 70000, "lb": b"\x02" * 70000,
               "js": json.dumps({"deep": [[[1.5]]], "text": "😀"}),
               **{f"dt{n}": "9999-12-31 23:59:59.999999" for n in range(7)},
               **{f"ts{n}": "2038-01-19 03:14:07.999999" for n in range(7)},
               **{f"tm{n}": "838:59:58.999999" for n in range(7)},
               "dte": "9999-12-31", "yr": 2155, "en": "ç", "st": "x,y,z", "b1": 1,
               "b10": 1023, "b64": 2 ** 64 - 1, "ip": "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
               "uu": "ffffffff-ffff-ffff-ffff-ffffffffffff"}
    odd = {**{f"dt{n}": "0000-00-00 00:00:00" for n in range(4)},
           "dt4": "2020-00-00 10:00:00", "dt5": "2020-02-00 00:00:00.5",
           "dt6": "0000-01-01 00:00:00",
           **{f"ts{n}": "0000-00-00 00:00:00" for n in range(7)},
           **{f"tm{n}": f"-00:00:01.{'123456'[:n]}" for n in range(7)},
           "dte": "0000-00-00", "yr": 0, "en": "", "st": "", "dec5": "0.00000",
           "dec65": "-0.000000000000000000000000000001", "d": -0.0}
    fractions = {**{f"dt{n}": "2024-02-29 12:34:56.123456" for n in range(7)},
                 **{f"ts{n}": "2024-02-29 12:34:56.654321" for n in range(7)},
                 **{f"tm{n}": "-12:34:56.000001" for n in range(7)}, "dte": "2020-00-15"}
    return [(i, *[values.get(name) for name in NAMES])
            for i, values in enumerate([{}, minimum, maximum, odd, fractions], start=1)]


