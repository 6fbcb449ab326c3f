"""server/frontend/bulk_reader.py against a real RequestParser: where reads land, and when the connection gets its
protocol back (after reads that start no big argument, or when the protocol is broken; the reader in a running
server: tests/integration/test_big_arguments.py)."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from backends.errors import ProtocolError
from server.frontend.bulk_reader import HAND_BACK_AFTER, READ_SIZE, BulkReader
from server.protocol.request import BIG_BULK, Limits, RequestParser
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


def test_reads_land_in_the_argument_and_the_reader_stays_once_it_is_complete() -> None:
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
    assert connection.events == []
    connection.parser.feed(b"\r\n")
    assert connection.parser.next_command() == [b"SET", b"k", payload]


def test_with_no_argument_arriving_a_read_is_a_few_kib_so_the_next_one_announced_is_read_in_place() -> None:
    """The read that announces the next big argument holds its header and a few KiB of it (copied): the rest
    lands in place."""
    connection = Connection()
    reader = BulkReader(connection)
    assert READ_SIZE <= BIG_BULK // 16  # a few KiB: what of an argument comes with its announcement is copied
    assert len(reader.get_buffer(-1)) == READ_SIZE
    payload = bytes(range(256)) * 1000
    frame = pack_command([b"SET", b"k", payload])
    announcing = frame[:READ_SIZE]
    _read(reader, announcing)
    assert connection.events == [announcing]
    connection.parser.feed(announcing)  # (what the connection does with it)
    assert connection.parser.next_command() is None and connection.parser.big_arriving()
    assert len(reader.get_buffer(-1)) == len(frame) - READ_SIZE - 2


def test_bytes_read_with_no_argument_arriving_go_to_the_connection_as_a_plain_read() -> None:
    connection = Connection()
    reader = BulkReader(connection)
    _read(reader, b"*1\r\n$4\r\nPING\r\n")
    _read(reader, b"*1\r\n$4\r\nECHO\r\n")
    assert connection.events == [b"*1\r\n$4\r\nPING\r\n", b"*1\r\n$4\r\nECHO\r\n"]


def test_the_connection_gets_its_protocol_back_after_reads_in_a_row_that_start_no_big_argument() -> None:
    """A client that turns to small commands reads plainly again; one that keeps sending big arguments keeps
    the reader, however many small reads come between them."""
    connection = Connection()
    reader = BulkReader(connection)
    ping = b"*1\r\n$4\r\nPING\r\n"
    for _ in range(HAND_BACK_AFTER - 1):
        _read(reader, ping)
    big = pack_command([b"SET", b"k", bytes(BIG_BULK * 2)])

    def parsed(data: bytes) -> None:  # (as the connection does)
        connection.parser.feed(data)
        while connection.parser.next_command() is not None:
            pass

    connection.data_received = parsed  # type: ignore[method-assign]
    _read(reader, big[:1000])  # it starts a big argument: the count starts again
    _read(reader, big[1000:-2])  # in place
    _read(reader, b"\r\n" + ping)
    for _ in range(HAND_BACK_AFTER - 2):
        _read(reader, ping)
    assert "end" not in connection.events
    _read(reader, ping)
    assert connection.events[-1] == "end"
    assert reader._buffer is None  # its buffer let go with the protocol (made again if it is ever installed again)


def test_an_argument_over_the_query_buffer_limit_breaks_the_protocol_and_hands_the_connection_back() -> None:
    connection = Connection(Limits(query_buffer_limit=100_000))
    reader = BulkReader(connection)
    connection.parser.feed(b"*2\r\n$3\r\nGET\r\n$200000\r\n" + bytes(1000))
    assert connection.parser.next_command() is None
    _read(reader, bytes(150_000))
    assert connection.events[0] == "end"
    assert isinstance(connection.events[1], ProtocolError)
    assert str(connection.events[1]) == "ERR Protocol error: query buffer limit exceeded"
    assert not connection.parser.big_arriving() and connection.parser.big_free() is None  # let go at once


class _PyBuffer(ctypes.Structure):
    """CPython's ``Py_buffer``: what an event loop fills with ``PyObject_GetBuffer`` to read into a buffer."""

    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.py_object), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("suboffsets", ctypes.c_void_p), ("internal", ctypes.c_void_p)]


@contextmanager
def _held_as_the_loop_holds_it(view: memoryview) -> Iterator[None]:
    """An export of ``view`` itself for the block, as uvloop's while it calls ``buffer_updated``."""
    held = _PyBuffer()
    if ctypes.pythonapi.PyObject_GetBuffer(ctypes.py_object(view), ctypes.byref(held), 1) != 0:  # PyBUF_WRITABLE
        raise AssertionError("no buffer")
    try:
        yield
    finally:
        ctypes.pythonapi.PyBuffer_Release(ctypes.byref(held))


def test_an_argument_over_the_limit_while_the_loop_still_holds_the_read_buffer_is_let_go_all_the_same() -> None:
    """uvloop holds the buffer it read into until ``buffer_updated`` returns: the view cannot be released
    then, and the argument is dropped all the same."""
    connection = Connection(Limits(query_buffer_limit=100_000))
    reader = BulkReader(connection)
    connection.parser.feed(b"*2\r\n$3\r\nGET\r\n$200000\r\n" + bytes(1000))
    assert connection.parser.next_command() is None
    view = reader.get_buffer(-1)
    with _held_as_the_loop_holds_it(view):
        with pytest.raises(BufferError):
            view.release()  # (what the loop's hold means)
        reader.buffer_updated(150_000)
    assert isinstance(connection.events[-1], ProtocolError)
    assert connection.parser.big_free() is None and not connection.parser.big_arriving()
    view.release()  # (the loop lets go of it once its read has ended)


def test_what_the_transport_tells_the_reader_reaches_the_connection() -> None:
    connection = Connection()
    reader = BulkReader(connection)
    reader.pause_writing()
    reader.resume_writing()
    reader.connection_lost(None)
    assert connection.events == ["pause", "resume", "lost"]
