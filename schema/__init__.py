"""The cachesync contract, imported by producer and consumer alike. Pure: no I/O imports.

Importing the package loads nothing else: ``cachesync.client`` (the application side)
needs only ``resource_text`` and ``keys``, and must not pay for the codec.
"""

from __future__ import annotations


def resource_text(name: str) -> str:
    """Text of a packaged SQL or Lua file, e.g. ``resource_text("sql/cachesync.sql")``."""
    from importlib.resources import files
    return files("cachesync.schema").joinpath(name).read_text(encoding="utf-8")
