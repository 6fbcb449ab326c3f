"""The event-loop side of execution: submit a RunInfo to the device queues and await its end.

The last ticket to let go calls ``on_done`` on its worker thread; that hands the run back to the loop with
one ``call_soon_threadsafe``. If the awaiting client goes away, the run is marked cancelled: every device
skips its remaining ops at the next step, and nothing is written.
"""

from __future__ import annotations

import asyncio

from dag.queues import QueueManager
from dag.runinfo import RunInfo


def _resolve(future: asyncio.Future[RunInfo], run: RunInfo) -> None:
    if not future.done():
        future.set_result(run)


async def execute_run(queues: QueueManager, run: RunInfo) -> RunInfo:
    """Queue ``run`` on its devices and wait until every device has finished with it."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[RunInfo] = loop.create_future()

    def on_done(finished: RunInfo) -> None:
        try:
            loop.call_soon_threadsafe(_resolve, future, finished)
        except RuntimeError:  # the loop is closed: the server is gone, nobody waits
            pass

    run.on_done = on_done
    queues.submit(run)
    try:
        return await future
    except asyncio.CancelledError:
        run.cancelled = True
        for queue in run.waiters:
            queue.wake()
        raise
