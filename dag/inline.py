"""Small model ops run on the event-loop thread itself, when handing them to a worker costs more than they do.

A device worker pays for every op with thread hand-offs: a condition wake-up, the GIL taken back (with the
loop busy, up to the 5 ms switch interval, several times for torch, which re-acquires the GIL to release
its Python-owned inputs), and a ``call_soon_threadsafe`` back. Measured here under 50 clients, a 64→128→10
MLP that computes in ~14 µs cost ~190 µs of CPU on its worker thread. RedisAI never paid this: it has no GIL.

So a single-op run (AI.MODELEXECUTE, or a one-model DAG) runs inline, on the calling (loop) thread, when:

* its model has been seen to cost at most ``max_us`` microseconds of CPU per run on inputs of the same size
  class (total bytes, to a power of two): the first run of each model and size class always goes to a worker
  and is measured there; inline runs keep the estimate up to date, so a model that grows slow goes back to
  the workers;
* it is on a CPU device, with no auto-batching (BATCHSIZE needs the queue to gather requests), and is a model
  (scripts may call the store, which the loop thread must never wait for);
* its device queue is idle, so ops that do queue are not overtaken by a stream of inline ones.

Inline runs keep everything else as it is: the same RunInfo, results, durations (AI.INFO), TIMEOUT checked
before the op starts, and the queue's INFO counters. ``--inline-op-us 0`` turns it off.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from dag.queues import DeviceQueue
from dag.runinfo import RunInfo, Step
from dag.worker import execute_step

SMOOTHING = 0.2  # weight of the newest observation in a model's cost estimate


class InlinePolicy:
    """Which runs go inline, from each model's observed CPU cost per run (event-loop thread only)."""

    def __init__(self, max_us: int) -> None:
        self.max_us = max_us
        self.inline_runs = 0  # INFO: runs that never left the loop thread
        # model -> {input size class: CPU µs per run}: a model measured on small inputs says nothing of big ones
        self._cost_us: weakref.WeakKeyDictionary[Any, dict[int, float]] = weakref.WeakKeyDictionary()

    def eligible(self, run: RunInfo, queue: DeviceQueue) -> bool:
        if self.max_us <= 0 or len(run.steps) != 1 or queue.items:
            return False
        step = run.steps[0]
        key = _cost_key(step)
        if key is None or step.batch is not None or step.side_effects or not step.device.startswith("CPU"):
            return False
        cost = self._cost_us.get(key, {}).get(_size_class(run, step))
        return cost is not None and cost <= self.max_us

    def observe(self, run: RunInfo) -> None:
        """After a worker ran it: remember what the op of a single-op run cost."""
        if len(run.steps) == 1 and run.results[0].cpu_us > 0:
            self._remember(run, run.steps[0], run.results[0].cpu_us)

    def _remember(self, run: RunInfo, step: Step, cost_us: float) -> None:
        key = _cost_key(step)
        if key is None:
            return
        try:
            costs = self._cost_us.setdefault(key, {})
        except TypeError:  # a model object that cannot be weakly referenced: never inline it
            return
        size = _size_class(run, step)
        previous = costs.get(size)
        costs[size] = cost_us if previous is None else previous + SMOOTHING * (cost_us - previous)

    def run_here(self, run: RunInfo, queue: DeviceQueue) -> None:
        """Run the single step on this thread, recording it exactly as a worker would."""
        step = run.steps[0]
        if run.is_dead(time.monotonic()) or step.work is None:
            return
        elapsed = execute_step(run, step, queue.name)
        self._remember(run, step, elapsed * 1_000_000)  # wall time: on the loop thread nothing else runs meanwhile
        self.inline_runs += 1
        ended = time.perf_counter()
        with queue.cond:
            queue.recent.append((ended - elapsed, ended))
            queue.busy_seconds += elapsed
            queue.executed += 1


def _size_class(run: RunInfo, step: Step) -> int:
    """The inputs' total bytes, rounded up to a power of two: costs are kept per size class."""
    total = sum(getattr(getattr(run.slots[i], "array", None), "nbytes", 0) for i in step.inputs)
    return max(total, 1).bit_length()


def _cost_key(step: Step) -> Any:
    """What the estimate is kept for: the loaded model a model step runs (None for other steps)."""
    return getattr(step.work, "model", None) if step.work is not None and not step.side_effects else None

