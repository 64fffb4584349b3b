"""Changes the binlog carries no row events for: foreign-key cascades, ALTER TABLE, unlogged writes."""
