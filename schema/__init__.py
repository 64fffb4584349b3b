"""The cachesync contract, imported by producer and consumer alike. Pure: no I/O imports."""

from schema.event import ENVELOPE_VERSION, ChangeEvent, Source, decode, encode
from schema.ids import binlog_message_id, binlog_version
from schema.keys import kafka_key, pk_text
from schema.mapping import KeyTemplate, MappingSet, TableMapping, parse_mappings

__all__ = [
    "ENVELOPE_VERSION", "ChangeEvent", "Source", "decode", "encode",
    "binlog_message_id", "binlog_version", "kafka_key", "pk_text",
    "KeyTemplate", "MappingSet", "TableMapping", "parse_mappings",
    "resource_text",
]


def resource_text(name: str) -> str:
    """Text of a packaged SQL or Lua file, e.g. ``resource_text("sql/cachesync.sql")``."""
    from importlib.resources import files
    return files("schema").joinpath(name).read_text(encoding="utf-8")
