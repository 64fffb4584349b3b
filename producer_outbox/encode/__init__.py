"""Decoded rows turned into what Kafka receives: key, record bytes, message id, one rows event's records, packing."""
