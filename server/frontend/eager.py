"""Running a handler coroutine eagerly: its first step now, a Task only if it really has to wait.

On the embedded store a keyspace round trip never suspends, so most AI commands finish in their first step;
starting a Task for each would cost a loop iteration and a task object per command. A handler that does
wait (a real Redis round trip, a worker thread, a model load) is handed to a Task at the point where it
waits, and goes on exactly as if it had been a Task from the start.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine, Generator
from typing import Any


class Suspended:
    """The rest of a coroutine that stopped at an ``await``: ``run()`` drives it to the end inside a Task."""

    def __init__(self, coro: Coroutine[Any, Any, Any], waiting_on: Any) -> None:
        self._coro = coro
        self._waiting_on = waiting_on

    async def run(self) -> Any:
        coro, pending = self._coro, self._waiting_on
        while True:
            try:
                await _UntilDone(pending)
            except asyncio.CancelledError:  # our Task was cancelled (or what it waited on was)
                if isinstance(pending, asyncio.Future):
                    pending.cancel()  # what Task.cancel() does to the future its coroutine waits on
                try:
                    pending = coro.throw(asyncio.CancelledError())
                except StopIteration as stop:
                    return stop.value
                continue
            except Exception:  # the failed future's error reaches the coroutine below, from its result()
                pass
            try:
                pending = coro.send(None)
            except StopIteration as stop:
                return stop.value


class _UntilDone:
    """Wait for a future the way a Task waits for what its coroutine awaits, without taking its result:
    ``yield`` it to our Task (which wakes us when it is done, and cancels it if the Task is cancelled).
    Cheaper than ``asyncio.wait([future])``, which builds a set, a waiter future and callbacks each time."""

    __slots__ = ("_pending",)

    def __init__(self, pending: Any) -> None:
        self._pending = pending

    def __await__(self) -> Generator[Any, None, None]:
        pending = self._pending
        if isinstance(pending, asyncio.Future):
            if not pending.done():  # still marked blocking by the coroutine that yielded it: our Task waits on it
                yield pending
        else:  # a bare ``yield`` (asyncio.sleep(0)): give the loop one turn
            yield None


def step_once(coro: Coroutine[Any, Any, Any]) -> tuple[bool, Any]:
    """Run ``coro`` until it finishes or first waits: (True, its result) or (False, an awaitable of the rest).

    An exception raised in that first step propagates to the caller, as from a plain function call. On
    Python 3.12+ this is an eagerly started Task (so even the first step runs inside a Task: asyncio.timeout
    and wait_for work there); on 3.11, where wait_for needs no Task, the first step runs bare.
    """
    if sys.version_info >= (3, 12):
        task = asyncio.Task(coro, eager_start=True)
        return (True, task.result()) if task.done() else (False, task)
    try:
        pending = coro.send(None)
    except StopIteration as stop:
        return True, stop.value
    return False, Suspended(coro, pending).run()
