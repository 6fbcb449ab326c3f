"""Inline runs that reach the loop thread in one loop round, run back to back at its end.

Under load, every loop round reads many clients' requests, and each request's small model run used to happen
where its request stood: parse, run, write, the next client's parse, run, write. Torch's own code and data
(its dispatcher, the JIT interpreter, the model's weights) were then evicted by the server's between any two
runs, and a 14 µs call cost ~65 µs of CPU at 50 clients (docs/performance.md, "Where the time goes"). So while
a run is already waiting, a later one waits with it, and the lot runs at the end of the round, one after the
other, each exactly as it would have run alone (its own call, result, counters and TIMEOUT check): no batching,
so no model has to accept a batch.

The first run of a round never waits: with nobody beside it (one client, an idle server) it runs at once,
costing nothing more than it did. Only when it is already running or done does a second run of the same round
start the group.

Usage (server/ai/execution.py)::

    if policy.group.forming():
        finished = await policy.group.hold(run, queue)   # runs at the end of this loop round
    else:
        policy.group.lead()                              # later runs of this round wait
        policy.run_here(run, queue)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

from dag.inline_batch import Held
from dag.queues import DeviceQueue
from dag.runinfo import RunInfo

log: Final = logging.getLogger("redisai.inline")


class RoundGroup:
    """The inline runs of one loop round after its first (event-loop thread only); see the module docstring.

    ``run_here(run, queue)``: run one of them on this thread, recorded as a lone inline run is.
    """

    def __init__(self, run_here: Callable[[RunInfo, DeviceQueue], None]) -> None:
        self._run_here = run_here
        self._led = False  # a run of this round has run: the next one waits
        self._members: list[Held] = []

    def forming(self) -> bool:
        """Whether a run that may run inline now should wait for the end of this round instead."""
        return self._led

    def lead(self) -> None:
        """The round's first inline run is about to run now: later ones of this round wait for its end."""
        self._led = True
        asyncio.get_running_loop().call_soon(self._end_round)

    def hold(self, run: RunInfo, queue: DeviceQueue) -> asyncio.Future[RunInfo]:
        """Hold ``run`` until the end of this round; the future resolves when it has run."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[RunInfo] = loop.create_future()
        if not self._members:  # the round's end was scheduled by its lead; on a loop that died before it ran,
            loop.call_soon(self._end_round)  # nothing would run the held: an end of its own, a no-op after one
        self._members.append(Held(run, queue, future))
        return future

    def _end_round(self) -> None:
        """Run the held runs in arrival order; those whose client went away (future cancelled) are skipped."""
        members, self._members = self._members, []
        self._led = False
        for member in members:
            if member.future.done():
                continue
            try:
                self._run_here(member.run, member.queue)
            except Exception as exc:  # defensive: a bug here must still answer every held request
                log.exception("a grouped inline run failed")
                member.future.set_exception(exc)
                continue
            member.future.set_result(member.run)
