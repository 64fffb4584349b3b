"""The lag benchmark's load generator: open-loop single-row commits on many connections from
one process, each INSERT a raw COM_QUERY packet on a connection pymysql opened.

With pymysql's cursor every commit cost ~150 us of Python CPU in its writer process; at
5,000 commits/s twenty such processes took half of the 2-core host the pipeline is measured
on (issue 17, target 2). Here a commit is one ``send`` and one ``recv`` on a socket that an
epoll loop watches, so one process keeps many commits in flight for a few microseconds each.
The transactions MySQL sees, and writes to the binlog, are the same: one autocommit INSERT.
"""

from __future__ import annotations

import select
import time
from collections import deque

from cachesync.runtime.library_adapter import connection_socket

COM_QUERY = 0x03
OK, ERR = 0x00, 0xFF


class CommitError(RuntimeError):
    """The server answered a commit with an error packet (or something unexpected)."""


def query_packet(sql: bytes) -> bytes:
    """``sql`` as a COM_QUERY packet (sequence 0): the client's first packet of a command."""
    payload = bytes((COM_QUERY,)) + sql
    if len(payload) >= 0xFFFFFF:
        raise ValueError("statement too long for one packet")
    return len(payload).to_bytes(3, "little") + b"\x00" + payload


def replies(buf: bytes) -> tuple[list[bytes], bytes]:
    """The complete packets' payloads at the start of ``buf``, and the bytes left over."""
    out, pos = [], 0
    while len(buf) - pos >= 4:
        length = int.from_bytes(buf[pos:pos + 3], "little")
        if len(buf) - pos - 4 < length:
            break
        out.append(buf[pos + 4:pos + 4 + length])
        pos += 4 + length
    return out, buf[pos:]


def check_ok(payload: bytes) -> None:
    """Raises CommitError unless ``payload`` is an OK packet."""
    if payload[:1] == bytes((OK,)):
        return
    if payload[:1] == bytes((ERR,)) and len(payload) >= 3:
        code = int.from_bytes(payload[1:3], "little")
        message = payload[9:] if payload[3:4] == b"#" else payload[3:]
        raise CommitError(f"MySQL error {code}: {message.decode('utf-8', 'replace')}")
    raise CommitError(f"unexpected reply to an INSERT: {payload[:32]!r}")


class Committer:
    """Commits statements on pymysql connections in autocommit mode, many in flight at once.

    ``connections`` are opened and idle (pymysql wrote nothing it still waits for). The
    committer owns their sockets until ``close``; a connection carries one statement at a
    time, so ``len(connections)`` bounds the commits in flight.
    """

    def __init__(self, connections: list):
        self._conns = {connection_socket(c).fileno(): c for c in connections}
        self._idle = deque(self._conns)
        self._busy: dict[int, tuple[object, float]] = {}      # fd -> (token, sent at)
        self._buf: dict[int, bytes] = dict.fromkeys(self._conns, b"")
        self._poll = select.epoll()
        for fd in self._conns:
            self._poll.register(fd, select.EPOLLIN)

    @property
    def idle(self) -> int:
        return len(self._idle)

    @property
    def in_flight(self) -> int:
        return len(self._busy)

    def send(self, packet: bytes, token) -> None:
        """Send ``packet`` (``query_packet``) on an idle connection; ``token`` comes back
        from ``wait`` with its commit. Raises IndexError when none is idle."""
        fd = self._idle.popleft()
        connection_socket(self._conns[fd]).sendall(packet)
        self._busy[fd] = (token, time.perf_counter())

    def wait(self, timeout: float) -> list[tuple[object, float, float]]:
        """Commits answered within ``timeout`` s: (token, sent at, answered at), perf_counter
        times. Raises CommitError on an error reply, ConnectionError on a closed socket."""
        done = []
        for fd, _events in self._poll.poll(max(0.0, timeout)):
            chunk = connection_socket(self._conns[fd]).recv(65536)
            if not chunk:
                raise ConnectionError("MySQL closed a writer connection")
            now = time.perf_counter()
            packets, self._buf[fd] = replies(self._buf[fd] + chunk)
            if len(packets) > 1 or (packets and self._buf[fd]):
                raise CommitError(f"{len(packets)} replies to one statement")
            if packets:
                check_ok(packets[0])
                if fd not in self._busy:
                    raise CommitError("a reply on a connection that sent no statement")
                token, sent = self._busy.pop(fd)
                self._idle.append(fd)
                done.append((token, sent, now))
        return done

    def close(self) -> None:
        self._poll.close()
        for conn in self._conns.values():
            conn.close()
