"""Eager handler coroutines: finished in the first step when they never wait, a Task only when they do."""

from __future__ import annotations

import asyncio

import pytest

from server.frontend.eager import step_once


async def _no_wait() -> int:
    return 41 + 1


async def _waits(future: asyncio.Future[int]) -> int:
    value = await future
    await asyncio.sleep(0)
    return value * 2


async def _fails() -> int:
    raise ValueError("boom")


def test_a_coroutine_that_never_waits_finishes_at_once() -> None:
    assert step_once(_no_wait()) == (True, 42)
    with pytest.raises(ValueError, match="boom"):
        step_once(_fails())


def test_a_coroutine_that_waits_goes_on_in_a_task() -> None:
    async def scenario() -> int:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        finished, rest = step_once(_waits(future))
        assert not finished
        task = asyncio.ensure_future(rest)
        await asyncio.sleep(0)
        future.set_result(21)
        return await task

    assert asyncio.run(scenario()) == 42


def test_errors_of_the_awaited_future_reach_the_coroutine() -> None:
    async def catches(future: asyncio.Future[int]) -> str:
        try:
            await future
        except KeyError:
            return "caught"
        return "missed"

    async def scenario() -> str:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        _, rest = step_once(catches(future))
        task = asyncio.ensure_future(rest)
        future.set_exception(KeyError("x"))
        return await task

    assert asyncio.run(scenario()) == "caught"


def test_cancelling_the_task_cancels_the_awaited_future() -> None:
    async def scenario() -> bool:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        _, rest = step_once(_waits(future))
        task = asyncio.ensure_future(rest)
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return future.cancelled()

    assert asyncio.run(scenario()) is True
