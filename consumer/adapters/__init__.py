"""Adapters: one per external system, plus in-memory twins for unit tests and dry runs."""
