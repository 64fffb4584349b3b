"""Table patterns: one ``tables:`` entry naming many tables (pure).

Two syntaxes:

- **glob** (any entry with ``*``, ``?`` or ``[``): ``app.user_*``, ``tenant_*.orders``,
  ``app.user_[0-9][0-9]``. The first ``.`` separates the database from the table and is
  always literal; ``*`` matches any run of characters except ``.``, ``?`` one character
  except ``.``, ``[abc]``/``[a-z]``/``[!abc]`` one character of (not of) a set.
- **regular expression**: an entry starting with ``re:``, matched in full against
  ``db.table`` with Python's ``re`` syntax: ``re:app\\.user_\\d{2}``. A literal ``.``
  is ``\\.`` (a bare ``.`` matches any character, the separator included).

Names match case-sensitively (MySQL on Linux keeps table names as written), except in
statements (TRUNCATE, RENAME, ...), where a false match costs only cache misses.

A pattern never matches the shadow tables of online schema change tools, so their
copy rows are never mapped by accident: gh-ost's ``_<t>_gho``/``_<t>_ghc``/``_<t>_del``
and pt-online-schema-change's ``_<t>_new``/``_<t>_old`` (an exact entry may still name
one). The swap itself (``RENAME TABLE t TO _t_del, _t_gho TO t``) names ``t``, so the
table is invalidated as a whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

REGEX_PREFIX = "re:"
GLOB_CHARS = frozenset("*?[")
# gh-ost: _t_gho (ghost), _t_ghc (changelog), _t_del (the old table after the swap);
# pt-online-schema-change: _t_new, _t_old. Leading double underscores come from names
# that already start with one.
SHADOW_TABLE = re.compile(r"^_.+_(gho|ghc|del|new|old)$")


def is_pattern(name: str) -> bool:
    """True when a ``tables:`` entry names many tables (a glob or ``re:`` expression)."""
    return name.startswith(REGEX_PREFIX) or bool(GLOB_CHARS & set(name))


def is_shadow_table(table: str) -> bool:
    """A gh-ost or pt-online-schema-change working table (``_users_gho``, ``_users_new``)."""
    return SHADOW_TABLE.match(table) is not None


@dataclass(frozen=True)
class TablePattern:
    """A parsed pattern entry; ``matches(db, table)`` decides membership."""

    text: str                       # as written in the config
    regex: re.Pattern               # full match against "db.table", case-sensitive
    loose: re.Pattern               # the same, case-insensitive (statements)
    glob: tuple[str, str] | None    # (db glob, table glob), None for a regular expression

    @classmethod
    def parse(cls, text: str) -> "TablePattern":
        """Raises ValueError saying what is wrong with the pattern."""
        if text.startswith(REGEX_PREFIX):
            source, glob = text[len(REGEX_PREFIX):], None
            if not source:
                raise ValueError("empty regular expression after 're:'")
        else:
            db, sep, table = text.partition(".")
            if not sep or not db or not table or "." in table:
                raise ValueError("a glob is written db.table, one '.' between them "
                                 "(for a literal '.' inside a name use re: and '\\.')")
            source, glob = f"{_glob_regex(db)}\\.{_glob_regex(table)}", (db, table)
        try:
            return cls(text, re.compile(source), re.compile(source, re.I), glob)
        except re.error as e:
            raise ValueError(f"not a valid regular expression: {e}") from None

    def matches(self, db: str, table: str, loose: bool = False) -> bool:
        """``db.table`` is one of this pattern's tables (never a shadow table)."""
        if is_shadow_table(table):
            return False
        return (self.loose if loose else self.regex).fullmatch(f"{db}.{table}") is not None


def _glob_regex(glob: str) -> str:
    """A glob part (no '.') as a regular expression."""
    out, i = [], 0
    while i < len(glob):
        c = glob[i]
        if c == "*":
            out.append("[^.]*")
        elif c == "?":
            out.append("[^.]")
        elif c == "[":
            end = glob.find("]", i + 2)
            if end < 0:
                raise ValueError(f"unclosed '[' in {glob!r}")
            body = glob[i + 1:end]
            neg = body.startswith("!")
            body = body[1:] if neg else body
            out.append("[" + ("^" if neg else "") + body.replace("\\", "\\\\") + "]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


# ---- can two globs name one table? (load-time check; regular expressions are checked
# against the live tables instead, where they are known)

def globs_overlap(a: TablePattern, b: TablePattern) -> bool:
    """True when some ``db.table`` matches both glob patterns."""
    if a.glob is None or b.glob is None:
        return False
    return all(_overlap(_tokens(x), _tokens(y)) for x, y in zip(a.glob, b.glob))


# a token: ("*",) any run, else (negated, chars): one character in (not in) chars
def _tokens(glob: str) -> tuple:
    out, i = [], 0
    while i < len(glob):
        c = glob[i]
        if c == "*":
            out.append(("*",))
        elif c == "?":
            out.append((True, frozenset(".")))
        elif c == "[":
            end = glob.find("]", i + 2)
            body = glob[i + 1:end]
            neg = body.startswith("!")
            out.append((neg, _char_set(body[1:] if neg else body)))
            i = end
        else:
            out.append((False, frozenset(c)))
        i += 1
    return tuple(out)


def _char_set(body: str) -> frozenset:
    chars, i = set(), 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            chars.update(chr(o) for o in range(ord(body[i]), ord(body[i + 2]) + 1))
            i += 3
        else:
            chars.add(body[i])
            i += 1
    return frozenset(chars)


def _chars_meet(x: tuple, y: tuple) -> bool:
    """Two one-character tokens (``*`` as any character but '.') accept a common one."""
    x = (True, frozenset(".")) if x == ("*",) else x
    y = (True, frozenset(".")) if y == ("*",) else y
    (nx, cx), (ny, cy) = x, y
    if nx and ny:
        return True                       # the alphabet is unbounded
    if nx:
        return bool(cy - cx)
    if ny:
        return bool(cx - cy)
    return bool(cx & cy)


def _overlap(a: tuple, b: tuple) -> bool:
    """Some text matches both token sequences (a product of the two automata, memoised)."""
    @lru_cache(maxsize=None)
    def meet(i: int, j: int) -> bool:
        if i == len(a) and j == len(b):
            return True
        if i < len(a) and a[i] == ("*",) and meet(i + 1, j):
            return True
        if j < len(b) and b[j] == ("*",) and meet(i, j + 1):
            return True
        if i == len(a) or j == len(b) or not _chars_meet(a[i], b[j]):
            return False
        # consume one character; a star stays where it is (it may take more)
        ni, nj = i + (a[i] != ("*",)), j + (b[j] != ("*",))
        return (ni, nj) != (i, j) and meet(ni, nj)
    return meet(0, 0)
