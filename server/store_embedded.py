"""The embedded store: an in-process fakeredis server, so one command starts a working product.

fakeredis is not safe for concurrent use from several threads, so every call here runs on the event-loop
thread (workers hand their store requests to the loop). Commands are handed to fakeredis as argv lists,
never re-encoded as RESP, and replies come back as Python values that the connection encodes for its
client's protocol. Blocking commands (BLPOP, XREAD BLOCK) use fakeredis's asyncio socket, which parks the
command in a task and queues later commands of the same client behind it, so a blocked client never
blocks the loop or other clients.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import redis
from fakeredis import FakeServer
from fakeredis._helpers import SimpleError, SimpleString
from fakeredis._socket._async import AsyncFakeSocket

from backends import errors as msgs
from backends.errors import AIError
from server.resp_reply import NULL_ARRAY, Push, Status, encode
from server.slots import PUBSUB_COMMANDS, LinksByDatabase, ReplySlot, SessionSink

_MESSAGE_KINDS = frozenset({b"message", b"pmessage", b"smessage"})
# Commands whose "nothing" reply is a null array (*-1), where fakeredis gives a plain None.
_NULL_ARRAY_COMMANDS = frozenset(
    {b"blpop", b"brpop", b"bzpopmin", b"bzpopmax", b"blmpop", b"bzmpop", b"lmpop", b"zmpop", b"xread",
     b"xreadgroup", b"exec"}
)


def decode_fake_value(value: Any) -> Any:
    """fakeredis reply values → ours, keeping simple strings and exact error texts."""
    if isinstance(value, list):
        return [decode_fake_value(item) for item in value]
    if isinstance(value, SimpleString):
        return Status(value.value.decode())
    if isinstance(value, SimpleError):
        return AIError(value.value)
    if isinstance(value, dict):
        return {decode_fake_value(k): decode_fake_value(v) for k, v in value.items()}
    return value


class RelaySocket(AsyncFakeSocket):
    """A fakeredis client socket whose replies go to a callback instead of a queue."""

    def __init__(self, server: FakeServer, db: int, on_value: Any) -> None:
        self._on_value = on_value
        self._argv_backlog: deque[list[bytes]] = deque()
        self._closing = False
        super().__init__(server, db, None, redis.asyncio.Redis)

    def put_response(self, msg: Any) -> None:
        if self.responses is not None and not self._closing:
            self._on_value(msg)

    def close_when_unblocked(self) -> None:
        """Close now, or — when a blocking command of this client is parked in fakeredis's task — unblock it
        first and close once that task has finished (closing under it would crash the task and leave its
        wake-up callback on the database for ever)."""
        if not self._blocked:
            self.close()
            return
        self._closing = True
        self._argv_backlog.clear()
        with self._server.lock:
            self._unblock_reason = b"timeout"
            self._db.wake_all()

    def _decode_result(self, result: Any) -> Any:
        return decode_fake_value(result)

    def run_argv(self, argv: list[bytes]) -> None:
        """Run one command (queued behind a blocked one, as Redis queues a blocked client's pipeline)."""
        if self._paused or self._argv_backlog:
            self._argv_backlog.append(argv)
            return
        self._process_safely(argv)

    def resume(self) -> None:
        self._paused = False
        if self._closing:
            self.close()
            return
        while self._argv_backlog and not self._paused:
            self._process_safely(self._argv_backlog.popleft())

    def _process_safely(self, argv: list[bytes]) -> None:
        try:
            self._process_command(argv)
        except Exception as exc:  # a fakeredis bug must not take the connection down
            self.put_response(AIError(msgs.INTERNAL_MSG.format(detail=f"{type(exc).__name__}: {exc}")))


class EmbeddedSession:
    """A client connection's own fakeredis socket: MULTI, WATCH, SELECT, SUBSCRIBE and blocking just work."""

    def __init__(self, server: FakeServer, sink: SessionSink, proto: int = 2) -> None:
        self._sink = sink
        self._proto = proto
        self._sending: ReplySlot | None = None
        self._sending_name = b""
        self._sending_pubsub = False
        self._waiting: deque[tuple[ReplySlot, bytes]] = deque()
        self._socket = RelaySocket(server, 0, self._on_value)

    def send(self, argv: list[bytes], slot: ReplySlot) -> None:
        name = argv[0].lower()
        if self._socket._paused or self._waiting:
            self._waiting.append((slot, name))
            self._socket.run_argv(argv)
            return
        self._sending, self._sending_name, self._sending_pubsub = slot, name, name in PUBSUB_COMMANDS
        try:
            self._socket.run_argv(argv)
        finally:
            self._sending = None
        if self._socket._paused:
            self._waiting.append((slot, name))  # a blocking command: its reply comes from fakeredis's task
        elif not slot.done:
            slot.finish()

    def set_protocol(self, proto: int) -> None:
        self._proto = proto
        self._socket._client_info["resp"] = proto

    def _on_value(self, value: Any) -> None:
        slot = self._sending
        if slot is not None:
            if self._is_push(value, during_command=True):
                self._sink.push(encode(Push(value), self._proto))
            else:
                slot.chunks.append(self._encode_reply(value, self._sending_name))
            return
        if self._waiting and not self._is_push(value, during_command=False):
            waiting, name = self._waiting.popleft()
            waiting.fill(self._encode_reply(value, name))
            self._sink.flush()
            return
        self._sink.push(encode(Push(value) if isinstance(value, list) else value, self._proto))

    def _encode_reply(self, value: Any, command: bytes) -> bytes:
        if value is None and command in _NULL_ARRAY_COMMANDS:
            value = NULL_ARRAY
        return encode(value, self._proto)

    def _is_push(self, value: Any, during_command: bool) -> bool:
        if not isinstance(value, list) or not value or (not self._socket._pubsub and not self._sending_pubsub):
            return False
        kind = value[0]
        if kind in _MESSAGE_KINDS:
            return True
        return during_command and self._sending_pubsub and self._proto == 3

    def close(self) -> None:
        self._socket.close_when_unblocked()


class EmbeddedLink:
    """The keyspace's own fakeredis socket for one database: request → reply values, no RESP in between."""

    def __init__(self, server: FakeServer, db: int) -> None:
        self._server = server
        self._db = db
        self._replies: list[Any] = []
        self._socket: RelaySocket | None = None  # made on first use, inside the event loop

    async def pipeline(self, commands: list[list[bytes]]) -> list[Any]:
        if self._socket is None:
            self._socket = RelaySocket(self._server, self._db, self._replies.append)
        replies: list[Any] = []
        for argv in commands:
            self._socket.run_argv(argv)
            replies.append(self._replies.pop() if self._replies else None)
        return replies

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()


class EmbeddedStore:
    """The in-process store shared by every session and keyspace link of one server."""

    kind = "embedded"
    default_db = 0

    def __init__(self) -> None:
        self.server = FakeServer(version=(7, 2))
        self._links = LinksByDatabase(lambda db: EmbeddedLink(self.server, db))

    async def start(self) -> None:
        return None

    def open_session(self, sink: SessionSink) -> EmbeddedSession:
        return EmbeddedSession(self.server, sink)

    def link(self, db: int) -> EmbeddedLink:
        return self._links.get(db)

    async def close(self) -> None:
        self._links.close_all()

    def describe(self) -> str:
        return "embedded"

    async def info(self, sections: list[str]) -> str:
        """INFO sections of the store; the embedded store reports its keyspace only."""
        if "keyspace" not in sections:
            return ""
        lines = ["# Keyspace"]
        with self.server.lock:
            for index in sorted(self.server.dbs):
                db = self.server.dbs[index]
                db.time = time.time()
                keys = len(db)
                if keys:
                    expires = sum(1 for item in db._dict.values() if item.expireat is not None)
                    lines.append(f"db{index}:keys={keys},expires={expires},avg_ttl=0")
        return "\r\n".join(lines) + "\r\n"

