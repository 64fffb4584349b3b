-- cachesync's own tables. They live in the state database (default `cachesync`),
-- the only place the cachesync user may write. Applied with CREATE TABLE IF NOT
-- EXISTS at start, so running it twice is harmless.

-- Idempotent receiver: one row per (consumer namespace, message id).
-- status=claimed + claimed_until is a lease; a crash between claim and done
-- leaves a claim that expires and the message is applied again.
-- A batch's ids are claimed together under one claim_token and confirmed together by
-- one row in cachesync_dedup_done: an id is done when its status is 'done' or its
-- claim_token has a cachesync_dedup_done row. While status='claimed', done_at holds
-- the claim's mark (cachesync_dedup_done.claimed_at), so the purge finds a claim's ids
-- through by_done.
CREATE TABLE IF NOT EXISTS cachesync_dedup (
  ns            VARCHAR(64)  NOT NULL,
  msg_id        VARCHAR(64)  CHARACTER SET ascii NOT NULL,
  status        ENUM('claimed','done') NOT NULL,
  claim_token   CHAR(32)     CHARACTER SET ascii NOT NULL,
  claimed_until DATETIME(6)  NOT NULL,
  done_at       DATETIME(6)  NULL,
  PRIMARY KEY (ns, msg_id),
  KEY by_done (ns, status, done_at)
) ENGINE=InnoDB;

-- Confirmed claims: one row marks every id still held under claim_token done, so a
-- batch's confirm writes one row instead of one per id.
CREATE TABLE IF NOT EXISTS cachesync_dedup_done (
  ns          VARCHAR(64)  NOT NULL,
  claim_token CHAR(32)     CHARACTER SET ascii NOT NULL,
  claimed_at  DATETIME(6)  NOT NULL,
  done_at     DATETIME(6)  NOT NULL,
  PRIMARY KEY (ns, claim_token),
  KEY by_done (ns, done_at)
) ENGINE=InnoDB;

-- Tailer checkpoints: advanced only past transactions Kafka fully acknowledged.
CREATE TABLE IF NOT EXISTS cachesync_checkpoint (
  name       VARCHAR(64)  NOT NULL PRIMARY KEY,
  server     VARCHAR(128) NOT NULL,
  gtid       TEXT         NULL,
  log_file   VARCHAR(255) NULL,
  log_pos    BIGINT UNSIGNED NULL,
  updated_at DATETIME(6)  NOT NULL
) ENGINE=InnoDB;

-- Heartbeat: `cachesync tail` rewrites its row every tailer.heartbeat_interval_s so
-- commit->apply lag stays measurable while the application is idle. The row flows
-- through the binlog and Kafka like any mapped row; its only key template names the
-- always-NULL column cache_key, so the consumer renders no key and never touches Redis.
-- beat_us (microseconds since the epoch) is exact where binlog timestamps are whole seconds.
CREATE TABLE IF NOT EXISTS cachesync_heartbeat (
  name      VARCHAR(64) NOT NULL PRIMARY KEY,
  beat_us   BIGINT      NOT NULL,
  cache_key VARCHAR(1)  NULL
) ENGINE=InnoDB;

-- The newest heartbeat each consumer namespace applied (read by `cachesync status`).
-- Not mapped, so its own binlog events are never published.
CREATE TABLE IF NOT EXISTS cachesync_lag (
  ns           VARCHAR(64) NOT NULL,
  source       VARCHAR(64) NOT NULL,
  committed_us BIGINT      NOT NULL,
  applied_us   BIGINT      NOT NULL,
  PRIMARY KEY (ns, source)
) ENGINE=InnoDB;

-- The active tailer of each tailer.name (any number may run; the others wait as standbys on
-- the MySQL named lock `cachesync:tailer:<name>`). Written by the tailer that takes the lock;
-- `cachesync status` shows it, with whether the lock is still held.
CREATE TABLE IF NOT EXISTS cachesync_tailer_lock (
  name   VARCHAR(64)  NOT NULL PRIMARY KEY,
  holder VARCHAR(255) NOT NULL,
  since  DATETIME(6)  NOT NULL
) ENGINE=InnoDB;
