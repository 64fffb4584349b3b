-- The MySQL dedup store's compact layout (consumer.dedup_mysql_layout: compact).
-- Created by the consumer at start, with its time windows filled in for {partitions}.
--
-- id: the message's commit time in milliseconds (6 bytes, big-endian), then 10 bytes of
-- the BLAKE2b hash of its message id. A re-published or re-delivered copy carries the
-- same commit time, so it finds its record by primary key; new records land at the
-- right edge of the index (the newest commit times), which stays in the buffer pool
-- however large the table grows. Partitions are time windows of that commit time: the
-- purge drops a window whole (one DDL, no row deletes, nothing in the binlog per row).
--
-- A record is done when its claim_token has a row in cachesync_dedup_compact_done; a
-- token starts with the time (ms) of the newest commit it claimed, so its done row sits
-- in a window no older than any of its records' and is dropped with them or later.
CREATE TABLE IF NOT EXISTS cachesync_dedup_compact (
  ns            VARBINARY(64) NOT NULL,
  id            BINARY(16)    NOT NULL,
  claim_token   BINARY(16)    NOT NULL,
  claimed_until DATETIME(6)   NOT NULL,
  PRIMARY KEY (ns, id)
) ENGINE=InnoDB
PARTITION BY RANGE COLUMNS (id) ({partitions});

CREATE TABLE IF NOT EXISTS cachesync_dedup_compact_done (
  ns          VARBINARY(64) NOT NULL,
  claim_token BINARY(16)    NOT NULL,
  PRIMARY KEY (ns, claim_token)
) ENGINE=InnoDB
PARTITION BY RANGE COLUMNS (claim_token) ({partitions});
