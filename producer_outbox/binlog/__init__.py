"""Reading the binlog: the server, the stream, its events and what they say, checkpoints and preflight."""
