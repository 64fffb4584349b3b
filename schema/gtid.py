"""GTIDs and GTID states of both server flavors, pure: parse, merge, format.

* MariaDB: a transaction is ``domain-server-seq`` (``0-1-42``); the replication state
  is the last GTID per domain (``0-1-42,1-2-7``), which is what ``auto_position``
  (``@slave_connect_state``) takes.
* MySQL: a transaction is ``uuid:gno``; the state is a GTID *set* of inclusive
  intervals per server uuid (``uuid:1-5:7,uuid2:1-3``), what ``gtid_executed``
  prints and what ``auto_position`` (COM_BINLOG_DUMP_GTID) takes.

The tailer keeps one ``GtidState`` per stream, adds each transaction's GTID as it
starts and stores ``str(state)`` in its checkpoint when the transaction is acked.
The text forms are canonical (sorted, lower case, merged intervals) so that equal
states always produce equal checkpoints.

``ordinal`` numbers the state in the stream's history, and update-mode versions are built
from it (schema.ids.binlog_version). It must keep growing across a failover, whichever
server is read:

* MariaDB: the sum of every domain's last seq_no. A promoted replica continues each
  domain's numbering, and a transaction raises one domain's seq_no (strict GTID mode), so
  the sum grows by at least one per transaction. With one domain it is the seq_no itself.
* MySQL: the number of transactions in the set. A new primary numbers its own transactions
  under its own uuid from 1, so a gno alone would go backwards; the count grows by one per
  transaction whichever uuid wrote it. With one uuid numbered from 1 it is the gno itself.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

_MARIADB_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_INTERVAL = re.compile(r"^(\d+)(?:-(\d+))?$")
# MySQL gno values are 1 .. 2**63 - 1 (rpl_gno.h: GNO_END).
MAX_GNO = (1 << 63) - 1

MARIADB, MYSQL = "mariadb", "mysql"


@dataclass(frozen=True)
class Gtid:
    """One transaction's GTID."""

    flavor: str        # "mariadb" | "mysql"
    source: str        # MariaDB domain id (as text) or MySQL server uuid
    ordinal: int       # MariaDB seq_no or MySQL gno: grows with commit order per source
    server_id: int = 0  # MariaDB only: the originating server

    def __str__(self) -> str:
        if self.flavor == MARIADB:
            return f"{self.source}-{self.server_id}-{self.ordinal}"
        return f"{self.source}:{self.ordinal}"


def parse_gtid(text: str) -> Gtid:
    """``0-1-42`` or ``UUID:23`` -> Gtid; raises ValueError naming the text."""
    text = text.strip()
    m = _MARIADB_GTID.match(text)
    if m:
        return Gtid(MARIADB, str(int(m.group(1))), int(m.group(3)), int(m.group(2)))
    uuid, sep, gno = text.rpartition(":")
    if sep and _is_uuid(uuid) and gno.isdigit() and 0 < int(gno) <= MAX_GNO:
        return Gtid(MYSQL, uuid.lower(), int(gno))
    raise ValueError(f"not a GTID (expected domain-server-seq or uuid:number): {text!r}")


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
        return ",".join(uuid + "".join(f":{_interval_text(lo, hi)}" for lo, hi in ivs)
                        for uuid, ivs in sorted(self._intervals.items()) if ivs)

    def __repr__(self) -> str:
        return f"GtidState({str(self)!r})"

    def _set_flavor(self, flavor: str) -> None:
        if self.flavor is None:
            self.flavor = flavor
        elif self.flavor != flavor:
            raise ValueError(f"cannot mix a {flavor} GTID into a {self.flavor} GTID state")

    def _add_mysql_member(self, member: str) -> None:
        """``uuid:1-5:7`` (one uuid with its intervals) into the set."""
        uuid, *intervals = member.split(":")
        if not _is_uuid(uuid.strip()) or not intervals:
            raise ValueError(f"not a GTID set member (expected uuid:interval[:interval...]): "
                             f"{member!r}")
        self._set_flavor(MYSQL)
        target = self._intervals.setdefault(uuid.strip().lower(), [])
        for text in intervals:
            m = _INTERVAL.match(text.strip())
            if not m:
                # MySQL 8.3+ tags (uuid:tag:1-3) land here; python-mysql-replication's
                # GtidSet cannot encode them for auto_position either.
                raise ValueError(f"bad GTID interval {text!r} in {member!r} "
                                 "(tagged GTIDs are not supported)")
            lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
            if not 0 < lo <= hi <= MAX_GNO:
                raise ValueError(f"bad GTID interval {text!r} in {member!r}")
            _insert(target, lo, hi)
        self._recount()


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
