"""Running a handler coroutine eagerly, and without a Task when it has to wait.

A handler's first step runs at once: one that never waits (argument errors, our own answers, a cached
read) finishes there, as a plain call would. One that waits (a store round trip, a worker thread, a model
load) is driven from then on by ``Driven``: each future it awaits gets a done-callback that sends the
coroutine its next step, the way a Task's ``__step`` does, but without a Task object, its scheduling on the
loop, or a wrapper coroutine per command. Most AI commands wait once or twice per request, so this is on
the hot path.

The same path runs on every supported Python (3.11-3.13). Nothing a handler awaits may need a current Task:
``asyncio.wait_for`` and ``asyncio.timeout`` do on 3.12 and later, so time limits use
``server.store.deadline.within`` instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

# How a driven coroutine ended: (its result, None) or (None, the exception it raised, CancelledError too).
OnDone = Callable[[Any, BaseException | None], None]


class Cancellable(Protocol):
    """What the caller keeps of a coroutine still running: something to cancel when its client goes away."""

    def cancel(self) -> object:
        """Cancel the coroutine at the await it is suspended in."""


class Driven:
    """A suspended coroutine driven by the done-callbacks of the futures it awaits (no Task)."""

    __slots__ = ("_coro", "_on_done", "_pending", "_throw")

    def __init__(self, coro: Coroutine[Any, Any, Any], yielded: Any, on_done: OnDone) -> None:
        self._coro = coro
        self._on_done = on_done
        self._pending: asyncio.Future[Any] | None = None
        self._throw = False  # cancel() came while no future could carry the cancellation in
        self._park(yielded)

    def _park(self, yielded: Any) -> None:
        """Wait for what the coroutine yielded: a future it awaits, or a bare yield (``asyncio.sleep(0)``)."""
        if yielded is None:
            asyncio.get_running_loop().call_soon(self._step)
        elif getattr(yielded, "_asyncio_future_blocking", False):
            yielded._asyncio_future_blocking = False
            self._pending = yielded
            yielded.add_done_callback(self._wake)
        else:  # what a Task says of anything else, thrown in where the coroutine yielded it
            self._advance(RuntimeError(f"handler coroutine yielded {yielded!r}, not a future"))

    def _wake(self, _future: asyncio.Future[Any]) -> None:
        self._step()

    def _step(self) -> None:
        self._pending = None
        if self._throw:
            self._throw = False
            self._advance(asyncio.CancelledError())
        else:
            self._advance(None)  # the awaited future's result, error or cancellation reaches it here

    def _advance(self, thrown: BaseException | None) -> None:
        """One step of the coroutine: sent None, or ``thrown`` thrown in; then wait again, or report the end."""
        try:
            yielded = self._coro.send(None) if thrown is None else self._coro.throw(thrown)
        except StopIteration as stop:
            self._on_done(stop.value, None)
        except (Exception, asyncio.CancelledError) as exc:
            self._on_done(None, exc)
        else:
            self._park(yielded)

    def cancel(self) -> bool:
        """As ``Task.cancel``: the awaited future is cancelled, so the coroutine's await raises CancelledError
        (it may catch it); between steps, CancelledError is thrown in at the next one."""
        pending = self._pending
        if pending is not None and pending.cancel():
            return True
        self._throw = True
        return True


def drive(coro: Coroutine[Any, Any, Any], on_done: OnDone) -> tuple[bool, Any]:
    """Run ``coro`` until it finishes or first waits.

    (True, its result) when it finished in that first step — an exception raised there propagates to the
    caller, as from a plain function call. (False, a ``Cancellable``) when it waits: ``on_done`` is called
    once it ends, from the loop.
    """
    try:
        yielded = coro.send(None)
    except StopIteration as stop:
        return True, stop.value
    return False, Driven(coro, yielded, on_done)
