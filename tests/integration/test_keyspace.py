"""server/store/keyspace.py over both stores: batched reads in one round trip, atomic multi-key writes."""

from __future__ import annotations

import asyncio

import pytest

from backends.errors import AIError
from tests.support import RunningServer


def _run(server: RunningServer, coro: object) -> object:
    return asyncio.run_coroutine_threadsafe(coro, server.loop).result(10)  # type: ignore[arg-type]


def test_read_many_and_write_atomic(server: RunningServer) -> None:
    keyspace = server.server.ctx.keyspace(0)
    _run(server, keyspace.write_atomic([(b"SET", b"a", b"1"), (b"SET", b"b", b"2"), (b"HSET", b"h", b"f", b"v")]))
    values = _run(server, keyspace.read_many([b"a", b"b", b"missing", b"h"]))
    assert values[:3] == [b"1", b"2", None]
    assert isinstance(values[3], AIError) and values[3].message.startswith("WRONGTYPE")
    assert server.client().get("a") == b"1"


def test_write_atomic_is_all_or_nothing(server: RunningServer) -> None:
    keyspace = server.server.ctx.keyspace(0)
    with pytest.raises(AIError):
        _run(server, keyspace.write_atomic([(b"SET", b"x", b"1"), (b"NOSUCHCOMMAND",)]))
    assert server.client().get("x") is None


def test_keyspace_follows_the_database(server: RunningServer) -> None:
    _run(server, server.server.ctx.keyspace(2).call(b"SET", b"in2", b"yes"))
    assert server.client(db=2).get("in2") == b"yes"
    assert server.client(db=0).get("in2") is None
