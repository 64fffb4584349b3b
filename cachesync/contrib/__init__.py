"""Integrations with application frameworks; each module imports its framework lazily, so
the sidecar never needs one installed."""
