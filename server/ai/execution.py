"""The event-loop side of execution: submit a RunInfo to the device queues and await its end.

The last ticket to let go calls ``on_done`` on its worker thread; that hands the run back to the loop with
one ``call_soon_threadsafe``. If the awaiting client goes away, the run is marked cancelled: every device
skips its remaining ops at the next step, and nothing is written. A small op may run on the loop thread
instead (dag/inline.py), and so may a small model's auto-batched requests, gathered over two loop rounds
(dag/inline_batch.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from dag.compiled import StepCounters
from dag.inline import InlinePolicy
from dag.inline_batch import ToWorkers
from dag.manager import QueueManager
from dag.runinfo import RunInfo


def _resolve(future: asyncio.Future[RunInfo], run: RunInfo) -> None:
    if not future.done():
        future.set_result(run)


async def execute_run(queues: QueueManager, run: RunInfo, inline: InlinePolicy | None = None) -> RunInfo:
    """Queue ``run`` on its devices and wait until every device has finished with it — or, for a small op
    that ``inline`` says is cheaper to run than to hand over (dag/inline.py), run it here: now, or with the
    others of this loop round at its end (dag/inline_group.py)."""
    if inline is not None and len(run.steps) == 1:
        queue = queues.queue(run.steps[0].device)
        if inline.eligible(run):
            if inline.group.forming():
                return await _held(run, inline, inline.group.hold(run, queue, _to_workers(queues)))
            inline.group.lead()
            inline.run_here(run, queue)
            return run
        if inline.batch_eligible(run, queue):
            return await _held(run, inline, inline.batches.hold(run, queue, _to_workers(queues)))
    finished = await _on_workers(queues, run)
    if inline is not None:
        inline.observe(finished)
    return finished


def _to_workers(queues: QueueManager) -> ToWorkers:
    """How a held run that may not run on the loop thread after all goes to the workers."""

    def to_workers(held: RunInfo, future: asyncio.Future[RunInfo]) -> None:
        held.on_done = _resolver(future)
        queues.submit(held)

    return to_workers


async def _held(run: RunInfo, inline: InlinePolicy, future: asyncio.Future[RunInfo]) -> RunInfo:
    """A run held on the loop thread (a round's group, or an auto-batched run's gather) until ``future``; one
    that went to the workers instead teaches ``inline`` what it cost there."""
    finished = await _awaited(run, future)
    if finished.waiters:  # it ran on a worker
        inline.observe(finished)
    return finished


async def _on_workers(queues: QueueManager, run: RunInfo,
                      submit: Callable[[RunInfo], None] | None = None) -> RunInfo:
    """Hand ``run`` to the workers (``submit``; all of it at once by default) and await its last ticket."""
    future: asyncio.Future[RunInfo] = asyncio.get_running_loop().create_future()
    run.on_done = _resolver(future)
    (submit or queues.submit)(run)
    return await _awaited(run, future)


def _resolver(future: asyncio.Future[RunInfo]) -> Callable[[RunInfo], None]:
    """A run's ``on_done`` (called on a worker or the watchdog thread): resolve ``future`` on its loop."""
    loop = future.get_loop()

    def on_done(finished: RunInfo) -> None:
        try:
            loop.call_soon_threadsafe(_resolve, future, finished)
        except RuntimeError:  # the loop is closed: the server is gone, nobody waits
            pass

    return on_done


async def _awaited(run: RunInfo, future: asyncio.Future[RunInfo]) -> RunInfo:
    """``run``'s end; if the awaiting client goes away first, the run is cancelled and its queues woken."""
    try:
        return await future
    except asyncio.CancelledError:
        run.cancelled = True
        for queue in run.waiters:
            queue.wake()
        raise


async def execute_counted(queues: QueueManager, run: RunInfo, consumers: Sequence[Sequence[int]],
                          deps: Sequence[int], roots: Sequence[int]) -> RunInfo:
    """A compiled graph's run on the workers: only ``roots`` are queued; each other step is pushed by the
    worker that ends its last producer (dag/compiled.py)."""

    def submit(started: RunInfo) -> None:
        started.waiters = list({id(q): q for q in (queues.queue(step.device) for step in started.steps)}.values())
        StepCounters(started, consumers, deps, queues.push_step).start(roots)

    return await _on_workers(queues, run, submit)
