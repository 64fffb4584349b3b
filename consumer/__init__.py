"""Everything that applies events to the cache: pure core, adapters, engines."""
