"""Connections to a real Redis: the address from ``--redis-url``, the login, reply readers, and the base of
every kind of store connection.

``open_upstream`` connects, logs in (AUTH, SELECT) within a timeout and hands back a protocol object whose
replies go to a callback: raw frames (``FrameReader``, for relaying byte for byte) or decoded values
(``ValueReader``, hiredis, for the keyspace). ``UpstreamConnection`` is what the keyspace's link, the shared
relay and a client's session share: connecting on first use, the outbox of what waits for the connection,
failing what waits when it is lost, giving up on it (a watchdog's ``abort``), closing, and what a watchdog
reads (``oldest_pending``, ``waits_blocked``).
"""

from __future__ import annotations

import asyncio
import ssl
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, cast
from urllib.parse import parse_qs, unquote, urlsplit

import hiredis

from backends.errors import AIError
from server.protocol.framer import ReplyFramer
from server.protocol.reply import array_header, bulk_header
from server.store.deadline import within

_NEED_MORE: Final = object()


_BULK_AFTER_ONE: Final = tuple(b"\r\n$%d\r\n" % size for size in range(1024))  # the CRLF ending the previous one


def pack_command(argv: list[bytes]) -> bytes:
    """One command in RESP. A join: hiredis's packer measured slower for small arguments once the checks it
    needs are added, and ~25x slower for a 1 MiB one. Each header carries the CRLF that ends the argument
    before it: two parts an argument, not three (the join's per-part cost: ~30% of a checked write's pack)."""
    count = len(argv)
    parts = [array_header(count)]
    after_one = False
    for arg in argv:
        size = len(arg)
        if not after_one:
            parts.append(bulk_header(size))
        else:
            parts.append(_BULK_AFTER_ONE[size] if size < 1024 else b"\r\n$%d\r\n" % size)
        parts.append(arg)
        after_one = True
    if after_one:
        parts.append(b"\r\n")
    return b"".join(parts)


BIG_ARGUMENT: Final = 64 * 1024
"""An argument at least this big (a tensor) is written to the store as it is, not copied into a joined buffer."""


def has_big_argument(argv: list[bytes]) -> bool:
    for arg in argv:
        if len(arg) >= BIG_ARGUMENT:
            return True
    return False


def pack_vectored(argv: list[bytes]) -> list[bytes]:
    """``argv`` in RESP as buffers to write one after another: the small parts joined, each big argument
    left as its own buffer (a 602 KB tensor is not copied once more to be sent)."""
    out: list[bytes] = []
    small: list[bytes] = [array_header(len(argv))]
    for arg in argv:
        small.append(bulk_header(len(arg)))
        if len(arg) >= BIG_ARGUMENT:
            out.append(b"".join(small))
            out.append(arg)
            small = [b"\r\n"]
        else:
            small.append(arg)
            small.append(b"\r\n")
    out.append(b"".join(small))
    return out


def writes_buffers(transport: asyncio.BaseTransport) -> bool:
    """Whether ``transport`` writes a list of buffers as they are, with its flow control and its checks of a
    lost connection: uvloop's does (the default loop). asyncio's own joins them on Python 3.11; on 3.12 and
    3.13 its ``writelines`` did not pause the protocol, and went on writing after the connection was lost, in
    releases the review tried (3.12.1, 3.13.0). There a big argument or reply is joined and written with
    ``write``: one copy."""
    return type(transport).__module__ == "uvloop.loop"


def pack_parted(commands: list[list[bytes]], where: tuple[int, int],
                parts: tuple[bytes, bytes | memoryview]) -> list[bytes | memoryview]:
    """``commands`` in RESP as buffers to write one after another, the argument at ``where`` (its command's
    index, its own) sent as ``parts``, one after the other, as that one bulk (the placeholder there is not
    sent): a big tensor's header and data, never joined. The small parts around them are joined."""
    out: list[bytes | memoryview] = []
    small: list[bytes] = []
    for index, argv in enumerate(commands):
        small.append(array_header(len(argv)))
        for position, arg in enumerate(argv):
            if (index, position) == where:
                head, data = parts
                small.extend((bulk_header(len(head) + len(data)), head))
                out.append(b"".join(small))
                out.append(data)
                small = [b"\r\n"]
            else:
                small.extend((bulk_header(len(arg)), arg, b"\r\n"))
    if len(out) < 2:
        raise ValueError(f"no argument at {where} to send in parts")
    out.append(b"".join(small))
    return out


@dataclass(frozen=True, slots=True)
class StoreAddress:
    """Where the backing Redis is and how to log in; parsed from ``--redis-url``."""

    host: str = "127.0.0.1"
    port: int = 6379
    path: str = ""
    use_tls: bool = False
    username: str = ""
    password: str = ""
    db: int = 0

    def describe(self) -> str:
        return f"unix:{self.path}" if self.path else f"{'rediss' if self.use_tls else 'redis'}://{self.host}:{self.port}"

    def __hash__(self) -> int:
        """Written out (the dataclass keeps it) so that mypyc compiles it: a cluster's routing hashes a node's
        address for every write it groups (the generated one runs interpreted). Equal addresses have equal
        hosts, ports, paths and dbs."""
        return hash((self.host, self.port, self.path, self.db))


def parse_store_url(url: str) -> StoreAddress:
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    if parts.scheme == "unix":
        db_text = query.get("db", ["0"])[0]
    else:
        db_text = query.get("db", [""])[0] or parts.path.lstrip("/")
    db = int(db_text) if db_text else 0
    common = {"username": unquote(parts.username or ""), "password": unquote(parts.password or ""), "db": db}
    if parts.scheme == "unix":
        return StoreAddress(path=parts.path, **common)  # type: ignore[arg-type]
    return StoreAddress(host=parts.hostname or "127.0.0.1", port=parts.port or 6379, use_tls=parts.scheme == "rediss",
                        **common)  # type: ignore[arg-type]


class FrameReader:
    """Raw frames, for relaying."""

    def __init__(self) -> None:
        self._framer = ReplyFramer()

    def feed(self, data: bytes) -> None:
        self._framer.feed(data)

    def next(self) -> Any:
        frame = self._framer.next_frame()
        return _NEED_MORE if frame is None else frame


class ValueReader:
    """Decoded values (hiredis), for the keyspace; error replies become AIError values with their exact text."""

    def __init__(self) -> None:
        self._reader = hiredis.Reader(notEnoughData=_NEED_MORE, replyError=AIError)

    def feed(self, data: bytes) -> None:
        self._reader.feed(data)

    def next(self) -> Any:
        return self._reader.gets()


Hook = Callable[[Any], None]


class _Batch:
    """The commands of one call in flight: its future, the replies so far, and a hook per reply (or none).
    A plain class (one per call): mypyc compiles its ``__init__``, not a dataclass's."""

    __slots__ = ("expected", "future", "hooks", "replies")

    def __init__(self, future: asyncio.Future[list[Any]], expected: int, hooks: Sequence[Hook | None]) -> None:
        self.future = future
        self.expected = expected
        self.hooks = hooks
        self.replies: list[Any] = []


class PendingReplies:
    """The replies a pipelined connection still awaits, in order: one future per call, not one per command.

    ``hooks[i]`` of a call is run with its reply i the moment that reply is parsed, before anything behind it
    in the same read (the coherent cache fills itself there; server/store/cache.py)."""

    def __init__(self) -> None:
        self._batches: deque[_Batch] = deque()
        # the loop of the last call, while it runs: Python 3.11's get_running_loop() makes a getpid() syscall
        self._loop: asyncio.AbstractEventLoop | None = None

    def __bool__(self) -> bool:
        return bool(self._batches)

    def expect(self, count: int, hooks: Sequence[Hook | None] = ()) -> asyncio.Future[list[Any]]:
        loop = self._loop
        if loop is None or not loop.is_running():
            loop = self._loop = asyncio.get_running_loop()
        batch = _Batch(loop.create_future(), count, hooks)
        self._batches.append(batch)
        return batch.future

    def deliver(self, reply: Any) -> None:
        if not self._batches:
            return
        batch = self._batches[0]
        position = len(batch.replies)
        if position < len(batch.hooks) and (hook := batch.hooks[position]) is not None:
            hook(reply)
        batch.replies.append(reply)
        if len(batch.replies) == batch.expected:
            self._batches.popleft()
            if not batch.future.done():
                batch.future.set_result(batch.replies)

    def oldest(self) -> object | None:
        """The call waiting longest for its replies (None: none waits), for a watchdog to see it still waits."""
        return self._batches[0] if self._batches else None

    def fail_all(self, error: Exception) -> None:
        """Every call still waiting fails with ``error``; one the store had refused as a protocol error (a value
        over its proto-max-bulk-len: it answers that, then closes the connection) with that refusal."""
        while self._batches:
            batch = self._batches.popleft()
            if not batch.future.done():
                batch.future.set_exception(_protocol_error(batch.replies) or error)


def _protocol_error(replies: list[Any]) -> AIError | None:
    for reply in replies:
        if isinstance(reply, AIError) and reply.message.startswith("Protocol error"):
            return reply
    return None


class UpstreamProtocol(asyncio.Protocol):
    """One TCP/unix connection to the backing Redis; hands every reply (frame or value) to ``on_reply``."""

    def __init__(self, reader: FrameReader | ValueReader, on_reply: Callable[[Any], None],
                 on_batch_end: Callable[[], None], on_lost: Callable[[Exception | None], None]) -> None:
        self._reader = reader
        self.on_reply = on_reply
        self._on_batch_end = on_batch_end
        self._on_lost = on_lost
        self.transport: asyncio.Transport | None = None
        self.vectored = False  # its transport writes a list of buffers as they are (``writes_buffers``)
        self._garbled: Exception | None = None  # why the connection was dropped, when it was not RESP

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.vectored = writes_buffers(transport)

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        try:
            reply = self._reader.next()
        except (hiredis.ProtocolError, ValueError) as exc:
            self._not_resp(exc)
            return
        while reply is not _NEED_MORE:
            self.on_reply(reply)
            try:
                reply = self._reader.next()
            except (hiredis.ProtocolError, ValueError) as exc:
                self._not_resp(exc)
                return
        self._on_batch_end()

    def _not_resp(self, exc: Exception) -> None:
        """The peer does not speak RESP (an HTTP server at --redis-url): the connection is dropped, and its
        loss says so in one line, instead of asyncio's "Fatal error on transport" traceback."""
        self._garbled = ConnectionError(f"not a Redis server (its reply is not RESP: {exc})")
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._on_lost(exc if exc is not None else self._garbled)

    def write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def write_buffers(self, buffers: Sequence[bytes | memoryview]) -> None:
        """``buffers`` one after another: as they are where the transport can (``vectored``), else joined."""
        if self.transport is None:
            return
        if self.vectored:
            self.transport.writelines(buffers)
        else:
            self.transport.write(b"".join(buffers))

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def abandon(self) -> None:
        """Drop without telling the owner (it gave up on this connection and may have made a new one). Aborted,
        not closed: a close waits to send what is buffered, for ever when the store stopped reading."""
        self._on_lost = _ignore_loss
        if self.transport is not None:
            self.transport.abort()


def _ignore_loss(_exc: Exception | None) -> None:
    return None


CONNECT_TIMEOUT_S: Final = 10.0


async def open_upstream(address: StoreAddress, reader: FrameReader | ValueReader, db: int,
                        on_lost: Callable[[Exception | None], None]) -> UpstreamProtocol:
    """Connect, log in and select ``db`` within CONNECT_TIMEOUT_S; the returned protocol's ``on_reply`` is then
    the caller's to set, and ``on_lost`` is called if the connection drops later."""
    handshake: deque[asyncio.Future[Any]] = deque()

    def answer(reply: Any) -> None:
        if handshake:
            future = handshake.popleft()
            if not future.done():
                future.set_result(reply)

    def lost_during_handshake(exc: Exception | None) -> None:
        while handshake:
            future = handshake.popleft()
            if not future.done():
                future.set_exception(ConnectionError(f"connection lost during login: {exc}"))

    protocol = UpstreamProtocol(reader, answer, lambda: None, lost_during_handshake)
    try:
        await within(_connect_and_login(address, db, protocol, handshake), CONNECT_TIMEOUT_S)
    except BaseException as exc:
        protocol.close()
        if isinstance(exc, TimeoutError):
            raise ConnectionError(f"no answer from {address.describe()} within {CONNECT_TIMEOUT_S:g}s") from exc
        if isinstance(exc, OSError) and type(exc) is not ConnectionError:  # refused, unreachable …: say where
            raise ConnectionError(f"{address.describe()}: {exc}") from exc
        raise
    if protocol.transport is None:  # lost between the last login reply and now: nobody would be told
        raise ConnectionError(f"connection to {address.describe()} lost right after login")
    protocol._on_lost = on_lost
    return protocol


def lost_detail(exc: Exception | None, address: StoreAddress) -> str:
    """Why a store connection ended, naming the store (on a cluster: which node went away)."""
    where = address.describe()
    if exc is None:
        return f"connection to {where} closed"
    return str(exc) if where in str(exc) else f"{exc} ({where})"


class Watched(Protocol):
    """What a watchdog reads of a store connection (server/store/stall_watch.py, cluster_watch.py): every
    ``UpstreamConnection``, and the cache's tracking connections."""

    def oldest_pending(self) -> object | None: ...

    def waits_blocked(self) -> bool: ...

    def abort(self, detail: str) -> None: ...


class UpstreamConnection(ABC):
    """One connection to one store node, made on first use by a task of its own; what waits meanwhile is
    queued in ``_outbox`` and written once it is made.

    A subclass says how replies are read (``_new_reader``), where they go (``_attach``), what the command
    waiting longest is (``oldest_pending``) and how the waiting commands fail (``_fail_all``). A connection
    that could not be made, was lost or was given up on (``abort``) fails what waits (``_lost``); the next
    command connects anew."""

    def __init__(self, address: StoreAddress, db: int) -> None:
        self._address = address
        self._db = db
        self._upstream: UpstreamProtocol | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._cancelled: asyncio.Task[None] | None = None  # the connect ``close`` stopped, until it ends
        self._outbox: list[bytes | memoryview] = []
        self._vectored = False  # the outbox holds a big argument: written as it is, buffer by buffer

    @property
    def address(self) -> StoreAddress:
        return self._address

    @property
    def connected(self) -> bool:
        return self._upstream is not None

    def _new_reader(self) -> FrameReader | ValueReader:
        return FrameReader()

    @abstractmethod
    def _attach(self, upstream: UpstreamProtocol) -> None:
        """Route ``upstream``'s replies to this connection (set its ``on_reply`` and batch-end callbacks)."""

    @abstractmethod
    def oldest_pending(self) -> object | None:
        """The command (or call) waiting longest for its reply; None when none waits, or when it may rightly
        wait as long as it likes (a blocking command: ``waits_blocked``). The watchdogs look at it."""

    def waits_blocked(self) -> bool:
        """Whether the oldest command is a blocking one (its store is then probed instead)."""
        return False

    @abstractmethod
    def _fail_all(self, detail: str) -> None:
        """Every command waiting fails with the store-down error naming ``detail``; the outbox is dropped."""

    def _lost(self, detail: str) -> None:
        """The connection could not be kept (lost, or given up on): what waits fails."""
        self._fail_all(detail)

    def _start_connecting(self) -> None:
        if self._upstream is None and self._connecting is None:
            self._connecting = asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        try:
            upstream = await open_upstream(self._address, self._new_reader(), self._db, self._on_lost)
        except (OSError, ConnectionError) as exc:
            self._connecting = None  # first: the failure replies let clients send more, which must connect anew
            self._fail_all(str(exc))
            return
        self._connecting = None
        if not self._accepts(upstream):
            return
        self._attach(upstream)
        self._upstream = upstream
        self._flush()

    def _accepts(self, upstream: UpstreamProtocol) -> bool:
        """Whether a connection just made is taken into use (a session closed meanwhile closes it instead)."""
        return True

    def _queue(self, argv: list[bytes]) -> None:
        """``argv`` in RESP at the end of the outbox; a big argument (a tensor) as its own buffer, not copied
        into a joined one (``pack_vectored``)."""
        if has_big_argument(argv):
            self._outbox.extend(pack_vectored(argv))
            self._vectored = True
        else:
            self._outbox.append(pack_command(argv))

    def _flush(self) -> None:
        """Write the outbox in one write — only to a live connection: what is queued while it is being made
        stays queued for it. Joined, unless it holds a big argument: then its buffers as they are."""
        upstream = self._upstream
        if upstream is None or not self._outbox:
            return
        outbox, self._outbox = self._outbox, []
        vectored, self._vectored = self._vectored, False
        if vectored:
            upstream.write_buffers(outbox)
        else:
            upstream.write(b"".join(outbox))

    def _drop_outbox(self) -> None:
        """Forget what is queued (the connection failed: its commands are answered with the error)."""
        self._outbox = []
        self._vectored = False

    def _on_lost(self, exc: Exception | None) -> None:
        self._upstream = None
        self._lost(lost_detail(exc, self._address))

    def abort(self, detail: str) -> None:
        """Give up on the connection (its store stopped answering): what waits gets the error naming
        ``detail``, and the next command connects anew instead of queueing behind it."""
        upstream, self._upstream = self._upstream, None
        if upstream is not None:
            upstream.abandon()
        self._lost(detail)

    def close(self) -> None:
        """Close the connection (what still waits on it fails as it is lost), or stop making it."""
        if self._upstream is not None:
            self._upstream.close()
        if self._connecting is not None:
            self._connecting.cancel()
            self._cancelled, self._connecting = self._connecting, None
            self._fail_all(lost_detail(None, self._address))

    async def stopped(self) -> None:
        """Wait for the connect ``close`` stopped to end (none is left pending when the loop closes)."""
        if self._cancelled is not None:
            await asyncio.gather(self._cancelled, return_exceptions=True)


async def _connect_and_login(address: StoreAddress, db: int, protocol: UpstreamProtocol,
                             handshake: deque[asyncio.Future[Any]]) -> None:
    loop = asyncio.get_running_loop()
    if address.path:
        await loop.create_unix_connection(lambda: protocol, address.path)
    else:
        context = ssl.create_default_context() if address.use_tls else None
        await loop.create_connection(lambda: protocol, address.host, address.port, ssl=context)
    commands: list[list[bytes]] = []
    if address.password:
        user = [address.username.encode()] if address.username else []
        commands.append([b"AUTH", *user, address.password.encode()])
    if db:
        commands.append([b"SELECT", str(db).encode()])
    for argv in commands:
        future: asyncio.Future[Any] = loop.create_future()
        handshake.append(future)
        protocol.write(pack_command(argv))
        reply = await future
        if isinstance(reply, AIError) or (isinstance(reply, bytes) and reply.startswith(b"-")):
            said = reply.message if isinstance(reply, AIError) else reply[1:].decode(errors="replace").strip()
            raise ConnectionError(f"{argv[0].decode()} failed: {said}")  # the store's words, not a repr
