"""Publishing to Kafka: the pipeline, the publishers, and progress that moves only past what Kafka acknowledged."""
