"""The private names of python-mysql-replication and pymysql that cachesync needs, in one place.

Everything else in the tree goes through the functions and classes here; a unit test
(tests/unit/test_library_adapter.py) fails when a private library name appears anywhere
else, and tests/integration/test_library_versions.py reads real binlogs with the lowest and
the highest versions the pins in pyproject.toml allow. When a pin moves, this is the module
to read against the new version's source.

pymysql (no public raw-packet or socket API):

=====================================  =======================================================
name                                   why; the public alternative that is missing
=====================================  =======================================================
``Connection._read_packet``            python-mysql-replication reads every dump packet
                                       through it: overriding it is the only way to frame the
                                       stream ourselves (checksums, compressed events, whole
                                       socket chunks). No packet hook exists.
``Connection._write_bytes``            every command's bytes pass here: the dump command is
                                       seen (and its GTID set rewritten) here. No hook either.
``Connection._rfile``                  the buffered socket file pymysql reads from: the dump
                                       reader reads whole chunks of it. No public reader.
``Connection._sock``                   the socket, to wait for bytes (``select``) before a
                                       read; the commit benchmark writes on it. None public.
``Connection._force_close``            closes the socket after a framing error, as pymysql
                                       does itself; ``close()`` would send COM_QUIT first.
``Connection._create_ssl_ctx``         builds the TLS context of each connection: one shared
                                       context for the PREFERRED mode (mysql.py). No option.
``MysqlPacket._data``/``_position``    a packet's bytes and read offset: the generated row
                                       decoders read the bytes themselves.
``pymysql._auth``,                     caching_sha2_password's client side, tested with a
``_auth._have_cryptography``,          scripted server (tests/unit/test_mysql_auth.py) that
``Connection._secure``                 stands for the connection it reads and writes.
=====================================  =======================================================

python-mysql-replication (``BinLogStreamReader`` keeps its state in name-mangled attributes):

==========================================  ==================================================
name                                        why; the public alternative that is missing
==========================================  ==================================================
``_stream_connection``,                     the dump connection, and whether it is connected:
``_BinLogStreamReader__connected_stream``   the fast reader reads its buffer. Not exposed.
``_BinLogStreamReader__use_checksum``       whether events end in a CRC32 (bodies are cut
                                            before it). Not exposed.
``_BinLogStreamReader__post_header_lengths``  the post-header sizes the server declared (rows
                                            events are parsed only when ours match).
``_ctl_connection`` and the reader's other  what ``BinLogPacketWrapper`` takes to build one
``_BinLogStreamReader__*`` options          event as ``fetchone`` would (:func:`library_event`).
``RowsEvent._fetch_one_row``                one row; ``rows`` loops without a bound on a
                                            malformed event (libraryrows).
``_RowsEvent__rows``                        the event's cache of its rows: set so that a later
                                            ``event.rows`` returns them.
``_RowsEvent__read_date``/``_datetime2``/   replaced by readers that keep the server's text of
``_string``/``_time2``                      values Python cannot hold (keycolumns); no
                                            column-reader hook. ``_RowsEvent__read_fsp`` and
                                            ``_RowsEvent__add_fsp_to_time`` are used by them.
``RowsEvent._ignore_decode_errors``         the reader's ``ignore_decode_errors``, per event.
``_BinLogPacketWrapper__data_buffer``       bytes pushed back by ``unread``: the generated
                                            decoders read the packet only when it is empty.
==========================================  ==================================================
"""

from __future__ import annotations

import pymysql
from pymysql import _auth as pymysql_auth  # noqa: F401  (caching_sha2's client side, tests)
from pymysql.protocol import MysqlPacket

# python-mysql-replication is imported where it is used: applications that only write
# outbox events install pymysql alone (the ``outbox`` extra) and import the pymysql part
_READER = "_BinLogStreamReader__"


# -- pymysql ----------------------------------------------------------------------------

class PacketConnection(pymysql.connections.Connection):
    """A pymysql connection whose packet reads and command writes a subclass may take over:
    it overrides ``read_packet`` and ``write_bytes`` (calling ``pymysql_read_packet`` and
    ``pymysql_write_bytes`` for pymysql's own) and reads the socket with ``read_chunk``."""

    def _read_packet(self, packet_type=MysqlPacket):
        return self.read_packet(packet_type)

    def _write_bytes(self, data) -> None:
        self.write_bytes(data)

    def read_packet(self, packet_type=MysqlPacket):
        """The next packet (what python-mysql-replication calls for each one)."""
        return self.pymysql_read_packet(packet_type)

    def write_bytes(self, data) -> None:
        """Send one command's bytes."""
        self.pymysql_write_bytes(data)

    def pymysql_read_packet(self, packet_type=MysqlPacket):
        return pymysql.connections.Connection._read_packet(self, packet_type)

    def pymysql_write_bytes(self, data) -> None:
        pymysql.connections.Connection._write_bytes(self, data)

    def read_chunk(self, size: int) -> bytes:
        """Up to ``size`` bytes from the socket, at least one (b"": closed); raises OSError."""
        return self._rfile.read1(size)

    def raw_socket(self):
        """The connection's socket (None once closed)."""
        return self._sock

    def force_close(self) -> None:
        """Close the socket without a COM_QUIT (the stream is unusable)."""
        self._force_close()


class TlsContextConnection(pymysql.connections.Connection):
    """A pymysql connection whose TLS context a subclass may provide (``ssl_context``)."""

    def _create_ssl_ctx(self, sslp):
        return self.ssl_context(sslp)

    def ssl_context(self, sslp):
        """The SSLContext for pymysql's ``ssl`` options ``sslp``, built as pymysql builds it."""
        return pymysql.connections.Connection._create_ssl_ctx(self, sslp)


class AuthPeer:
    """The connection side pymysql's authentication code (``pymysql_auth``) talks to, for a
    scripted server: a subclass defines ``write_packet`` (as pymysql names it) and
    ``reply()``, the next packet from the server; the connection is not TLS."""

    _secure = False

    def _read_packet(self, packet_type=MysqlPacket):
        return self.reply()


def pymysql_has_cryptography() -> bool:
    """Whether pymysql found ``cryptography`` (RSA for caching_sha2_password on plain text)."""
    return pymysql_auth._have_cryptography


def connection_socket(conn):
    """A pymysql connection's socket."""
    return conn._sock


def packet_bytes(packet) -> bytes:
    """The whole payload of a pymysql ``MysqlPacket``."""
    return packet._data


def packet_position(packet) -> int:
    """How far into its payload a ``MysqlPacket`` has been read."""
    return packet._position


def set_packet_bytes(packet, data: bytes) -> None:
    """Replace a ``MysqlPacket``'s payload (tests corrupting a packet)."""
    packet._data = data


def set_packet_position(packet, position: int) -> None:
    """Move a ``MysqlPacket``'s read offset (tests and benchmarks reading an event again)."""
    packet._position = position


# -- python-mysql-replication: the stream reader ----------------------------------------

def opened_connection(reader):
    """The reader's stream connection, connected or not (None before its first connect)."""
    return getattr(reader, "_stream_connection", None)


def stream_connection(reader):
    """The reader's stream connection while it is connected, else None."""
    return reader._stream_connection if reader._BinLogStreamReader__connected_stream else None


def uses_checksum(reader) -> bool:
    """Whether the events of the reader's stream end in a CRC32."""
    return reader._BinLogStreamReader__use_checksum


def post_header_lengths(reader):
    """The post-header length of each event type as the server declared them (bytes or
    None before the format description)."""
    return reader._BinLogStreamReader__post_header_lengths


def library_event(reader, raw: bytes, kind, table_map: dict):
    """python-mysql-replication's event of packet payload ``raw`` (of class ``kind``),
    built with the reader's settings as its ``fetchone`` builds it."""
    from pymysqlreplication.packet import BinLogPacketWrapper
    r = _READER
    wrapper = BinLogPacketWrapper(
        MysqlPacket(raw, "utf8"), table_map, reader._ctl_connection, reader.mysql_version,
        getattr(reader, r + "use_checksum"), frozenset((kind,)), None, None, None, None,
        getattr(reader, r + "freeze_schema"), getattr(reader, r + "ignore_decode_errors"),
        getattr(reader, r + "verify_checksum"), getattr(reader, r + "optional_meta_data"),
        getattr(reader, r + "enable_logging"), getattr(reader, r + "use_column_name_cache"),
        getattr(reader, r + "post_header_lengths"))
    return wrapper.event


# -- python-mysql-replication: rows events ----------------------------------------------

def cached_rows(event) -> list | None:
    """The rows the event already decoded (``event.rows`` once read), else None."""
    return event.__dict__.get("_RowsEvent__rows")


def cache_rows(event, rows: list | None) -> None:
    """Make ``event.rows`` return ``rows`` (None: read from the packet again)."""
    event._RowsEvent__rows = rows


def fetch_one_row(event) -> dict:
    """The next row of the event's packet, as the library decodes it."""
    return event._fetch_one_row()


def ignores_decode_errors(event) -> bool:
    """The reader's ``ignore_decode_errors``, as the event holds it."""
    return event._ignore_decode_errors


def has_unread(wrapper) -> bool:
    """Whether a ``BinLogPacketWrapper`` holds bytes pushed back by ``unread``."""
    return bool(wrapper._BinLogPacketWrapper__data_buffer)


def read_fsp(event, column) -> int:
    """The fractional-seconds part of a temporal column, read from the event's packet."""
    return event._RowsEvent__read_fsp(column)


def add_fsp_to_time(event, value, column):
    """``value`` with the column's fractional seconds read from the event's packet."""
    return event._RowsEvent__add_fsp_to_time(value, column)


def replace_value_readers(read_date, read_datetime2, read_string, read_time2) -> None:
    """Install these as every RowsEvent's DATE, DATETIME2, string and TIME2 readers (each
    takes the event first, as a method). Idempotent."""
    from pymysqlreplication.row_event import RowsEvent
    RowsEvent._RowsEvent__read_date = read_date
    RowsEvent._RowsEvent__read_datetime2 = read_datetime2
    RowsEvent._RowsEvent__read_string = read_string
    RowsEvent._RowsEvent__read_time2 = read_time2


def bare_wrapper(packet: MysqlPacket, **fields):
    """A ``BinLogPacketWrapper`` around ``packet`` without its constructor (nothing read
    yet), with ``fields`` set: how tests and benchmarks build one event by hand."""
    from pymysqlreplication.packet import BinLogPacketWrapper
    wrapper = BinLogPacketWrapper.__new__(BinLogPacketWrapper)
    wrapper.__dict__.update(packet=packet, read_bytes=0, _BinLogPacketWrapper__data_buffer=b"",
                            **fields)
    return wrapper


def bare_rows_event(kind, wrapper, ignore_decode_errors: bool = False, **fields):
    """A rows event of class ``kind`` on ``wrapper`` without its constructor, its rows not
    read, without logging; ``fields`` are its public attributes."""
    event = kind.__new__(kind)
    event.__dict__.update(packet=wrapper, _ignore_decode_errors=ignore_decode_errors,
                          _ctl_connection=None,
                          _RowsEvent__rows=None, _RowsEvent__none_sources={},
                          _RowsEvent__use_column_name_cache=False,
                          _RowsEvent__enable_logging=False, **fields)
    return event
