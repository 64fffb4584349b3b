"""Redis Cluster hash slots, pure: which slot a key hashes to, and a short tag per slot.

Redis Cluster hashes a key to one of 16384 slots with CRC16 (XMODEM), over the whole key or,
when the key holds a ``{...}`` with non-empty content, over the content of the FIRST such
pair only (``a{}{b}`` hashes all of ``a{}{b}``; ``a{x}{y}`` hashes ``x``). A script or a
multi-key command may only touch keys of one slot, so cachesync names each companion key
(version, fill lease) ``<prefix>{<tag>}<key>`` where ``<tag>`` is the tag of the key's own
slot: the companion's first ``{...}`` is the tag, and the tag hashes to the key's slot,
whatever braces the key itself contains.
"""

from __future__ import annotations

import binascii
from functools import lru_cache
from typing import Sequence

from cachesync import speedups

# not built or switched off: the list comprehension below, same names
_built_companions = getattr(speedups(), "companions", None)
_compiled_companions = _built_companions

SLOTS = 16384
MAX_TAG_LENGTH = 3      # strings of 3 characters reach every slot (1 or 2 reach only 3,510)
# Tag characters: no braces (they would end or open a tag), no glob metacharacters (SCAN
# patterns), nothing a shell or a log would mangle.
TAG_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def crc16(data: bytes, crc: int = 0) -> int:
    """CRC16-CCITT (XMODEM), the checksum Redis Cluster's key slots use (``crc`` continues
    the checksum of a prefix)."""
    return binascii.crc_hqx(data, crc)


def hashed_part(key: bytes) -> bytes:
    """The part of ``key`` Redis hashes: the first ``{...}`` content if non-empty, else all."""
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            return key[start + 1:end]
    return key


def key_slot(key: str | bytes) -> int:
    """The cluster hash slot of ``key`` (text is encoded as UTF-8, as redis-py sends it)."""
    data = key.encode("utf-8", "surrogateescape") if isinstance(key, str) else key
    return crc16(hashed_part(data)) % SLOTS


@lru_cache(maxsize=1)
def slot_tags() -> tuple[str, ...]:
    """The tag of each slot: the first string (shortest first, then in TAG_ALPHABET order)
    that hashes to it. Deterministic, so every process and the application's client agree;
    computed once per process, on first use (the CRC of a tag's prefix is carried over)."""
    tags: dict[int, str] = {}
    level = [("", 0)]                       # (tag, its CRC) of the previous length
    for _ in range(MAX_TAG_LENGTH):
        longer = []
        for prefix, crc in level:
            for c in TAG_ALPHABET:
                step = crc16(c.encode(), crc)
                tags.setdefault(step % SLOTS, prefix + c)
                if len(tags) == SLOTS:
                    return tuple(tags[slot] for slot in range(SLOTS))
                longer.append((prefix + c, step))
        level = longer
    raise AssertionError("TAG_ALPHABET does not reach every slot")   # pinned by a unit test


def slot_tag(key: str | bytes) -> str:
    """The short tag that hashes to the slot of ``key``."""
    return slot_tags()[key_slot(key)]


def companion(prefix: str, key: str | bytes) -> str | bytes:
    """``<prefix>{<tag of key's slot>}<key>``: a key of cachesync's own in ``key``'s slot
    (bytes in, bytes out: a scanned key need not be UTF-8)."""
    if isinstance(key, bytes):
        return b"%s{%s}%s" % (prefix.encode(), slot_tag(key).encode(), key)
    return _heads(prefix)[key_slot(key)] + key


@lru_cache(maxsize=8)
def _heads(prefix: str) -> tuple[str, ...]:
    """``<prefix>{<tag>}`` of every slot, in slot order (one tuple per prefix, built once)."""
    return tuple(f"{prefix}{{{tag}}}" for tag in slot_tags())


def companions(prefix: str, keys: Sequence[str | bytes]) -> list:
    """``[companion(prefix, key) for key in keys]``; the consumer names a fill-lease
    companion for every key it deletes, so a list of text keys is named by
    ``cachesync._speedups`` when built (ACCELERATED), in one call."""
    if _compiled_companions is not None and type(keys) is list:
        named = _compiled_companions(_heads(prefix), keys)
        if named is not None:
            return named
    return [companion(prefix, key) for key in keys]


ACCELERATED = _compiled_companions is not None


def use_python(on: bool = True) -> None:
    """Name every list of keys' companions in Python (``on``), or go back to the compiled
    namer when built (and not switched off with CACHESYNC_NO_SPEEDUPS)."""
    global _compiled_companions, ACCELERATED
    _compiled_companions = None if on else _built_companions
    ACCELERATED = _compiled_companions is not None
