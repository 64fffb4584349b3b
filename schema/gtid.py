"""GTIDs and GTID states of both server flavors, pure: parse, merge, format.

The tailer keeps one GtidState per stream and stores its canonical text in the checkpoint; its
ordinal numbers the state in the stream's history and keeps growing across a failover,
whichever server is read (update-mode versions are built from it). The two flavors' forms and
why the ordinal grows: docs/internals.md, "GTIDs and their ordinal".
"""

from __future__ import annotations

import bisect
import re
import struct
import uuid as uuidlib
from dataclasses import dataclass

_MARIADB_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_INTERVAL = re.compile(r"^(\d+)(?:-(\d+))?$")
# MySQL 8.3+ GTID tags: a letter or underscore, then up to 31 letters, digits, underscores;
# case-insensitive (the server prints them lower case)
_TAG = re.compile(r"^[a-z_][a-z0-9_]{0,31}$")
# MySQL gno values are 1 .. 2**63 - 1 (rpl_gno.h: GNO_END).
MAX_GNO = (1 << 63) - 1

MARIADB, MYSQL = "mariadb", "mysql"


@dataclass(frozen=True)
class Gtid:
    """One transaction's GTID."""

    flavor: str        # "mariadb" | "mysql"
    source: str        # MariaDB domain id (as text) or MySQL server uuid (``uuid:tag`` if tagged)
    ordinal: int       # MariaDB seq_no or MySQL gno: grows with commit order per source
    server_id: int = 0  # MariaDB only: the originating server

    def __str__(self) -> str:
        if self.flavor == MARIADB:
            return f"{self.source}-{self.server_id}-{self.ordinal}"
        return f"{self.source}:{self.ordinal}"


def parse_gtid(text: str) -> Gtid:
    """``0-1-42``, ``UUID:23`` or ``UUID:tag:23`` -> Gtid; raises ValueError naming the text."""
    text = text.strip()
    m = _MARIADB_GTID.match(text)
    if m:
        return Gtid(MARIADB, str(int(m.group(1))), int(m.group(3)), int(m.group(2)))
    source, sep, gno = text.rpartition(":")
    uuid, _, tag = source.partition(":")
    if (sep and _is_uuid(uuid) and (not tag or _is_tag(tag)) and gno.isdigit()
            and 0 < int(gno) <= MAX_GNO):
        return Gtid(MYSQL, source.lower(), int(gno))
    raise ValueError(f"not a GTID (expected domain-server-seq, uuid:number or "
                     f"uuid:tag:number): {text!r}")


def _is_tag(text: str) -> bool:
    return bool(_TAG.match(text.lower()))


def _is_uuid(text: str) -> bool:
    return bool(_UUID.match(text.lower()))


class GtidState:
    """The transactions a stream has executed, in either flavor (mutable, single-threaded).

    An empty state takes the flavor of the first GTID added; mixing flavors raises
    ValueError (a checkpoint from a MariaDB server resumed against MySQL is a
    configuration mistake, not something to merge).
    """

    def __init__(self) -> None:
        self.flavor: str | None = None
        self._domains: dict[int, Gtid] = {}                    # MariaDB
        self._intervals: dict[str, list[list[int]]] = {}       # MySQL: uuid -> [[lo, hi], ...]
        self.ordinal = 0        # the state's place in the history (see the module docstring)

    @classmethod
    def parse(cls, text: str | None) -> "GtidState":
        """Parse a stored state (either flavor, ``None``/empty = empty); raises ValueError."""
        state = cls()
        for part in (text or "").split(","):
            part = part.strip()
            if not part:
                continue
            if _MARIADB_GTID.match(part):
                state.add(parse_gtid(part))
            else:
                state._add_mysql_member(part)
        return state

    def add(self, gtid: Gtid) -> None:
        """Record one executed transaction."""
        self._set_flavor(gtid.flavor)
        if gtid.flavor == MARIADB:
            # The state is the *last* GTID per domain: binlog order within a domain
            # is the commit order, so the newest one replaces the old.
            old = self._domains.get(int(gtid.source))
            self.ordinal += gtid.ordinal - (old.ordinal if old is not None else 0)
            self._domains[int(gtid.source)] = gtid
        elif gtid not in self:
            self.ordinal += 1
            _insert(self._intervals.setdefault(gtid.source, []), gtid.ordinal, gtid.ordinal)

    def is_next(self, gtid: Gtid) -> bool:
        """Whether ``gtid`` is the transaction right after this state in its own domain
        (MariaDB: the domain's last seq_no + 1) or source (MySQL: the uuid's, or uuid and
        tag's, highest gno + 1). False for a domain or source the state does not hold."""
        if gtid.flavor != self.flavor:
            return False
        if gtid.flavor == MARIADB:
            mine = self._domains.get(int(gtid.source))
            return mine is not None and gtid.ordinal == mine.ordinal + 1
        intervals = self._intervals.get(gtid.source)
        return bool(intervals) and gtid.ordinal == intervals[-1][1] + 1

    def last_per_domain(self) -> dict[int, int]:
        """MariaDB: each domain's last seq_no (empty for MySQL)."""
        return {domain: gtid.ordinal for domain, gtid in self._domains.items()}

    def union(self, other: "GtidState") -> "GtidState":
        """A new state holding both (MariaDB: per domain, the higher seq_no wins)."""
        out = GtidState.parse(str(self))
        if other.flavor is None:
            return out
        out._set_flavor(other.flavor)
        for domain, gtid in other._domains.items():
            mine = out._domains.get(domain)
            if mine is None or gtid.ordinal > mine.ordinal:
                out._domains[domain] = gtid
        for uuid, intervals in other._intervals.items():
            target = out._intervals.setdefault(uuid, [])
            for lo, hi in intervals:
                _insert(target, lo, hi)
        out._recount()
        return out

    def _recount(self) -> None:
        self.ordinal = (sum(g.ordinal for g in self._domains.values())
                        + sum(hi - lo + 1 for ivs in self._intervals.values() for lo, hi in ivs))

    def __contains__(self, gtid: Gtid) -> bool:
        if gtid.flavor != self.flavor:
            return False
        if gtid.flavor == MARIADB:
            mine = self._domains.get(int(gtid.source))
            return mine is not None and gtid.ordinal <= mine.ordinal
        intervals = self._intervals.get(gtid.source, [])
        i = bisect.bisect_right(intervals, [gtid.ordinal, MAX_GNO + 1]) - 1
        return i >= 0 and intervals[i][0] <= gtid.ordinal <= intervals[i][1]

    def __bool__(self) -> bool:
        return bool(self._domains or self._intervals)

    def __str__(self) -> str:
        if self.flavor == MARIADB:
            if len(self._domains) == 1:       # the common case, once per transaction
                return str(next(iter(self._domains.values())))
            return ",".join(str(self._domains[d]) for d in sorted(self._domains))
        # as MySQL prints it: per uuid its untagged intervals, then each tag's
        by_uuid: dict[str, list[str]] = {}
        for source, ivs in sorted(self._intervals.items()):
            if ivs:
                uuid, _, tag = source.partition(":")
                parts = by_uuid.setdefault(uuid, [])
                parts.extend(([tag] if tag else []) + [_interval_text(lo, hi) for lo, hi in ivs])
        return ",".join(uuid + "".join(f":{p}" for p in parts) for uuid, parts in by_uuid.items())

    def members(self) -> list[tuple[str, str, list[tuple[int, int]]]]:
        """(uuid, tag, inclusive intervals) of a MySQL set, in text order ("" = untagged)."""
        out = []
        for source, ivs in sorted(self._intervals.items()):
            uuid, _, tag = source.partition(":")
            if ivs:
                out.append((uuid, tag, [(lo, hi) for lo, hi in ivs]))
        return out

    def __repr__(self) -> str:
        return f"GtidState({str(self)!r})"

    def _set_flavor(self, flavor: str) -> None:
        if self.flavor is None:
            self.flavor = flavor
        elif self.flavor != flavor:
            raise ValueError(f"cannot mix a {flavor} GTID into a {self.flavor} GTID state")

    def _add_mysql_member(self, member: str) -> None:
        """``uuid:1-5:7:tag:1-3`` (one uuid, its intervals, then each tag's) into the set."""
        uuid, *parts = member.split(":")
        uuid = uuid.strip().lower()
        if not _is_uuid(uuid) or not parts:
            raise ValueError(f"not a GTID set member (expected uuid[:tag]:interval"
                             f"[:interval...]): {member!r}")
        self._set_flavor(MYSQL)
        target, tag_open = None, False
        for text in (p.strip() for p in parts):
            m = _INTERVAL.match(text)
            if m is None and _is_tag(text) and not tag_open:   # the intervals after it are its
                target, tag_open = self._intervals.setdefault(f"{uuid}:{text.lower()}", []), True
                continue
            if m is None:
                raise ValueError(f"bad GTID interval or tag {text!r} in {member!r}")
            lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
            if not 0 < lo <= hi <= MAX_GNO:
                raise ValueError(f"bad GTID interval {text!r} in {member!r}")
            if target is None:
                target = self._intervals.setdefault(uuid, [])
            _insert(target, lo, hi)
            tag_open = False
        if tag_open:
            raise ValueError(f"GTID tag without an interval in {member!r}")
        self._recount()


def encode_gtid_set(state: GtidState) -> bytes:
    """A MySQL GTID set as COM_BINLOG_DUMP_GTID carries it (MySQL's Gtid_set::encode).

    Untagged: n_sids (8), then per uuid: uuid (16), n_intervals (8), [start, end) pairs (8+8).
    With any tag (8.3+), the tagged format: the first 8 bytes hold the format (1) in their top
    and bottom byte and n_sids in between; each member's uuid is followed by its tag, as a
    serialization-library variable-length size and the tag's bytes (empty: untagged).
    """
    members = state.members()
    tagged = any(tag for _, tag, _ in members)
    n = len(members)
    out = [struct.pack("<Q", (1 << 56) | (n << 8) | 1 if tagged else n)]
    for uuid, tag, intervals in members:
        out.append(uuidlib.UUID(uuid).bytes)
        if tagged:
            out.append(varlen_uint(len(tag)) + tag.encode())
        out.append(struct.pack("<Q", len(intervals)))
        out.extend(struct.pack("<QQ", lo, hi + 1) for lo, hi in intervals)
    return b"".join(out)


def varlen_uint(n: int) -> bytes:
    """``n`` in the MySQL serialization library's variable-length form: the first byte's
    trailing one bits, plus one, count the bytes; 0xFF then 8 bytes for the largest."""
    size = max(1, -(-n.bit_length() // 7))
    if size > 8:
        return b"\xff" + struct.pack("<Q", n)
    return ((n << size) | ((1 << (size - 1)) - 1)).to_bytes(size, "little")


def _insert(intervals: list[list[int]], lo: int, hi: int) -> None:
    """Add [lo, hi] to sorted disjoint inclusive intervals, merging touching ones."""
    i = bisect.bisect_left(intervals, [lo, lo])
    if i > 0 and intervals[i - 1][1] >= lo - 1:      # overlaps or touches the previous one
        i -= 1
        lo = intervals[i][0]
    j = i
    while j < len(intervals) and intervals[j][0] <= hi + 1:
        hi = max(hi, intervals[j][1])
        j += 1
    intervals[i:j] = [[lo, hi]]


def _interval_text(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"
