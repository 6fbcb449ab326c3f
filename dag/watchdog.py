"""The run watchdog: a step still running at its deadline is answered TIMEDOUT at that deadline, and the device
queue it held goes on with a fresh worker thread.

Between steps a worker already stops a run whose deadline passed (``RunInfo.is_dead``). A step that never ends
(a script's ``while True:``) never reaches that check: its worker would hold the queue for ever and every later
run on that device would wait. So a worker registers each step that has a deadline — the run's TIMEOUT, and for
a script op also ``--script-execution-timeout`` / ``AI.CONFIG SCRIPT_EXECUTION_TIMEOUT`` — before it starts it.
One watchdog thread per server sleeps on a condition until the earliest registered deadline (no polling). A step
past it is *abandoned*: the run is marked timed out (the client gets TIMEDOUT; nothing is written), the step's
ticket is let go for the worker, a fresh worker thread is started on that queue, and it is logged and counted
(``INFO ai``: ``ai_workers_abandoned``, ``ai_workers_stuck``).

A ticket still *waiting* in a queue at its run's deadline (behind a long op, or behind one the watchdog has not
given up yet) is registered too, when it is queued: at the deadline the watchdog takes it out of its queue and
lets it go, so that run too is answered TIMEDOUT at its deadline rather than when a worker gets to it.

What cannot be done: a thread cannot be killed, and TorchScript cannot interrupt a running function. The
abandoned thread keeps running its step — a CPU core busy for as long as it loops, for ever for ``while True:``.
A script that calls ``redis.execute`` or ``redisAI.model_execute`` is stopped at its next such call (the step's
``interrupt``). When the step does end, its result is dropped (``settle`` says so) and the thread exits.
Batched model calls (several runs in one call) are not watched; ops run inline on the event-loop thread are
small models only (dag/inline.py), never scripts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dag.queues import LONGEST_WAIT_S, DeviceQueue
from dag.residency import finish_run
from dag.runinfo import DeviceTicket, RunInfo, Step
from dag.script_work import ScriptWork

log = logging.getLogger("redisai.watchdog")

PRUNE_AT = 1024  # queued-ticket entries kept before those of finished runs are dropped (then twice as many)


class Abandoned(Exception):
    """Raised in a worker whose step ended after the watchdog gave its ticket up: the thread must end."""


@dataclass(eq=False, slots=True)
class Watched:
    """One step running on a worker, and the monotonic time it must end by."""

    ticket: DeviceTicket
    queue: DeviceQueue
    deadline: float
    thread: threading.Thread
    abandoned: bool = False


class Watchdog:
    """Deadlines of the steps running on one server's workers (see the module docstring)."""

    def __init__(self, replace_worker: Callable[[DeviceQueue], None], script_limit_ms: int = 0) -> None:
        self.script_limit_ms = script_limit_ms  # AI.CONFIG SCRIPT_EXECUTION_TIMEOUT; 0 = none
        self.abandoned = 0  # worker threads abandoned since start (INFO)
        self._replace_worker = replace_worker
        self._cond = threading.Condition()
        self._running: list[Watched] = []
        self._stuck: list[Watched] = []  # abandoned, still running their step
        self._queued: list[tuple[float, DeviceTicket, DeviceQueue]] = []  # tickets of runs with a deadline
        self._prune_at = PRUNE_AT
        self._thread: threading.Thread | None = None
        self._closed = False

    def deadline_for(self, run: RunInfo, step: Step, now: float) -> float | None:
        """When ``step``, starting now, must end: the run's deadline, and for a script the server's limit,
        whichever comes first; None when neither applies."""
        deadline = run.deadline
        if isinstance(step.work, ScriptWork) and self.script_limit_ms > 0:
            limit = now + self.script_limit_ms / 1000
            deadline = limit if deadline is None else min(deadline, limit)
        return deadline

    @property
    def stuck(self) -> int:
        """Abandoned worker threads still running their step (INFO ai_workers_stuck)."""
        return len(self._stuck)

    def stuck_threads(self) -> list[threading.Thread]:
        with self._cond:
            return [watched.thread for watched in self._stuck]

    def watch(self, ticket: DeviceTicket, queue: DeviceQueue, deadline: float) -> Watched:
        """Register the ticket's current step (called by its worker thread just before it runs it)."""
        watched = Watched(ticket, queue, deadline, threading.current_thread())
        with self._cond:
            self._running.append(watched)
            self._wake_locked()
        return watched

    def watch_queued(self, ticket: DeviceTicket, queue: DeviceQueue) -> None:
        """Register a ticket just queued whose run has a deadline (entries of runs that have ended are dropped
        now and then, so a long TIMEOUT given to many quick runs does not pile them up)."""
        deadline = ticket.run.deadline
        assert deadline is not None
        with self._cond:
            if len(self._queued) >= self._prune_at:
                self._queued = [entry for entry in self._queued if entry[1].run.refcount > 0]
                self._prune_at = max(PRUNE_AT, 2 * len(self._queued))
            self._queued.append((deadline, ticket, queue))
            self._wake_locked()

    def _wake_locked(self) -> None:
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._loop, name="run-watchdog", daemon=True)
            self._thread.start()
        self._cond.notify()

    def settle(self, watched: Watched) -> bool:
        """The step returned: True when its worker may record it and go on; False when it was abandoned meanwhile
        (the worker must then end without touching its ticket)."""
        with self._cond:
            if watched.abandoned:
                self._stuck.remove(watched)
                return False
            self._running.remove(watched)
            return True

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _loop(self) -> None:
        while (due := self._next_due()) is not None:
            running, queued = due
            for watched in running:
                self._abandon(watched)
            for ticket, queue in queued:
                self._drop_queued(ticket, queue)

    def _next_due(self) -> tuple[list[Watched], list[tuple[DeviceTicket, DeviceQueue]]] | None:
        """Sleep until a registered step or queued ticket is past its deadline; those steps (marked abandoned)
        and tickets (None: closed)."""
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                running = [watched for watched in self._running if watched.deadline <= now]
                for watched in running:
                    watched.abandoned = True
                    self._running.remove(watched)
                self.abandoned += len(running)
                self._stuck.extend(running)
                queued = [(ticket, queue) for deadline, ticket, queue in self._queued if deadline <= now]
                if queued:
                    self._queued = [entry for entry in self._queued if entry[0] > now]
                if running or queued:
                    return running, queued
                deadlines = [watched.deadline for watched in self._running] + [entry[0] for entry in self._queued]
                self._cond.wait(min(min(deadlines) - now, LONGEST_WAIT_S) if deadlines else None)
            return None

    @staticmethod
    def _drop_queued(ticket: DeviceTicket, queue: DeviceQueue) -> None:
        """A ticket past its run's deadline: if it still waits in its queue (no worker took it), take it out and
        let it go — the run is answered TIMEDOUT once its other tickets have let go too."""
        with queue.cond:
            try:
                queue.items.remove(ticket)
            except ValueError:  # a worker has it (a running step is watched on its own) or it is done
                return
        run = ticket.run
        with run.lock:
            run.timed_out = True
        for other in run.waiters:
            other.wake()
        if run.release():
            finish_run(run, run.host_after)

    def _abandon(self, watched: Watched) -> None:
        """Answer the run TIMEDOUT, stop its other steps, and give the queue a fresh worker."""
        ticket = watched.ticket
        run, step = ticket.run, ticket.current
        log.warning("a %s op on %s ran past its deadline: answered TIMEDOUT; its worker thread is abandoned to it "
                    "(it keeps running until the op returns) and a fresh thread serves the queue (%d stuck)",
                    "script" if isinstance(step.work, ScriptWork) else "model", watched.queue.name, self.stuck)
        interrupt: Any = getattr(step.work, "interrupt", None)
        if callable(interrupt):
            interrupt()
        with run.lock:
            run.timed_out = True
        self._replace_worker(watched.queue)
        for queue in run.waiters:
            queue.wake()
        if run.release():
            finish_run(run, run.host_after)
