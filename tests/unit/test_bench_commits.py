"""The lag benchmark's raw commit protocol (bench.commits): packets built and read exactly."""

from __future__ import annotations

import pytest

from bench.commits import CommitError, check_ok, query_packet, replies


def test_query_packet_is_a_com_query_with_sequence_zero():
    packet = query_packet(b"INSERT INTO t VALUES (1)")
    assert packet[:3] == (len(b"INSERT INTO t VALUES (1)") + 1).to_bytes(3, "little")
    assert packet[3] == 0 and packet[4] == 0x03
    assert packet[5:] == b"INSERT INTO t VALUES (1)"


def test_query_packet_refuses_a_statement_longer_than_one_packet():
    with pytest.raises(ValueError, match="too long"):
        query_packet(b"x" * 0xFFFFFF)


def test_replies_returns_whole_packets_and_keeps_the_rest():
    ok = b"\x00\x01\x00\x02\x00\x00\x00"
    one = len(ok).to_bytes(3, "little") + b"\x01" + ok
    assert replies(one) == ([ok], b"")
    assert replies(one + one[:5]) == ([ok], one[:5])       # the second one not wholly read
    assert replies(one[:3]) == ([], one[:3])                # not even a header
    assert replies(one[:-1]) == ([], one[:-1])


def test_check_ok_accepts_ok_and_raises_the_servers_error():
    check_ok(b"\x00\x01\x00\x02\x00\x00\x00")
    err = b"\xff" + (1062).to_bytes(2, "little") + b"#23000" + b"Duplicate entry '1' for key 'PRIMARY'"
    with pytest.raises(CommitError, match="MySQL error 1062: Duplicate entry '1'"):
        check_ok(err)
    with pytest.raises(CommitError, match="unexpected reply"):
        check_ok(b"\x01\x02")        # a result set's column count: not what an INSERT answers
