"""The worker loop: take a ticket that can move, step ONE op, put the ticket back or let it go.

Runs on a device thread. It touches only what hangs off its ticket (the run's slots and results, under
the run's lock) and the queue (under the queue's condition). A step that raises never kills the worker:
the error is recorded on the op and the run stops at its next step on every device.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Final

from backends import errors as msgs
from backends.batching import Allocate, concat_inputs, split_outputs
from backends.errors import AIError
from dag.lanes import Lane, LaneFactory, no_lane, open_on_thread
from dag.queues import DeviceQueue
from dag.residency import bring_batch_inputs, bring_inputs, resident_work, settle_run
from dag.runinfo import DeviceTicket, RunInfo, Step, Work, size_class
from dag.watchdog import Abandoned, Watchdog

log: Final = logging.getLogger("redisai.worker")

# time's functions as module constants: compiled, a call of ``time.x()`` looks ``x`` up on the module each time
_monotonic: Final = time.monotonic
_perf_counter: Final = time.perf_counter
_thread_time_ns: Final = time.thread_time_ns


class Worker:
    """One thread's loop over one device queue; ``watchdog`` times the steps that have a deadline. ``lanes``
    opens this thread's lane (dag/lanes.py: a GPU queue's own CUDA stream and pinned staging) when the thread
    starts; a CPU queue's worker has none and takes the plain path."""

    def __init__(self, queue: DeviceQueue, watchdog: Watchdog, lanes: LaneFactory = no_lane) -> None:
        self.queue = queue
        self.watchdog = watchdog
        self.lanes = lanes
        self.lane: Lane | None = None

    def run(self) -> None:
        self.lane = open_on_thread(self.lanes, self.queue.name)
        worked = False
        while tickets := self._next_work(worked):
            worked = True
            try:
                if len(tickets) == 1:
                    self._step(tickets[0])
                else:
                    self._batched_step(tickets)
            except Abandoned:  # a fresh thread took this queue over while the step ran past its deadline
                log.warning("an abandoned worker thread of %s finished its op; the thread ends", self.queue.name)
                with self.queue.lock:
                    self.queue.running -= 1
                return
            except Exception:  # defensive: the loop itself must survive anything
                log.exception("worker %s failed on a ticket", self.queue.name)
                for ticket in tickets:
                    self._finish(ticket)

    def _next_work(self, worked: bool) -> list[DeviceTicket]:
        """One ticket, or several batched ones; [] when the queue is closed and empty. ``worked``: this thread
        is done with the work it took last (the queue's ``running`` count)."""
        queue = self.queue
        with queue.cond:
            if worked:
                queue.running -= 1
            while True:
                tickets, wait = queue.take_locked(_monotonic())
                if tickets:
                    queue.running += 1
                    return tickets
                if queue.closed and not queue.items:
                    return []
                queue.cond.wait(wait)

    def _step(self, ticket: DeviceTicket) -> None:
        run = ticket.run
        if run.is_dead(_monotonic()):
            self._finish(ticket)
            return
        self._execute(run, ticket)
        self._advance(ticket)

    def _advance(self, ticket: DeviceTicket) -> None:
        """After a step: tell the run's scheduler (a compiled graph) or wake the run's other devices (a DAG), then
        put the ticket back at the head or let it go."""
        run = ticket.run
        done = ticket.current
        ticket.cursor += 1
        if run.on_step is not None:
            run.on_step(done)
        else:
            self._wake_other_devices(run)
        if ticket.finished or run.is_dead(_monotonic()):
            self._finish(ticket)
        else:
            self.queue.push_front(ticket)

    def _batched_step(self, tickets: list[DeviceTicket]) -> None:
        """One model call for several requests (``run_batch``), then each ticket moves on."""
        steps = [ticket.current for ticket in tickets]
        runs = [ticket.run for ticket in tickets]
        lane = self.lane
        if lane is None:
            self._count(run_batch(runs, steps), batch=len(tickets))
        else:  # stacked straight into the lane's (pinned) staging, resident inputs brought over first
            bring_batch_inputs(runs, steps)
            self._count(run_batch(runs, steps, allocate=lane.allocate), batch=len(tickets))
        spec = steps[0].batch
        if spec is not None and spec.on_batch is not None:
            spec.on_batch(len(tickets))
        for ticket in tickets:
            self._advance(ticket)

    def _count(self, elapsed: float, batch: int = 1) -> None:
        count_call(self.queue, elapsed, batch)

    def _execute(self, run: RunInfo, ticket: DeviceTicket) -> None:
        step = ticket.current
        if step.work is None:
            run.record_success(step, (), 0)
            return
        work = self._lane_work(run, step) if self.lane is not None else None
        if run.resident and work is None:
            bring_inputs(run, step, None)
        watchdog = self.watchdog
        deadline = watchdog.deadline_for(run, step, _monotonic())
        if deadline is None:
            self._count(execute_step(run, step, self.queue.name, work=work))
            return
        watched = watchdog.watch(ticket, self.queue, deadline)
        self._count(execute_step(run, step, self.queue.name, settle=lambda: watchdog.settle(watched), work=work))

    def _lane_work(self, run: RunInfo, step: Step) -> Work | None:
        """On a lane that keeps intermediates: how ``step`` runs leaving its outputs on the device (the run is
        marked before any such output is in a slot), with inputs resident elsewhere brought over; else None."""
        work = resident_work(step, self.lane)
        if work is not None:
            run.resident = True
            bring_inputs(run, step, step.device)
        return work

    def _wake_other_devices(self, run: RunInfo) -> None:
        """A step's outputs may be what tickets elsewhere wait for (on other devices, or on this one when
        the run has a ticket per step): wake those queues' workers."""
        for queue in run.waiters:
            queue.wake()

    @staticmethod
    def _finish(ticket: DeviceTicket) -> None:
        run = ticket.run
        if run.release():  # finish_run, inline: this is every run's path, compiled (a call into an interpreted module)
            if run.resident:
                settle_run(run, run.host_after)
            if run.on_done is not None:
                run.on_done(run)


def execute_step(run: RunInfo, step: Step, device: str, cpu: bool = True,
                 settle: Callable[[], bool] | None = None, work: Work | None = None) -> float:
    """Run ``step`` (which has work) on the calling thread and record how it ended; the seconds it took.

    Also records the op's CPU time on this thread (``cpu``), which dag/inline.py uses to tell a small op from
    a big one (wall time on a worker includes waiting for the GIL); a graph run inline measures its whole run
    instead. ``settle`` (a watched step, dag/watchdog.py) is asked before anything is recorded: False means the
    run was given up meanwhile, and ``Abandoned`` is raised instead. ``work``: how to run it instead of
    ``step.work`` (a GPU lane's resident run, dag/residency.py)."""
    inputs = [run.slots[i] for i in step.inputs]
    started, cpu_started = _perf_counter(), _thread_time_ns() if cpu else 0
    call = step.work if work is None else work
    assert call is not None
    outputs: list[object] = []
    error: AIError | None = None
    try:
        outputs = call(inputs)
    except AIError as failure:  # its own name: compiled, ``exc`` would be typed AIError for both clauses
        error = failure
    except Exception as exc:
        log.exception("op %d on %s raised", step.index, device)
        error = _op_failed(exc)
    if settle is not None and not settle():
        raise Abandoned
    if error is not None:
        run.record_failure(step, error, _micros_since(started))
    else:
        run.record_success(step, outputs, _micros_since(started))
    if cpu:
        run.results[step.index].cpu_us = (_thread_time_ns() - cpu_started) // 1000
    return _perf_counter() - started


def count_call(queue: DeviceQueue, elapsed: float, batch: int = 1) -> None:
    """One call (of ``batch`` requests) that took ``elapsed`` seconds and ended now, in ``queue``'s INFO
    counters: a worker's, and a single inline run's (dag/inline.py; a function here, compiled, where a method of
    the interpreted DeviceQueue would be an interpreted call on every request)."""
    ended = _perf_counter()
    with queue.lock:
        queue.recent.append((ended - elapsed, ended))
        queue.busy_seconds += elapsed
        queue.executed += 1
        queue.batched_requests += batch if batch > 1 else 0


def run_batch(runs: Sequence[RunInfo], steps: Sequence[Step], cpu: bool = True,
              allocate: Allocate | None = None) -> float:
    """One model call for several requests (``steps[i]`` of ``runs[i]``, all of one model, inputs ready): inputs
    concatenated along dim 0, outputs split back; an error (a backend error, or outputs whose dim 0 is not the
    batch's total) goes to every member. Each member's result also gets the size class of the whole batch's
    inputs and (``cpu``) the call's CPU time on this thread (dag/inline.py's cost estimate; on the loop thread,
    which reads no CPU clock, wall time is that). ``allocate``: the buffers the inputs are stacked into (a GPU
    lane's pinned staging; numpy's own otherwise). The seconds it took."""
    inputs = [[run.slots[i] for i in step.inputs] for run, step in zip(runs, steps, strict=True)]
    work = steps[0].work
    assert work is not None
    started, cpu_started = _perf_counter(), _thread_time_ns() if cpu else 0
    try:
        batched = concat_inputs(inputs, allocate)
        per_member = split_outputs(work(batched), [int(member[0].shape[0]) for member in inputs])
    except Exception as exc:
        error, duration_us = exc if isinstance(exc, AIError) else _op_failed(exc), _micros_since(started)
        for run, step in zip(runs, steps, strict=True):
            run.record_failure(step, error, duration_us)
        return _perf_counter() - started
    duration_us = _micros_since(started)
    cost_us = (_thread_time_ns() - cpu_started) // 1000 if cpu else duration_us
    cost_class = size_class(batched)
    for run, step, outputs in zip(runs, steps, per_member, strict=True):
        run.record_success(step, outputs, duration_us)
        result = run.results[step.index]
        result.cpu_us, result.cost_class = cost_us, cost_class
    return _perf_counter() - started


def _micros_since(started: float) -> int:
    return int((_perf_counter() - started) * 1_000_000)


def _op_failed(exc: Exception) -> AIError:
    """An op's unexpected exception as that op's error reply: the worker thread lives on (CONTRIBUTING.md,
    *One error catalogue*)."""
    return AIError(msgs.OP_FAILED_FMT.format(kind=type(exc).__name__, detail=exc))
