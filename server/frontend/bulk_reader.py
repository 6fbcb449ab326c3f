"""The reads of a big bulk argument, straight into the bytes object it becomes (server/protocol/big_bulk.py).

Once a client has sent a big argument (a tensor, a model), its transport's protocol is this reader for as
long as it keeps sending them. The event loop asks it for a buffer: while an argument is arriving it hands out
the rest of the argument's own bytes, so the kernel copies the client's bytes into place and nothing in our
process copies them again; otherwise a 4 KiB buffer of its own, whose bytes go to the client's
``ClientConnection`` as a plain read. Staying keeps the read that announces the next argument small: a plain
protocol's read is up to 256 KiB on uvloop, and what of the argument it holds is copied three times (the
read's ``bytes``, the parser's buffer, the argument) and once more as the argument grows to its full size. A
read through this reader costs more than a plain one (docs/bench-log.md), so after ``HAND_BACK_AFTER`` reads
in a row that start no big argument the connection gets its protocol back.

The connection switches to the reader at its first big argument (``ClientConnection._receive_in_place``);
everything else a transport tells its protocol is passed on to the connection.

    transport.set_protocol(BulkReader(connection))
"""

from __future__ import annotations

import asyncio
from typing import Final, Protocol

from backends.errors import ProtocolError
from server.protocol.request import RequestParser


class ReadsInPlace(Protocol):
    """What the reader needs of the client connection it reads for (``ClientConnection``)."""

    parser: RequestParser

    def end_in_place(self) -> None: ...

    def protocol_broken(self, exc: ProtocolError) -> None: ...

    def data_received(self, data: bytes) -> None: ...

    def eof_received(self) -> bool | None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...

    def pause_writing(self) -> None: ...

    def resume_writing(self) -> None: ...


READ_SIZE: Final = 4 * 1024  # a read with no argument arriving: a header and the copied first bytes of an argument
HAND_BACK_AFTER: Final = 8  # reads in a row into READ_SIZE that start no big argument


class BulkReader(asyncio.BufferedProtocol):
    """The protocol of a client's transport from its first big bulk on."""

    def __init__(self, connection: ReadsInPlace) -> None:
        self._connection = connection
        # the reader's own read buffer, made when first read into and let go when the connection gets its
        # protocol back (a connection idle after its big arguments holds none); each read is handed a view of
        # it of its own, so a loop that releases its view leaves this one whole
        self._buffer: memoryview | None = None
        self._into_buffer = False
        self._plain_reads = 0

    def get_buffer(self, sizehint: int) -> memoryview:
        view = self._connection.parser.big_free()
        if view is not None and len(view):
            self._into_buffer = False
            return view
        self._into_buffer = True
        if self._buffer is None:
            self._buffer = memoryview(bytearray(READ_SIZE))
        return self._buffer[:]

    def buffer_updated(self, nbytes: int) -> None:
        connection = self._connection
        if self._into_buffer:
            buffer = self._buffer
            assert buffer is not None  # (get_buffer made it)
            connection.data_received(bytes(buffer[:nbytes]))
            if connection.parser.big_arriving():
                self._plain_reads = 0
                return
            self._plain_reads += 1
            if self._plain_reads >= HAND_BACK_AFTER:
                self._hand_back()
            return
        try:
            connection.parser.big_received(nbytes)
        except ProtocolError as exc:
            self._hand_back()
            connection.protocol_broken(exc)

    def _hand_back(self) -> None:
        self._plain_reads = 0
        self._buffer = None  # (the event loop lets go of the view it holds when this read ends)
        self._connection.end_in_place()

    def eof_received(self) -> bool | None:
        return self._connection.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._connection.connection_lost(exc)

    def pause_writing(self) -> None:
        self._connection.pause_writing()

    def resume_writing(self) -> None:
        self._connection.resume_writing()
