"""The handle cache: one build per key, shared; a cancelled waiter never cancels the others' build."""

from __future__ import annotations

import asyncio

import pytest

from server.ai.handle_cache import HandleCache


class _SlowCache(HandleCache[str, str]):
    def __init__(self) -> None:
        super().__init__(capacity=2)
        self.builds = 0

    def cache_key(self, meta: str) -> str:
        return meta

    async def build(self, meta: str, payload: bytes) -> str:
        self.builds += 1
        await asyncio.sleep(0.05)
        if payload == b"bad":
            raise ValueError("cannot build")
        return f"{meta}:{payload.decode()}"

    def describe(self, meta: str) -> tuple[str, str, str]:
        return "model", "TEST", "CPU"


async def _payload() -> bytes:
    return b"blob"


def test_shared_build_survives_a_cancelled_waiter() -> None:
    async def scenario() -> None:
        cache = _SlowCache()
        first = asyncio.ensure_future(cache.get("m", _payload))
        second = asyncio.ensure_future(cache.get("m", _payload))
        await asyncio.sleep(0.01)
        first.cancel()
        assert await second == "m:blob"
        assert cache.builds == 1 and cache.lookup("m") == "m:blob"

    asyncio.run(scenario())


def test_build_errors_reach_every_waiter_and_are_not_cached() -> None:
    async def bad() -> bytes:
        return b"bad"

    async def scenario() -> None:
        cache = _SlowCache()
        results = await asyncio.gather(cache.get("m", bad), cache.get("m", bad), return_exceptions=True)
        assert all(isinstance(r, ValueError) for r in results) and cache.builds == 1
        assert await cache.get("m", _payload) == "m:blob" and cache.builds == 2

    asyncio.run(scenario())


def test_least_recently_used_goes_first() -> None:
    async def scenario() -> None:
        cache = _SlowCache()
        for key in ("a", "b", "c"):
            await cache.get(key, _payload)
        assert cache.lookup("a") is None and cache.lookup("c") == "c:blob"

    asyncio.run(scenario())


@pytest.mark.parametrize("capacity", [1])
def test_capacity(capacity: int) -> None:
    cache = _SlowCache()
    cache._capacity = capacity
    cache.put("x", "1")
    cache.put("y", "2")
    assert cache.lookup("x") is None and cache.lookup("y") == "2"
