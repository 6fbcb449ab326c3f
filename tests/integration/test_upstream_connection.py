"""What every store connection shares (server/store/upstream.py ``UpstreamConnection``), seen through the
keyspace's link: calls made while it connects wait for it and go out in order, a connection that cannot be
made fails every call waiting on it, and one given up on (``abort``) fails its calls and connects anew."""

from __future__ import annotations

import asyncio
import socket

import pytest

from backends.errors import AIError
from server.store.cluster_link import RedisLink
from server.store.upstream import parse_store_url
from tests.support import free_port, redis_server_process


def test_calls_made_while_connecting_go_out_once_connected_in_order() -> None:
    with redis_server_process() as url:
        async def scenario() -> list[list[object]]:
            link = RedisLink(parse_store_url(url), 0)
            calls = [link.pipeline([[b"SET", b"k", b"1"]]), link.pipeline([[b"INCR", b"k"], [b"GET", b"k"]])]
            assert not link.connected and link.oldest_pending() is not None  # both wait for the connection
            replies = [await call for call in calls]
            link.close()
            return replies

        assert asyncio.run(asyncio.wait_for(scenario(), 20)) == [[b"OK"], [2, b"2"]]


def test_a_connection_that_cannot_be_made_fails_every_waiting_call() -> None:
    async def scenario() -> list[BaseException | list[object]]:
        link = RedisLink(parse_store_url(f"redis://127.0.0.1:{free_port()}"), 0)
        calls = [link.pipeline([[b"PING"]]), link.pipeline([[b"PING"]])]
        return list(await asyncio.gather(*calls, return_exceptions=True))

    results = asyncio.run(asyncio.wait_for(scenario(), 20))
    assert all(isinstance(r, AIError) and r.message.startswith("ERR backing store unavailable") for r in results)


def test_an_aborted_connection_fails_its_calls_and_the_next_call_connects_anew() -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts (its backlog does), never answers
        port = silent.getsockname()[1]

        async def scenario() -> None:
            link = RedisLink(parse_store_url(f"redis://127.0.0.1:{port}"), 0)
            for attempt in ("first", "second"):
                waiting = asyncio.ensure_future(link.pipeline([[b"PING"]]))
                while not link.connected:  # (the second call, queued behind nothing, makes a new connection)
                    await asyncio.sleep(0.01)
                assert link.oldest_pending() is not None
                link.abort(f"{attempt} given up on")
                with pytest.raises(AIError, match=f"{attempt} given up on"):
                    await waiting
                assert not link.connected and link.oldest_pending() is None
            link.close()

        asyncio.run(asyncio.wait_for(scenario(), 20))


def test_a_call_waiting_for_the_connection_to_be_made_can_be_given_up_on() -> None:
    """A watchdog sees a call that waits for the login (a listener that never answers AUTH) and fails it at
    once, without waiting for the connect timeout."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]

        async def scenario() -> None:
            link = RedisLink(parse_store_url(f"redis://:secret@127.0.0.1:{port}"), 0)
            waiting = asyncio.ensure_future(link.pipeline([[b"PING"]]))
            await asyncio.sleep(0)  # the connection is being made: accepted, its AUTH never answered
            assert not link.connected and link.oldest_pending() is not None
            link.abort("given up on while connecting")
            with pytest.raises(AIError, match="given up on while connecting"):
                await waiting
            link.close()

        asyncio.run(asyncio.wait_for(scenario(), 20))
