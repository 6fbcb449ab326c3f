"""The worker loop: take a ticket that can move, step ONE op, put the ticket back or let it go.

Runs on a device thread. It touches only what hangs off its ticket (the run's slots and results, under
the run's lock) and the queue (under the queue's condition). A step that raises never kills the worker:
the error is recorded on the op and the run stops at its next step on every device.
"""

from __future__ import annotations

import logging
import time

from backends.errors import AIError
from dag.queues import DeviceQueue
from dag.runinfo import DeviceTicket, RunInfo

log = logging.getLogger("redisai.worker")


class Worker:
    """One thread's loop over one device queue."""

    def __init__(self, queue: DeviceQueue) -> None:
        self.queue = queue

    def run(self) -> None:
        while (ticket := self._next_ticket()) is not None:
            try:
                self._step(ticket)
            except Exception:  # defensive: the loop itself must survive anything
                log.exception("worker %s failed on a ticket", self.queue.name)
                self._finish(ticket)

    def _next_ticket(self) -> DeviceTicket | None:
        queue = self.queue
        with queue.cond:
            while True:
                ticket, wait = queue.take_locked(time.monotonic())
                if ticket is not None:
                    return ticket
                if queue.closed and not queue.items:
                    return None
                queue.cond.wait(wait)

    def _step(self, ticket: DeviceTicket) -> None:
        run = ticket.run
        if run.is_dead(time.monotonic()):
            self._finish(ticket)
            return
        self._execute(run, ticket)
        ticket.cursor += 1
        self._wake_other_devices(run)
        if ticket.finished or run.is_dead(time.monotonic()):
            self._finish(ticket)
        else:
            self.queue.push_front(ticket)

    def _execute(self, run: RunInfo, ticket: DeviceTicket) -> None:
        step = ticket.current
        if step.work is None:
            run.record_success(step, (), 0)
            return
        inputs = [run.slots[i] for i in step.inputs]
        started = time.perf_counter()
        try:
            outputs = step.work(inputs)
        except AIError as exc:
            run.record_failure(step, exc, _micros_since(started))
        except Exception as exc:
            log.exception("op %d on %s raised", step.index, self.queue.name)
            run.record_failure(step, AIError(f"ERR {type(exc).__name__}: {exc}"), _micros_since(started))
        else:
            run.record_success(step, outputs, _micros_since(started))
        elapsed = time.perf_counter() - started
        with self.queue.cond:
            self.queue.busy_seconds += elapsed
            self.queue.executed += 1

    def _wake_other_devices(self, run: RunInfo) -> None:
        for queue in run.waiters:
            if queue is not self.queue:
                queue.wake()

    @staticmethod
    def _finish(ticket: DeviceTicket) -> None:
        run = ticket.run
        if run.release() and run.on_done is not None:
            run.on_done(run)


def _micros_since(started: float) -> int:
    return int((time.perf_counter() - started) * 1_000_000)
