"""One thin module per CLI command."""
