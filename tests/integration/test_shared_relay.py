"""The shared relay (server/store/relays.py ``SharedRelay``, over a ``NodeRelay`` per node): session-less
clients' stateless commands over one store connection per database. What must hold when that connection is lost or cannot be made, when a
write pause would hold everyone's reads behind one write, and when SELECT is refused."""

from __future__ import annotations

import asyncio

import redis

from server.config import Config
from server.protocol.slot import ReplySlot
from server.store.node_connections import NodeRelay
from server.store.upstream import parse_store_url
from tests.support import RawClient, redis_server_process, running_server, wait_until


def _pack(*words: bytes) -> bytes:
    return b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words)


def _replies(raw: RawClient, count: int) -> list[bytes]:
    """``count`` one-line replies (errors, statuses, nulls, short bulks) as they arrive."""
    data = b""
    while data.count(b"\r\n") < count:
        chunk = raw.read_until(b"\r\n", timeout=10)
        assert chunk, f"no reply after {data!r}"
        data += chunk
    return data.split(b"\r\n")[:count]


def test_commands_after_a_failed_connect_connect_again_and_are_all_answered() -> None:
    with redis_server_process() as url, running_server(Config(port=0, redis_url=url, shutdown_timeout=2.0)) as srv:
        redis.Redis.from_url(url).shutdown(nosave=True)
        raw = srv.raw()
        raw.send(_pack(b"GET", b"a") + _pack(b"PING") + _pack(b"GET", b"b"))
        first, pong, last = _replies(raw, 3)
        assert first.startswith(b"-ERR backing store unavailable") and pong == b"+PONG"
        assert last.startswith(b"-ERR backing store unavailable")  # not left waiting for a connect never started


class _Sink:
    """A client of the relay: its flush may send one more command, as a connection's pump does."""

    def __init__(self) -> None:
        self.then: list[tuple[NodeRelay, list[bytes], ReplySlot]] = []

    def push(self, data: bytes) -> None:
        raise AssertionError("no pushes on the shared relay")

    def flush(self) -> None:
        while self.then:
            relay, argv, slot = self.then.pop()
            relay.send(argv, slot, self)

    def store_lost(self) -> None:
        raise AssertionError("the shared relay never closes its clients")


def test_a_command_sent_while_the_relay_reconnects_gets_its_own_reply() -> None:
    """A flush scheduled before the connection was lost must not eat commands queued for the new one."""
    with redis_server_process() as url:
        redis.Redis.from_url(url).set("k", "mine")

        async def scenario() -> tuple[list[bytes], list[bytes]]:
            relay = NodeRelay(parse_store_url(url), 0)
            warm = ReplySlot()
            relay.send([b"PING"], warm, _Sink())
            while not warm.done:
                await asyncio.sleep(0.01)
            x, own, other = _Sink(), ReplySlot(), ReplySlot()
            x.then.append((relay, [b"GET", b"k"], own))  # X's next command, sent when its first is answered
            assert relay._upstream is not None and relay._upstream.transport is not None
            relay._upstream.transport.abort()  # lost, with X's first command queued in the same iteration
            relay.send([b"GET", b"a"], ReplySlot(), x)
            while not own.done:
                await asyncio.sleep(0.01)
            relay.send([b"GET", b"nokey"], other, _Sink())
            while not other.done:
                await asyncio.sleep(0.01)
            relay.close()
            return own.chunks, other.chunks

        own, other = asyncio.run(asyncio.wait_for(scenario(), 20))
        assert own == [b"$4\r\nmine\r\n"] and other == [b"$-1\r\n"]


def test_a_write_pause_does_not_hold_other_clients_reads() -> None:
    with running_server(Config(port=0, shutdown_timeout=2.0)) as srv:
        admin = srv.client()
        admin.execute_command("CLIENT", "PAUSE", 30_000, "WRITE")
        writer = srv.raw()
        writer.send(_pack(b"SET", b"x", b"1"))  # paused by the store until UNPAUSE
        reader = srv.client()
        assert reader.get("y") is None  # answered while the write still waits
        writer.sock.setblocking(False)
        try:
            assert writer.sock.recv(100) == b"", "the paused write was answered"
        except BlockingIOError:
            pass  # nothing yet: the write is still paused, and the read did not wait behind it
        writer.sock.setblocking(True)
        admin.execute_command("CLIENT", "UNPAUSE")
        assert _replies(writer, 1) == [b"+OK"]


def test_a_refused_select_leaves_the_client_in_its_database() -> None:
    with redis_server_process() as url, running_server(Config(port=0, redis_url=url, shutdown_timeout=2.0)) as srv:
        conn = srv.client()
        conn.set("here", "0")
        redis.Redis.from_url(url).shutdown(nosave=True)
        raw = srv.raw()
        raw.send(_pack(b"SELECT", b"3"))
        assert _replies(raw, 1)[0].startswith(b"-ERR backing store unavailable")
        assert wait_until(lambda: b"db=0" in _client_info(raw))


def _client_info(raw: RawClient) -> bytes:
    raw.send(_pack(b"CLIENT", b"INFO"))
    return raw.read_until(b"lib-ver=", timeout=5)
