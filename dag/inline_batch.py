"""Auto-batched requests of a small model, gathered and run on the event-loop thread: no hand-off at all.

On the device queue (dag/queues.py), every request of a model stored with BATCHSIZE is handed to a worker
thread and its result handed back: a condition wake-up, the GIL taken back several times by torch and the
worker's own Python per member, a ``call_soon_threadsafe``. For a small model those hand-offs cost far more
than the request's share of the batched call (docs/performance.md, "Where the time goes").

So, when ``InlinePolicy.batch_eligible`` says so (a single-op run of a model on an idle CPU queue), the run is
*held* here instead, with every other such run that reaches this point before the loop has gone round twice
(the callback the first of them schedules reschedules itself once: under load, requests resume in waves, one
per batch of store replies read, and waiting for the next wave doubles the batches here for a few µs more
latency on an idle server). Then it takes them all and, per queue and model:

* leaves out the runs already dead (TIMEOUT passed: answered TIMEDOUT without running) and those whose client
  went away (their future is cancelled);
* cuts the rest into batches exactly as a worker would (dag/batching.py ``select_batch``: compatible inputs,
  at most BATCHSIZE rows, in arrival order);
* runs each batch here, now (dag/worker.py ``run_batch``: per-member errors, durations), when the policy has
  seen a call of that model on inputs of the batch's size class cost at most its batch budget
  (``InlinePolicy.batch_fits``); otherwise, or when a batch is below MINBATCHSIZE, or the queue holds tickets
  already, hands its runs to the workers, which wait for partners until MINBATCHTIMEOUT as before and measure
  the call — the first batches of each size class always go there.

Usage (server/ai/execution.py)::

    future = policy.batches.hold(run, queue, to_workers)   # to_workers(run, future) queues it; on_done resolves
    finished = await future
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Final

from dag.batching import BatchCandidate, RunBatch, select_batch
from dag.queues import DeviceQueue
from dag.runinfo import RunInfo, batch_candidate

log: Final = logging.getLogger("redisai.inline")

ToWorkers = Callable[[RunInfo, "asyncio.Future[RunInfo]"], None]


class Held:
    """One run waiting for the end of the loop iteration, and the future its request awaits (one a request:
    a plain class, whose ``__init__`` mypyc compiles)."""

    __slots__ = ("future", "queue", "run")

    def __init__(self, run: RunInfo, queue: DeviceQueue, future: asyncio.Future[RunInfo]) -> None:
        self.run = run
        self.queue = queue
        self.future = future


class BatchGather:
    """The runs held during one loop iteration (event-loop thread only); see the module docstring.

    ``fits(runs)``: whether these runs' batch may run here; ``run_here(runs, queue)``: run it and count it.
    """

    def __init__(self, fits: Callable[[Sequence[RunInfo]], bool],
                 run_here: Callable[[Sequence[RunInfo], DeviceQueue], None]) -> None:
        self._fits = fits
        self._run_here = run_here
        self._held: list[Held] = []

    def hold(self, run: RunInfo, queue: DeviceQueue, to_workers: ToWorkers) -> asyncio.Future[RunInfo]:
        """Hold ``run`` (a single batchable model step on ``queue``) until the end of this loop iteration."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[RunInfo] = loop.create_future()
        if not self._held:
            loop.call_soon(self._next_round, loop, to_workers)
        self._held.append(Held(run, queue, future))
        return future

    def _next_round(self, loop: asyncio.AbstractEventLoop, to_workers: ToWorkers) -> None:
        """The flush waits one loop round more: the requests whose store replies the loop read meanwhile (the
        next wave of a busy server; nothing, and a few µs, for an idle one) join the batch."""
        loop.call_soon(self._flush, to_workers)

    def _flush(self, to_workers: ToWorkers) -> None:
        held, self._held = self._held, []
        now = time.monotonic()
        groups: dict[tuple[int, Hashable], list[Held]] = {}
        for item in held:
            if item.future.done():  # its client went away
                continue
            if item.run.is_dead(now):
                item.future.set_result(item.run)
                continue
            spec = item.run.steps[0].batch
            assert spec is not None
            groups.setdefault((id(item.queue), spec.model), []).append(item)
        for group in groups.values():
            try:
                self._flush_group(group, now, to_workers)
            except Exception as exc:  # defensive: a bug here must still answer every held request
                log.exception("a gathered batch failed")
                for item in group:
                    if not item.future.done():
                        item.future.set_exception(exc)

    def _flush_group(self, group: list[Held], now: float, to_workers: ToWorkers) -> None:
        """One model's held runs: batches run here while they fit; the rest go to the workers, in order."""
        spec = group[0].run.steps[0].batch
        assert spec is not None
        candidates = [_candidate(item, now) for item in group]
        while group:
            decision = select_batch(spec.policy, candidates, now)
            if group[0].queue.items or not isinstance(decision, RunBatch):  # queued runs first, or too few
                for item in group:
                    to_workers(item.run, item.future)
                return
            chosen = set(decision.members)
            batch = [group[i] for i in decision.members]
            group = [item for i, item in enumerate(group) if i not in chosen]
            candidates = [candidate for i, candidate in enumerate(candidates) if i not in chosen]
            runs = [item.run for item in batch]
            if not self._fits(runs):
                for item in batch:
                    to_workers(item.run, item.future)
                continue
            self._run_here(runs, batch[0].queue)
            for item in batch:
                item.future.set_result(item.run)


def _candidate(item: Held, now: float) -> BatchCandidate:
    candidate = batch_candidate(item.run, item.run.steps[0], now)
    assert candidate is not None
    return candidate
