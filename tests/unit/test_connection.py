"""The client connection over a fake transport and a fake store session: no sockets, no store process.

What is checked here is the connection's own logic — reply order across local and relayed commands,
pipelining, CLIENT REPLY, protocol errors, MULTI bookkeeping, backpressure — with a store whose replies the
test sends when it likes, so the order in which answers arrive can be chosen. The real servers are exercised
by tests/integration.
"""

from __future__ import annotations

import asyncio
from typing import Any

from server.ai.state import AIState
from server.commands.context import ServerContext
from server.commands.table import COMMAND_TABLE
from server.config import Config
from server.frontend.connection import ClientConnection
from server.protocol.slot import ReplySlot
from server.store.cache import TrackedCache
from server.store.cluster_link import ClusterLink, OneNode, RedisLink
from server.store.session import SessionSink
from server.store.upstream import StoreAddress


class FakeTransport(asyncio.Transport):
    """Collects what the connection writes; reports reads paused or resumed."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False
        self.reading = True

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def take(self) -> bytes:
        out, self.written = bytes(self.written), bytearray()
        return out

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 6379)}.get(name, default)


class FakeSession:
    """A client's store session that answers only when the test says so, oldest first."""

    def __init__(self, sink: SessionSink) -> None:
        self.sink = sink
        self.sent: list[list[bytes]] = []
        self.waiting: list[ReplySlot] = []

    def send(self, argv: list[bytes], slot: ReplySlot) -> None:
        self.sent.append(argv)
        self.waiting.append(slot)

    def answer(self, frame: bytes) -> None:
        self.waiting.pop(0).fill(frame)
        self.sink.flush()

    def set_protocol(self, proto: int) -> None:
        pass

    def subscribed(self) -> bool:
        return False

    def subscription_counts(self) -> tuple[int, int, int]:
        return 0, 0, 0

    def blocks_for_ever(self, slot: ReplySlot) -> bool:
        return False

    def close(self) -> None:
        pass


class FakeRelay:
    """A database's shared relay: many clients' stateless commands, answered oldest first."""

    def __init__(self) -> None:
        self.sent: list[list[bytes]] = []
        self.waiting: list[tuple[ReplySlot, SessionSink]] = []

    def send(self, argv: list[bytes], slot: ReplySlot, sink: SessionSink) -> None:
        self.sent.append(argv)
        self.waiting.append((slot, sink))

    def answer(self, frame: bytes) -> None:
        slot, sink = self.waiting.pop(0)
        slot.fill(frame)
        sink.flush()


class FakeStore:
    """Just what the connection asks of a store for relayed commands."""

    kind = "redis"
    default_db = 0

    def __init__(self) -> None:
        # a real, disabled one: compiled callers check its type
        self.cache = TrackedCache(lambda db: ClusterLink(OneNode(RedisLink(StoreAddress(), db))), 0)
        self.sessions: list[FakeSession] = []
        self.relay = FakeRelay()

    def shared_relay(self, db: int) -> FakeRelay:
        return self.relay

    def open_session(self, sink: SessionSink) -> FakeSession:
        self.sessions.append(FakeSession(sink))
        return self.sessions[-1]


def _connect(**settings: Any) -> tuple[ClientConnection, FakeTransport, FakeStore]:
    config = Config(**settings)
    store = FakeStore()
    ctx = ServerContext(config=config, store=store, commands=COMMAND_TABLE,  # type: ignore[arg-type]
                        ai=AIState.from_config(config))
    connection = ClientConnection(ctx)
    transport = FakeTransport()
    connection.connection_made(transport)
    return connection, transport, store


def _command(*words: bytes) -> bytes:
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(word), word) for word in words)


def test_a_local_reply_waits_for_the_relayed_reply_before_it() -> None:
    connection, transport, store = _connect()
    connection.data_received(_command(b"WATCH", b"a") + _command(b"SET", b"a", b"1") + _command(b"PING")
                             + _command(b"GET", b"a"))
    assert transport.take() == b""  # nothing answered yet: WATCH's reply has not come back
    session = store.sessions[0]
    assert session.sent == [[b"WATCH", b"a"], [b"SET", b"a", b"1"], [b"GET", b"a"]]  # one round trip
    session.answer(b"+OK\r\n")
    session.answer(b"+OK\r\n")
    assert transport.take() == b"+OK\r\n+OK\r\n+PONG\r\n"
    session.answer(b"$1\r\n1\r\n")
    assert transport.take() == b"$1\r\n1\r\n"
    assert connection.idle() and store.relay.sent == []


def test_stateless_commands_share_a_relay_until_the_client_needs_a_session() -> None:
    connection, transport, store = _connect()
    connection.data_received(_command(b"SET", b"a", b"1") + _command(b"GET", b"a") + _command(b"MULTI"))
    assert store.relay.sent == [[b"SET", b"a", b"1"], [b"GET", b"a"]] and store.sessions == []
    store.relay.answer(b"+OK\r\n")
    assert store.sessions == []  # MULTI waits: it goes over another connection than the GET still in flight
    store.relay.answer(b"$1\r\n1\r\n")
    assert store.sessions[0].sent == [[b"MULTI"]]
    store.sessions[0].answer(b"+OK\r\n")
    connection.data_received(_command(b"GET", b"a"))
    assert store.sessions[0].sent[-1] == [b"GET", b"a"]  # once a session is open, everything uses it
    assert transport.take() == b"+OK\r\n$1\r\n1\r\n+OK\r\n"


def test_inline_and_split_requests_are_parsed_across_reads() -> None:
    connection, transport, _ = _connect()
    frame = _command(b"ECHO", b"hello")
    connection.data_received(frame[:7])
    connection.data_received(frame[7:] + b"PING\r\n")
    assert transport.take() == b"$5\r\nhello\r\n+PONG\r\n"


def test_client_reply_off_runs_commands_without_replies() -> None:
    connection, transport, _ = _connect()
    connection.data_received(_command(b"CLIENT", b"REPLY", b"OFF") + _command(b"CLIENT", b"SETNAME", b"quiet"))
    connection.data_received(_command(b"CLIENT", b"REPLY", b"ON") + _command(b"CLIENT", b"GETNAME"))
    assert transport.take() == b"+OK\r\n$5\r\nquiet\r\n"


def test_client_reply_skip_is_ignored_while_replies_are_off_and_reset_follows_redis() -> None:
    connection, transport, _ = _connect()
    connection.data_received(_command(b"CLIENT", b"REPLY", b"OFF") + _command(b"CLIENT", b"REPLY", b"SKIP")
                             + _command(b"PING") + _command(b"PING"))
    assert transport.take() == b""  # still off after the SKIP
    connection.data_received(_command(b"RESET") + _command(b"CLIENT", b"REPLY", b"SKIP") + _command(b"RESET")
                             + _command(b"PING"))
    assert transport.take() == b"+RESET\r\n+PONG\r\n"  # RESET clears OFF and answers; a skipped RESET does not


def test_a_protocol_error_is_answered_after_earlier_replies_then_the_connection_closes() -> None:
    connection, transport, _ = _connect()
    connection.data_received(_command(b"PING") + b"*1\r\n$x\r\n" + _command(b"PING"))
    assert transport.take() == b"+PONG\r\n-ERR Protocol error: invalid bulk length\r\n"
    assert transport.closed


def test_wrong_arity_and_unknown_subcommands_cost_one_error_reply() -> None:
    connection, transport, _ = _connect()
    connection.data_received(_command(b"echo") + _command(b"PING"))
    assert transport.take() == b"-ERR wrong number of arguments for 'echo' command\r\n+PONG\r\n"
    assert not transport.closed


def test_an_ai_command_inside_multi_is_answered_at_exec() -> None:
    connection, transport, store = _connect()
    connection.data_received(_command(b"MULTI") + _command(b"AI.MODELEXECUTE", b"m", b"INPUTS", b"1", b"x",
                                                           b"OUTPUTS", b"1", b"y"))
    session = store.sessions[0]
    assert session.sent == [[b"MULTI"]]  # an AI command starts only once earlier relayed replies are in
    session.answer(b"+OK\r\n")
    assert session.sent[1][0] == b"ECHO"  # our stand-in, queued by the store in the transaction
    session.answer(b"+QUEUED\r\n")
    connection.data_received(_command(b"EXEC"))
    token = session.sent[1][1]
    session.answer(b"*1\r\n$%d\r\n%s\r\n" % (len(token), token))
    assert transport.take() == (b"+OK\r\n+QUEUED\r\n*1\r\n"
                                b"-ERR Cannot run RedisAI command within a transaction or a LUA script\r\n")
    assert not connection.state.in_multi


def test_a_select_queued_in_multi_applies_only_when_exec_ran() -> None:
    connection, transport, store = _connect()
    connection.data_received(_command(b"MULTI") + _command(b"SELECT", b"3") + _command(b"EXEC"))
    session = store.sessions[0]
    for frame in (b"+OK\r\n", b"+QUEUED\r\n"):
        session.answer(frame)
    assert connection.state.db == 0
    session.answer(b"*1\r\n+OK\r\n")
    assert connection.state.db == 3
    assert transport.take() == b"+OK\r\n+QUEUED\r\n*1\r\n+OK\r\n"


def test_a_full_backlog_pauses_reading_until_it_drains() -> None:
    connection, transport, store = _connect()
    connection.data_received(_command(b"SET", b"k", b"v") + _command(b"RESET") + _command(b"PING") * 1100)
    assert not transport.reading  # RESET waits for SET's reply, and everything after it waits for RESET
    assert transport.take() == b""
    store.relay.answer(b"+OK\r\n")
    assert transport.take() == b"+OK\r\n+RESET\r\n" + b"+PONG\r\n" * 1100
    assert transport.reading


def test_auth_gates_everything_but_the_no_auth_commands() -> None:
    connection, transport, _ = _connect(requirepass="secret")
    connection.data_received(_command(b"PING") + _command(b"AUTH", b"wrong") + _command(b"AUTH", b"secret")
                             + _command(b"PING"))
    replies = transport.take()
    assert replies.startswith(b"-NOAUTH Authentication required.\r\n-WRONGPASS")
    assert replies.endswith(b"+OK\r\n+PONG\r\n")
