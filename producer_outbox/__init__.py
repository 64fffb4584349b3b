"""Everything that publishes: binlog tailer, outbox writer and relay, Kafka publisher, checkpoints."""
