"""What the engines and the application share at run time: settings, logs, start-up, Kafka login, metrics, MySQL sessions (imports no application module)."""
