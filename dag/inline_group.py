"""Inline runs that reach the loop thread in one loop round, run back to back at its end.

Under load, every loop round reads many clients' requests, and each request's small model run used to happen
where its request stood: parse, run, write, the next client's parse, run, write. Torch's own code and data
(its dispatcher, the JIT interpreter, the model's weights) were then evicted by the server's between any two
runs, and a ~20 µs call cost ~65 µs of CPU at 50 clients (docs/performance.md, "Where the time goes"). So the
runs of a round after its first wait, and the lot runs at the end of the round, one after the other, each
exactly as it would have run alone (its own call, result, counters and TIMEOUT check): no batching, so no
model has to accept a batch.

* The first run of a round never waits: with nobody beside it (one client, an idle server) it runs at once,
  costing nothing more than it did.
* Each held run is asked again at the round's end whether it may run here (``eligible``): the policy decided on
  figures that the round's earlier runs may have changed. A model due a try on the loop thread gets one try,
  not one per request of the round; one that now goes to the workers is handed there (``to_workers``).
* A round belongs to the loop that led it. Should that loop stop before the round's end, the runs it held are
  gone with it, and the next loop starts a round of its own.

Usage (server/ai/execution.py)::

    if policy.group.forming():
        future = policy.group.hold(run, queue, to_workers)   # resolves at the end of this loop round
    else:
        policy.group.lead()                                  # later runs of this round wait
        policy.run_here(run, queue)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

from dag.inline_batch import Held, ToWorkers
from dag.queues import DeviceQueue
from dag.runinfo import RunInfo

log: Final = logging.getLogger("redisai.inline")


class RoundGroup:
    """The inline runs of one loop round after its first (event-loop thread only); see the module docstring.

    ``eligible(run)``: whether it may still run here; ``run_here(run, queue)``: run it on this thread, recorded
    as a lone inline run is.
    """

    def __init__(self, eligible: Callable[[RunInfo], bool],
                 run_here: Callable[[RunInfo, DeviceQueue], None]) -> None:
        self._eligible = eligible
        self._run_here = run_here
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop whose round is open: its end is scheduled
        self._members: list[tuple[Held, ToWorkers]] = []

    def forming(self) -> bool:
        """Whether a run that may run inline now should wait for the end of this round instead."""
        return self._loop is not None

    def lead(self) -> None:
        """The round's first inline run is about to run now: later ones of this round wait for its end."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        loop.call_soon(self._end_round)

    def hold(self, run: RunInfo, queue: DeviceQueue, to_workers: ToWorkers) -> asyncio.Future[RunInfo]:
        """Hold ``run`` until the end of this round; the future resolves when it has run, here or on a worker
        (``to_workers(run, future)`` hands it there)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # the round was led on a loop that stopped before its end
            self._members = []
            self._loop = loop
            loop.call_soon(self._end_round)
        future: asyncio.Future[RunInfo] = loop.create_future()
        self._members.append((Held(run, queue, future), to_workers))
        return future

    def _end_round(self) -> None:
        """Run the held runs in arrival order; those whose client went away (future cancelled) are skipped, and
        those that may no longer run here go to the workers."""
        members, self._members = self._members, []
        self._loop = None
        for member, to_workers in members:
            if member.future.done():
                continue
            try:
                if not self._eligible(member.run):
                    to_workers(member.run, member.future)
                    continue
                self._run_here(member.run, member.queue)
            except Exception as exc:  # defensive: a bug here must still answer every held request
                log.exception("a grouped inline run failed")
                member.future.set_exception(exc)
                continue
            member.future.set_result(member.run)
