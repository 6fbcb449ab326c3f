"""The compiled executor's scheduling: dependency counters and consumer lists instead of readiness scans.

A DAG run (dag/runinfo.py ``make_tickets``) queues a ticket per device at once; a worker looks at each
ticket's inputs to see whether it can move, and every step wakes the other devices to look again. A stored
graph knows its dependencies in advance (dag/graph_plan.py), so a run of it queues only the steps whose
inputs are bound (the roots); when a step ends, its worker decrements the counter of each consumer, and
the step that takes a counter to zero is pushed, as its own ticket, to its device's queue. No ticket ever
waits in a queue for an input, and nothing is woken to look again.

A failed step, a passed deadline or a client gone stops the pushing: the steps already queued end at once
(the worker finishes a dead run's ticket without running it), as in a DAG.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dag.runinfo import RunInfo, Step

PushStep = Callable[[RunInfo, Step], None]


class StepCounters:
    """One run's dependency counters; ``on_step`` is the run's ``RunInfo.on_step`` (worker threads)."""

    def __init__(self, run: RunInfo, consumers: Sequence[Sequence[int]], deps: Sequence[int], push: PushStep) -> None:
        self.run = run
        self.consumers = consumers
        self.left = list(deps)
        self.push = push

    def start(self, roots: Sequence[int]) -> None:
        """Queue the steps that wait for nothing (call once, before any of them can end)."""
        run = self.run
        run.on_step = self.on_step
        run.refcount = len(roots)
        for index in roots:
            self.push(run, run.steps[index])

    def on_step(self, step: Step) -> None:
        """``step`` ended: push each consumer it was the last producer of (before its own ticket lets go, so the
        run's reference count never reaches zero with work still to queue)."""
        run = self.run
        if run.error is not None or run.timed_out or run.cancelled:
            return
        ready: list[int] = []
        with run.lock:
            for consumer in self.consumers[step.index]:
                self.left[consumer] -= 1
                if self.left[consumer] == 0:
                    ready.append(consumer)
            run.refcount += len(ready)
        for index in ready:
            self.push(run, run.steps[index])
