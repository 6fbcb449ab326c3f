"""The reads of a big bulk argument, straight into the bytes object it becomes (server/protocol/big_bulk.py).

While a client's big argument (a tensor, a model) is arriving, its transport's protocol is this reader: the event
loop asks it for a buffer, and it hands out the rest of the argument's own bytes, so the kernel copies the
client's bytes into place and nothing in our process copies them again. When the argument is complete the
client's ``ClientConnection`` is the protocol again, and reads the CR LF and what follows as usual.

The connection switches (``ClientConnection._receive_in_place``); everything else a transport tells its protocol
is passed on to the connection.

    transport.set_protocol(BulkReader(connection))
"""

from __future__ import annotations

import asyncio
from typing import Protocol

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


class BulkReader(asyncio.BufferedProtocol):
    """The protocol of a client's transport while a big bulk of its request arrives."""

    def __init__(self, connection: ReadsInPlace) -> None:
        self._connection = connection
        self._spare: bytearray | None = None

    def get_buffer(self, sizehint: int) -> memoryview:
        view = self._connection.parser.big_free()
        if view is not None and len(view):
            return view
        self._spare = bytearray(64 * 1024)  # (never expected: the connection switches back once it is complete)
        return memoryview(self._spare)

    def buffer_updated(self, nbytes: int) -> None:
        connection = self._connection
        spare, self._spare = self._spare, None
        if spare is not None:
            connection.end_in_place()
            connection.data_received(bytes(spare[:nbytes]))
            return
        try:
            connection.parser.big_received(nbytes)
        except ProtocolError as exc:
            connection.end_in_place()
            connection.protocol_broken(exc)
            return
        if not connection.parser.big_arriving():
            connection.end_in_place()

    def eof_received(self) -> bool | None:
        return self._connection.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._connection.connection_lost(exc)

    def pause_writing(self) -> None:
        self._connection.pause_writing()

    def resume_writing(self) -> None:
        self._connection.resume_writing()
