"""server/frontend/bulk_reader.py against a real RequestParser: where reads land, and when the connection gets its
protocol back (the reader in a running server: tests/integration/test_big_arguments.py)."""

from __future__ import annotations

from backends.errors import ProtocolError
from server.frontend.bulk_reader import BulkReader
from server.protocol.request import Limits, RequestParser
from server.store.upstream import pack_command


class Connection:
    """What the reader calls on a client connection, recorded."""

    def __init__(self, limits: Limits | None = None) -> None:
        self.parser = RequestParser(limits or Limits())
        self.events: list[object] = []

    def end_in_place(self) -> None:
        self.events.append("end")

    def protocol_broken(self, exc: ProtocolError) -> None:
        self.events.append(exc)

    def data_received(self, data: bytes) -> None:
        self.events.append(data)

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.events.append("lost")

    def pause_writing(self) -> None:
        self.events.append("pause")

    def resume_writing(self) -> None:
        self.events.append("resume")


def _read(reader: BulkReader, data: bytes) -> None:
    """One read as the event loop does it: into get_buffer's buffer, reported, then the buffer released."""
    view = reader.get_buffer(-1)
    view[: len(data)] = data
    view.release()
    reader.buffer_updated(len(data))


def test_reads_land_in_the_argument_and_the_connection_gets_its_protocol_back_when_it_is_complete() -> None:
    payload = bytes(range(256)) * 400
    frame = pack_command([b"SET", b"k", payload])
    connection = Connection()
    reader = BulkReader(connection)
    head = frame.index(payload) + 100
    connection.parser.feed(frame[:head])
    assert connection.parser.next_command() is None
    rest = frame[head:-2]
    _read(reader, rest[:50_000])
    assert connection.events == []
    assert len(reader.get_buffer(-1)) == len(rest) - 50_000  # never more than the argument still needs
    _read(reader, rest[50_000:])
    assert connection.events == ["end"]
    connection.parser.feed(b"\r\n")
    assert connection.parser.next_command() == [b"SET", b"k", payload]


def test_bytes_read_with_no_argument_arriving_go_to_the_connection_as_a_plain_read() -> None:
    connection = Connection()
    reader = BulkReader(connection)
    _read(reader, b"*1\r\n$4\r\nPING\r\n")
    assert connection.events == ["end", b"*1\r\n$4\r\nPING\r\n"]


def test_an_argument_over_the_query_buffer_limit_breaks_the_protocol_and_hands_the_connection_back() -> None:
    connection = Connection(Limits(query_buffer_limit=100_000))
    reader = BulkReader(connection)
    connection.parser.feed(b"*2\r\n$3\r\nGET\r\n$200000\r\n" + bytes(1000))
    assert connection.parser.next_command() is None
    _read(reader, bytes(150_000))
    assert connection.events[0] == "end"
    assert isinstance(connection.events[1], ProtocolError)
    assert str(connection.events[1]) == "ERR Protocol error: query buffer limit exceeded"


def test_what_the_transport_tells_the_reader_reaches_the_connection() -> None:
    connection = Connection()
    reader = BulkReader(connection)
    reader.pause_writing()
    reader.resume_writing()
    reader.connection_lost(None)
    assert connection.events == ["pause", "resume", "lost"]
