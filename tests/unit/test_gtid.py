"""cachesync.schema.gtid: parsing, merging and formatting GTIDs and GTID states of both flavors."""

import pytest

from cachesync.schema.gtid import MARIADB, MYSQL, Gtid, GtidState, parse_gtid
from tests.support.binlog import OTHER as U2, UUID as U1


@pytest.mark.parametrize("text, expected", [
    ("0-1-42", Gtid(MARIADB, "0", 42, 1)),
    (" 12-3000-7 ", Gtid(MARIADB, "12", 7, 3000)),
    (f"{U1}:23", Gtid(MYSQL, U1, 23)),
    (f"{U1.upper()}:1", Gtid(MYSQL, U1, 1)),          # MySQL prints upper case too
    (f"{U1}:Batch_1:5", Gtid(MYSQL, f"{U1}:batch_1", 5)),   # 8.3+ tag, lower-cased
])
def test_parse_gtid(text, expected):
    assert parse_gtid(text) == expected


@pytest.mark.parametrize("text", ["", "0-1", "a-b-c", f"{U1}", f"{U1}:0", f"{U1}:1-3",
                                  "not-a-uuid:5", f"{U1}:1tag:5", f"{U1}:a:b:5",
                                  f"{U1}:{'t' * 33}:5", f"{U1}:{1 << 63}"])
def test_parse_gtid_rejects(text):
    with pytest.raises(ValueError):
        parse_gtid(text)


@pytest.mark.parametrize("gtid", ["0-1-42", f"{U1}:23", f"{U1}:tag:23"])
def test_gtid_text_round_trips(gtid):
    assert str(parse_gtid(gtid)) == gtid


# stored state text -> canonical text
@pytest.mark.parametrize("text, canonical", [
    (None, ""),
    ("", ""),
    ("0-1-42", "0-1-42"),
    ("1-2-7,0-1-42", "0-1-42,1-2-7"),                          # sorted by domain
    (f"{U1}:1-5", f"{U1}:1-5"),
    (f"{U2}:1-3,{U1.upper()}:1-5", f"{U1}:1-5,{U2}:1-3"),      # lower case, sorted by uuid
    (f"{U1}:1-5,\n{U2}:1-3", f"{U1}:1-5,{U2}:1-3"),            # gtid_executed's line breaks
    (f"{U1}:7:1-5:6", f"{U1}:1-7"),                            # intervals merged
    (f"{U1}:1-2:4-5", f"{U1}:1-2:4-5"),                        # a gap stays a gap
    (f"{U1}:3-3", f"{U1}:3"),
    (f"{U1}:1-5,{U1}:4-9", f"{U1}:1-9"),                       # a uuid listed twice
    # tagged (MySQL 8.3+): per uuid its untagged intervals, then each tag's, as MySQL prints
    (f"{U1}:tag:1-3", f"{U1}:tag:1-3"),
    (f"{U1}:b:4:1-2:A:1-3:7,{U1}:1-5", f"{U1}:1-5:a:1-3:7:b:1-2:4"),
    (f"{U1}:t:1-3,{U1}:t:4", f"{U1}:t:1-4"),
])
def test_state_parse_and_format(text, canonical):
    assert str(GtidState.parse(text)) == canonical


@pytest.mark.parametrize("text", [f"{U1}", f"{U1}:5-3", f"{U1}:0-3", f"{U1}:x", "zz:1-3",
                                  f"{U1}:tag", f"{U1}:a:b:1-3", f"0-1-5,{U1}:1-3"])
def test_state_parse_rejects(text):
    with pytest.raises(ValueError):
        GtidState.parse(text)


# start state, GTIDs added in order -> state text after each
@pytest.mark.parametrize("start, added, after", [
    ("", [f"{U1}:1", f"{U1}:2", f"{U1}:3"], [f"{U1}:1", f"{U1}:1-2", f"{U1}:1-3"]),
    (f"{U1}:1-5", [f"{U1}:7", f"{U1}:6"], [f"{U1}:1-5:7", f"{U1}:1-7"]),
    (f"{U1}:1-5", [f"{U2}:1"], [f"{U1}:1-5,{U2}:1"]),
    (f"{U1}:1-5", [f"{U1}:3"], [f"{U1}:1-5"]),                 # already there: no change
    (f"{U1}:1-2:8-9", [f"{U1}:5", f"{U1}:4", f"{U1}:3", f"{U1}:6", f"{U1}:7"],
     [f"{U1}:1-2:5:8-9", f"{U1}:1-2:4-5:8-9", f"{U1}:1-5:8-9", f"{U1}:1-6:8-9", f"{U1}:1-9"]),
    ("", ["0-1-1", "0-1-2", "1-5-9"], ["0-1-1", "0-1-2", "0-1-2,1-5-9"]),
    ("0-1-42,1-2-7", ["0-3-43"], ["0-3-43,1-2-7"]),           # newest per domain replaces
])
def test_state_add(start, added, after):
    state = GtidState.parse(start)
    seen = []
    for gtid in added:
        state.add(parse_gtid(gtid))
        seen.append(str(state))
    assert seen == after


def test_state_refuses_to_mix_flavors():
    state = GtidState.parse("0-1-5")
    with pytest.raises(ValueError, match="cannot mix"):
        state.add(parse_gtid(f"{U1}:1"))


@pytest.mark.parametrize("a, b, union", [
    (f"{U1}:1-3", f"{U1}:4-6", f"{U1}:1-6"),
    (f"{U1}:1-3", f"{U2}:1", f"{U1}:1-3,{U2}:1"),
    (f"{U1}:1-3:10", f"{U1}:2-11", f"{U1}:1-11"),
    ("", f"{U1}:1-3", f"{U1}:1-3"),
    (f"{U1}:1-3", "", f"{U1}:1-3"),
    ("0-1-5,1-1-3", "0-2-4,1-1-9", "0-1-5,1-1-9"),            # per domain, higher seq wins
])
def test_state_union(a, b, union):
    left, right = GtidState.parse(a), GtidState.parse(b)
    assert str(left.union(right)) == union
    assert str(left) == str(GtidState.parse(a))                # inputs unchanged


@pytest.mark.parametrize("state, gtid, inside", [
    (f"{U1}:1-5:8", f"{U1}:5", True),
    (f"{U1}:1-5:8", f"{U1}:6", False),
    (f"{U1}:1-5:8", f"{U1}:8", True),
    (f"{U1}:1-5:8", f"{U2}:1", False),
    ("0-1-42", "0-1-41", True),
    ("0-1-42", "0-1-43", False),
    ("0-1-42", f"{U1}:1", False),
])
def test_state_contains(state, gtid, inside):
    assert (parse_gtid(gtid) in GtidState.parse(state)) is inside


def test_canonical_text_is_accepted_by_python_mysql_replication():
    """auto_position hands our checkpoint text to the library's GtidSet (MySQL dump)."""
    from pymysqlreplication.gtid import GtidSet
    text = str(GtidState.parse(f"{U2}:1-3,{U1}:7:1-5"))
    parsed = GtidSet(text)
    assert sorted(str(g) for g in parsed.gtids) == [f"{U1}:1-5:7", f"{U2}:1-3"]


@pytest.mark.parametrize("text, ordinal", [
    ("", 0),
    ("0-1-42", 42),                         # one domain: the seq_no itself
    ("0-1-42,1-2-7", 49),                   # several: their sum
    (f"{U1}:1-23", 23),                     # one uuid from 1: the gno itself
    (f"{U1}:1-23,{U2}:1-5", 28),            # several uuids: the transactions counted
    (f"{U1}:1-3:7-9", 6),
])
def test_state_ordinal(text, ordinal):
    assert GtidState.parse(text).ordinal == ordinal


@pytest.mark.parametrize("start, added", [
    ("0-1-41", ["0-1-42", "0-2-43", "0-2-44"]),          # MariaDB promotion: the domain goes on
    ("0-1-41,1-1-3", ["1-1-4", "0-2-42"]),
    (f"{U1}:1-41", [f"{U1}:42", f"{U2}:1", f"{U2}:2"]),  # MySQL promotion: a new uuid from 1
    (f"{U1}:1-41,{U2}:1-2", [f"{U1}:42", f"{U2}:3"]),
])
def test_state_ordinal_grows_by_at_least_one_per_transaction(start, added):
    state, seen = GtidState.parse(start), []
    for text in added:
        before = state.ordinal
        state.add(parse_gtid(text))
        assert state.ordinal > before, text
        seen.append(state.ordinal)
    assert GtidState.parse(str(state)).ordinal == seen[-1]    # what a restart resumes with


def test_state_ordinal_of_a_union_is_recounted():
    union = GtidState.parse(f"{U1}:1-5").union(GtidState.parse(f"{U1}:3-8,{U2}:1"))
    assert union.ordinal == 9


def test_tagged_transactions_count_in_the_ordinal():
    """Each tag numbers its transactions from 1: the ordinal counts every transaction of the
    set, so versions keep growing when a tagged transaction follows untagged ones."""
    state = GtidState.parse(f"{U1}:1-10")
    before = state.ordinal
    state.add(parse_gtid(f"{U1}:batch:1"))
    assert (before, state.ordinal) == (10, 11)
    assert GtidState.parse(str(state)).ordinal == 11


def test_gtid_set_encoding_untagged_and_tagged():
    """COM_BINLOG_DUMP_GTID's set: MySQL's Gtid_set::encode layout (rpl_gtid_set.cc)."""
    from cachesync.schema.gtid import encode_gtid_set
    import struct
    import uuid
    plain = encode_gtid_set(GtidState.parse(f"{U1}:1-5:7"))
    assert plain == (struct.pack("<Q", 1) + uuid.UUID(U1).bytes + struct.pack("<Q", 2)
                     + struct.pack("<QQQQ", 1, 6, 7, 8))
    tagged = encode_gtid_set(GtidState.parse(f"{U1}:1-5:ab:2"))
    assert tagged == (struct.pack("<Q", (1 << 56) | (2 << 8) | 1)
                      + uuid.UUID(U1).bytes + b"\x00" + struct.pack("<QQQ", 1, 1, 6)
                      + uuid.UUID(U1).bytes + b"\x04ab" + struct.pack("<QQQ", 1, 2, 3))
