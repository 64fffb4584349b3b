"""Exact comparison of decoded rows (the fast decoder against the library's), for tests."""

from __future__ import annotations

import decimal
import struct


def difference(a, b, path="rows") -> str | None:
    """Where ``a`` and ``b`` differ in type, value, key order or float bits; None if nowhere."""
    if type(a) is not type(b):
        return f"{path}: {type(a).__name__} {a!r} != {type(b).__name__} {b!r}"
    if isinstance(a, dict):
        if list(a) != list(b):
            return f"{path}: keys {list(a)} != {list(b)}"
        return next(filter(None, (difference(a[k], b[k], f"{path}[{k!r}]") for k in a)), None)
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items != {len(b)}"
        return next(filter(None, (difference(x, y, f"{path}[{i}]")
                                  for i, (x, y) in enumerate(zip(a, b)))), None)
    if isinstance(a, float):
        same = struct.pack("<d", a) == struct.pack("<d", b)
    elif isinstance(a, decimal.Decimal):
        same = a.as_tuple() == b.as_tuple()
    else:
        same = a == b
    return None if same else f"{path}: {a!r} != {b!r}"
