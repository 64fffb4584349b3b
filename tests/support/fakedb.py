"""A DB-API connection double for unit tests of pure code (no server)."""

from __future__ import annotations


class FakeConnection:
    """A connection that is its own cursor and its own context manager; subclasses answer
    ``execute`` and the ``fetch*`` calls."""

    def cursor(self):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
