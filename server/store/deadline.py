"""A time limit on one await that needs no current Task.

    reply = await within(read_topology(address), 2.0)    # TimeoutError after 2 s, the read cancelled

``asyncio.wait_for`` and ``asyncio.timeout`` need a current Task on Python 3.12 and later, and a handler
coroutine runs without one (server/frontend/eager.py drives it from its futures' callbacks). ``within``
waits with ``asyncio.wait``, which needs none, so the same code runs on every Python the package supports.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")


async def within(awaitable: Awaitable[T], seconds: float) -> T:
    """``awaitable``'s result, or TimeoutError once ``seconds`` passed (it is cancelled then). Cancelling the
    caller cancels it too."""
    task = asyncio.ensure_future(awaitable)
    try:
        await asyncio.wait((task,), timeout=seconds)
    finally:
        timed_out = not task.done()  # (or the caller was cancelled: then this ends in its CancelledError)
        if timed_out:
            task.cancel()
            task.add_done_callback(_retrieve)
    if timed_out:
        raise TimeoutError
    return task.result()


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Reads the outcome of a task given up on, so asyncio logs no 'exception was never retrieved'."""
    if not task.cancelled():
        task.exception()
