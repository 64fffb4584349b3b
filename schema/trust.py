"""The consumer's trust boundary: which Redis keys an event may touch.

Anyone who can write to the change topic can publish an event, so the consumer checks
what an event asks for before any key is touched (both engines plan with
``cachesync.consumer.core.plan``, which calls this):

* ``reserved_key``: no event touches a key under ``cachesync:`` (cachesync's own version,
  lease, table-fence and dedup keys), neither an explicit key nor a key rendered from a
  template.
* ``key_not_allowed``: an explicit key (an outbox event's ``keys``) must match one of the
  table's ``explicit_keys`` patterns. A table without patterns accepts no explicit key:
  the secure default (an unchecked explicit key lets any producer delete any key).

A violation is poison (dead-lettered with the reason); the keys the event may touch are
still invalidated by the salvage path, so a refused event never leaves its row stale.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from cachesync.schema.errors import PoisonError
from cachesync.schema.keys import INTERNAL_PREFIX

RESERVED_KEY, KEY_NOT_ALLOWED = "reserved_key", "key_not_allowed"
_PATTERN_PART = re.compile(r"(\{[A-Za-z_][A-Za-z0-9_$]*\}|\*)")


class UntrustedKeyError(PoisonError):
    """An event asks to touch a key it may not: a reserved key or an explicit key outside
    the table's allow-list."""

    def __init__(self, reason: str, table: str, key: str, why: str):
        super().__init__(reason, f"{table}: key {key!r} {why}")
        self.table, self.key = table, key


@dataclass(frozen=True)
class KeyPattern:
    """An allow-list entry: literal text, ``{name}`` for one key segment (text without
    ``:``), ``*`` for any text. ``leaderboard:{board}``, ``page:home``, ``feed:*``."""

    text: str
    regex: re.Pattern

    @classmethod
    def parse(cls, text: str) -> "KeyPattern":
        """Raises ValueError for an empty pattern or one under the reserved prefix."""
        if not isinstance(text, str) or not text:
            raise ValueError(f"explicit key pattern must be a non-empty string, got {text!r}")
        if text.startswith(INTERNAL_PREFIX):
            raise ValueError(f"explicit key pattern {text!r}: keys under {INTERNAL_PREFIX!r} "
                             "are cachesync's own and never allowed")
        parts = _PATTERN_PART.split(text)
        body = "".join(re.escape(p) if i % 2 == 0 else (".*" if p == "*" else "[^:]+")
                       for i, p in enumerate(parts))
        return cls(text, re.compile(body))

    def matches(self, key: str) -> bool:
        return self.regex.fullmatch(key) is not None


def is_reserved(key: str) -> bool:
    """True for cachesync's own keys, which no event may touch."""
    return key.startswith(INTERNAL_PREFIX)


def is_allowed(key: str, patterns: Sequence[KeyPattern]) -> bool:
    """True when an explicit key is not reserved and matches one of ``patterns``."""
    return not is_reserved(key) and any(p.matches(key) for p in patterns)


def check_rendered(event, *rendered: Iterable[tuple[object, str]]) -> None:
    """Raises UntrustedKeyError when a key rendered from a template is reserved;
    ``rendered``: (template, key) pairs, as the planner renders each image."""
    for pairs in rendered:
        for _, key in pairs:
            if key.startswith(INTERNAL_PREFIX):
                raise UntrustedKeyError(RESERVED_KEY, event.qualified_table, key,
                                        f"was rendered from the row and is under the reserved "
                                        f"prefix {INTERNAL_PREFIX!r}")


def check_explicit(table: str, keys: Iterable[str], patterns: Sequence[KeyPattern]) -> None:
    """Raises UntrustedKeyError for a reserved explicit key or one no pattern allows."""
    for key in keys:
        if is_reserved(key):
            raise UntrustedKeyError(RESERVED_KEY, table, key,
                                    f"is under the reserved prefix {INTERNAL_PREFIX!r}")
        if not any(p.matches(key) for p in patterns):
            allowed = ", ".join(p.text for p in patterns) or "none: no explicit_keys configured"
            raise UntrustedKeyError(KEY_NOT_ALLOWED, table, key,
                                    f"matches no explicit_keys pattern of the table "
                                    f"(allowed: {allowed})")
