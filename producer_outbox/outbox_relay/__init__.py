"""The outbox relay: committed outbox rows published to Kafka."""
