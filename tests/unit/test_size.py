"""Size (issue 12): trimmed images, invalidate-only events, permanent Kafka errors (pure)."""

import re

import pytest
from kafka.errors import (InvalidTopicError, KafkaTimeoutError, MessageSizeTooLargeError,
                          TopicAuthorizationFailedError)
from pymysqlreplication.row_event import WriteRowsEvent

from cachesync.consumer.core.plan import event_keys
from cachesync.consumer.core.writes import KIND_DELETE
from cachesync.producer_outbox.binlog.checkpoint import Checkpoint
from cachesync.runtime.mysql import MySQLParams
from cachesync.producer_outbox.decode.rows import (TxnContext, invalidate_only, key_columns,
                                            needed_columns, row_change)
from cachesync.runtime.config import TailerSettings
from cachesync.producer_outbox.tailer import Tailer, TailerOptions
from cachesync.schema.errors import FatalError, RetryableError
from cachesync.schema.event import decode, encode
from cachesync.schema.mapping import parse_mappings
from tests.support.binlog import (MARIADB, _Checkpoints, _Publisher, _Stream, mariadb_gtid,
                                         rows, with_table_maps, xid)

MAPPINGS = parse_mappings({
    "app.users": {"keys": ["user:{id}", "user:email:{email}"]},
    "app.docs": {"keys": ["doc:{id}"], "mode": "update", "value_columns": ["id", "title"],
                 "version_column": "v"},
    "app.all": {"keys": ["all:{id}"], "mode": "update"},
})
CTX = TxnContext("mariadb:1", "0-1-9", 9, 0.0)


def test_images_keep_what_the_mapping_reads():
    assert needed_columns(MAPPINGS.get("app", "users")) == {"id", "email"}
    assert needed_columns(MAPPINGS.get("app", "docs")) == {"id", "title", "v"}
    assert needed_columns(MAPPINGS.get("app", "all")) is None      # every column is written


def test_the_tailer_publishes_trimmed_images():
    event = rows(WriteRowsEvent, {"id": 1, "email": "a@x", "bio": "x" * 100})
    publisher = _Publisher()
    tailer = Tailer(MySQLParams("h", 1, "u", "p"), publisher, _Checkpoints(), MAPPINGS,
                    TailerOptions("t", TailerSettings(checkpoint_interval_s=0, pack_rows=1)))
    tailer.pipeline.run(tailer.binlog_source(_Stream(with_table_maps([mariadb_gtid(0, 1, 9), event, xid(1)])), MARIADB,
                 Checkpoint(MARIADB.identity, "0-1-8", "b.1", 4)))
    assert [e.after for _, e in publisher.sent] == [{"id": 1, "email": "a@x"}]


def test_an_oversized_row_goes_out_invalidate_only():
    event = rows(WriteRowsEvent, {"id": 1, "email": "a" * 2000})
    publisher = _Publisher()
    tailer = Tailer(MySQLParams("h", 1, "u", "p"), publisher, _Checkpoints(), MAPPINGS,
                    TailerOptions("t", TailerSettings(checkpoint_interval_s=0, pack_rows=1),
                                 max_record_bytes=1000))
    tailer.pipeline.run(tailer.binlog_source(_Stream(with_table_maps([mariadb_gtid(0, 1, 9), event, xid(1)])), MARIADB,
                 Checkpoint(MARIADB.identity, "0-1-8", "b.1", 4)))
    (_, sent), = publisher.sent
    assert sent.schema_version == 2 and sent.extra == {"invalidate_only": "over_record_limit"}
    assert tailer.oversized == 1


def test_update_mode_turns_an_invalidate_only_event_into_fenced_deletes():
    big = row_change(CTX, 0, "app", "docs", "update", "id", {"id": 1, "title": "a", "v": 1},
                     {"id": 1, "title": "b" * 10, "v": 2})
    small = decode(encode(invalidate_only(big, key_columns(MAPPINGS.get("app", "docs")),
                                          "over_record_limit")))
    assert small.after == {"id": 1, "v": 2}
    plan = event_keys(small, MAPPINGS)
    assert [(w.key, w.kind) for w in plan.writes] == [("doc:1", KIND_DELETE)]
    assert plan.oversized == 1


class _Failing(_Publisher):
    def __init__(self, sync=None, later=None):
        super().__init__()
        self.sync, self.later = sync, later

    def send(self, topic, key, value, msg_id, on_ack, on_error, partition=None, flush=None):
        if self.sync:
            raise self.sync
        on_error(self.later)


@pytest.mark.parametrize("publisher, expected", [
    (_Failing(sync=MessageSizeTooLargeError("too big")), FatalError),
    (_Failing(later=InvalidTopicError()), FatalError),
    (_Failing(later=TopicAuthorizationFailedError()), FatalError),
    (_Failing(sync=KafkaTimeoutError("buffer full")), RetryableError),
])
def test_permanent_kafka_errors_are_fatal_not_retried(publisher, expected):
    events = [mariadb_gtid(0, 1, 9), rows(WriteRowsEvent, {"id": 1, "email": "a"}), xid(1),
              mariadb_gtid(0, 1, 10), rows(WriteRowsEvent, {"id": 2, "email": "b"}), xid(2)]
    tailer = Tailer(MySQLParams("h", 1, "u", "p"), publisher, _Checkpoints(), MAPPINGS,
                    TailerOptions("t", TailerSettings(checkpoint_interval_s=0, pack_rows=1)))
    with pytest.raises(expected) as raised:
        tailer.pipeline.run(tailer.binlog_source(_Stream(with_table_maps(events)), MARIADB,
                     Checkpoint(MARIADB.identity, "0-1-8", "b.1", 4)))
    assert raised.type is expected


@pytest.mark.parametrize("env, message", [
    ({"CACHESYNC_TAILER_ON_LOST_POSITION": "ignore"},
     "CACHESYNC_TAILER_ON_LOST_POSITION: expected one of ['fail', 'resync'], got 'ignore'"),
    ({"CACHESYNC_TAILER_XA_BUFFER_ROWS": "0"},
     "CACHESYNC_TAILER_XA_BUFFER_ROWS: expected a number of at least 1, got 0"),
])
def test_issue_12_settings_are_validated(tmp_path, env, message):
    from cachesync.runtime.config import load
    from cachesync.schema.errors import ConfigError
    path = tmp_path / "c.yaml"
    path.write_text('tables: {shop.users: {keys: ["user:{id}"]}}\n')
    assert load(path, {"CACHESYNC_TAILER_ON_LOST_POSITION": "resync"}).tailer.on_lost_position == "resync"
    with pytest.raises(ConfigError, match=re.escape(message)):
        load(path, env)
