"""Eager handler coroutines: finished in the first step when they never wait, driven without a Task when
they do (server/frontend/eager.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from server.frontend.eager import drive
from server.store.deadline import within


async def _no_wait() -> int:
    return 41 + 1


async def _waits(future: asyncio.Future[int]) -> int:
    value = await future
    await asyncio.sleep(0)
    return value * 2


async def _fails() -> int:
    raise ValueError("boom")


class Outcome:
    """What ``on_done`` reported, and a future the test can await for it."""

    def __init__(self) -> None:
        self.ended: asyncio.Future[tuple[Any, BaseException | None]] = asyncio.get_running_loop().create_future()

    def __call__(self, reply: Any, failure: BaseException | None) -> None:
        assert not self.ended.done(), "on_done called twice"
        self.ended.set_result((reply, failure))


def _never(reply: Any, failure: BaseException | None) -> None:
    raise AssertionError("on_done called for a coroutine that finished at once")


def test_a_coroutine_that_never_waits_finishes_at_once() -> None:
    assert drive(_no_wait(), _never) == (True, 42)
    with pytest.raises(ValueError, match="boom"):
        drive(_fails(), _never)


def test_a_coroutine_that_waits_is_driven_to_its_end() -> None:
    async def scenario() -> tuple[Any, BaseException | None]:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        outcome = Outcome()
        finished, _ = drive(_waits(future), outcome)
        assert not finished
        await asyncio.sleep(0)
        future.set_result(21)
        return await outcome.ended

    assert asyncio.run(scenario()) == (42, None)


def test_errors_of_the_awaited_future_reach_the_coroutine() -> None:
    async def catches(future: asyncio.Future[int]) -> str:
        try:
            await future
        except KeyError:
            return "caught"
        return "missed"

    async def scenario() -> tuple[Any, BaseException | None]:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        outcome = Outcome()
        drive(catches(future), outcome)
        future.set_exception(KeyError("x"))
        return await outcome.ended

    assert asyncio.run(scenario()) == ("caught", None)


def test_an_uncaught_error_is_reported_not_raised() -> None:
    async def raises_after(future: asyncio.Future[int]) -> int:
        await future
        raise LookupError("late")

    async def scenario() -> BaseException | None:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        outcome = Outcome()
        drive(raises_after(future), outcome)
        future.set_result(1)
        return (await outcome.ended)[1]

    assert isinstance(asyncio.run(scenario()), LookupError)


def test_cancelling_cancels_the_awaited_future_and_reports_the_cancellation() -> None:
    async def scenario() -> tuple[bool, BaseException | None]:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        outcome = Outcome()
        _, running = drive(_waits(future), outcome)
        await asyncio.sleep(0)
        running.cancel()
        _, failure = await outcome.ended
        return future.cancelled(), failure

    cancelled, failure = asyncio.run(scenario())
    assert cancelled and isinstance(failure, asyncio.CancelledError)


def test_a_cancellation_between_steps_is_thrown_in_at_the_next_one() -> None:
    async def sleeps_then_waits(future: asyncio.Future[int]) -> int:
        await asyncio.sleep(0)
        return await future

    async def scenario() -> BaseException | None:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        outcome = Outcome()
        _, running = drive(sleeps_then_waits(future), outcome)
        running.cancel()  # suspended at a bare yield: no future to carry it
        return (await outcome.ended)[1]

    assert isinstance(asyncio.run(scenario()), asyncio.CancelledError)


def test_a_handler_may_catch_its_cancellation_and_answer() -> None:
    async def answers_anyway(future: asyncio.Future[int]) -> str:
        try:
            await future
        except asyncio.CancelledError:
            return "cleaned up"
        return "done"

    async def scenario() -> tuple[Any, BaseException | None]:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        outcome = Outcome()
        _, running = drive(answers_anyway(future), outcome)
        running.cancel()
        return await outcome.ended

    assert asyncio.run(scenario()) == ("cleaned up", None)


def test_a_driven_coroutine_runs_without_a_task_on_every_python() -> None:
    """One path on 3.11-3.13: the coroutine is stepped by callbacks, so no Task is current while it runs."""
    async def reports_its_task(future: asyncio.Future[int]) -> object:
        await future
        return asyncio.current_task()

    async def scenario() -> tuple[Any, BaseException | None]:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        outcome = Outcome()
        drive(reports_its_task(future), outcome)
        future.set_result(1)
        return await outcome.ended

    assert asyncio.run(scenario()) == (None, None)


def test_a_time_limit_inside_a_driven_coroutine_needs_no_task() -> None:
    """``within`` works where ``asyncio.wait_for`` raises on 3.12+ ('Timeout should be used inside a task')."""
    async def limited(future: asyncio.Future[int], seconds: float) -> int:
        await asyncio.sleep(0)
        return await within(future, seconds)

    async def scenario() -> tuple[tuple[Any, BaseException | None], tuple[Any, BaseException | None], bool]:
        answered: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        first = Outcome()
        drive(limited(answered, 30.0), first)
        answered.set_result(7)
        silent: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        second = Outcome()
        drive(limited(silent, 0.01), second)
        return await first.ended, await second.ended, silent.cancelled()

    ok, timed_out, silent_cancelled = asyncio.run(scenario())
    assert ok == (7, None)
    assert timed_out[0] is None and isinstance(timed_out[1], TimeoutError)
    assert silent_cancelled


def test_cancelling_a_driven_coroutine_cancels_what_within_awaits() -> None:
    async def scenario() -> tuple[BaseException | None, bool]:
        inner: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        outcome = Outcome()
        _, running = drive(within(inner, 30.0), outcome)
        await asyncio.sleep(0)
        running.cancel()
        failure = (await outcome.ended)[1]
        await asyncio.sleep(0)
        return failure, inner.cancelled()

    failure, inner_cancelled = asyncio.run(scenario())
    assert isinstance(failure, asyncio.CancelledError) and inner_cancelled
