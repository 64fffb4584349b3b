-- The transactional outbox. It lives in the APPLICATION's database, because the
-- application inserts into it in the same transaction as its business rows
-- (producer_outbox.outbox.emit). CREATE TABLE IF NOT EXISTS: running it twice is
-- harmless. The cachesync user needs only:
--   GRANT SELECT, UPDATE, DELETE ON app.cachesync_outbox TO cachesync@'%';
--
-- seq orders events per aggregate (insertion order); it is NOT a watermark: an
-- auto-increment value can commit after a higher one has been published, so the
-- relay selects by state (published_at IS NULL), never by "seq > last seen".
CREATE TABLE IF NOT EXISTS cachesync_outbox (
  seq             BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  event_id        CHAR(32)     CHARACTER SET ascii NOT NULL,
  aggregate_type  VARCHAR(64)  NOT NULL,
  aggregate_id    VARCHAR(191) NOT NULL,
  event_type      VARCHAR(64)  NOT NULL,
  payload         LONGTEXT     NULL,      -- JSON object text, validated by emit()
  cache_keys      TEXT         NULL,      -- JSON array of explicit Redis keys, or NULL
  created_at      DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
  published_at    DATETIME(6)  NULL,      -- set only after Kafka acknowledged the event
  attempts        INT UNSIGNED NOT NULL DEFAULT 0,
  next_attempt_at DATETIME(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),  -- claim lease end
  UNIQUE KEY by_event (event_id),
  -- pending rows in seq order, the lease checked in the index (the claim's scan)
  KEY by_pending (published_at, seq, next_attempt_at),
  -- the relay's "no earlier unpublished event of this aggregate is in flight" check
  KEY by_aggregate (aggregate_type, aggregate_id, published_at, seq)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
