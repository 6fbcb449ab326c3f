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
* it is on a CPU device, with no auto-batching, and is a model (scripts may call the store, which the loop
  thread must never wait for);
* its device queue is idle, so ops that do queue are not overtaken by a stream of inline ones.

An auto-batched run (a model stored with BATCHSIZE) that would qualify is gathered with the others of the same
loop iteration instead (``batches``, dag/inline_batch.py), and their batch runs here when one call of that
model on the batch's size class was seen to cost at most BATCH_BUDGET x ``max_us``; the first batches of each
class go to a worker, whose batched call is measured (``StepResult.cost_class``).

A compiled stored graph (server/commands/graph_run.py) runs whole on the loop thread, producers first, when
every step is such a model step and the graph's own measured cost (``GraphCosts``, per input size class) is
at most GRAPH_BUDGET x ``max_us``.

Inline runs keep everything else as it is: the same RunInfo, results, durations (AI.INFO), TIMEOUT checked
before the op starts, and the queue's INFO counters. ``--inline-op-us 0`` turns it off.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from dag.cost_table import CostTable
from dag.inline_batch import BatchGather
from dag.queues import DeviceQueue
from dag.runinfo import RunInfo, Step, size_class
from dag.worker import execute_step, run_batch

SMOOTHING = 0.2  # weight of the newest observation in a model's cost estimate
GRAPH_BUDGET = 4  # a compiled graph runs inline while its whole run costs at most this many times max_us
BATCH_BUDGET = 4  # a gathered batch (one call for many requests) runs inline while it costs at most this x max_us


class InlinePolicy:
    """Which runs go inline, from each model's observed CPU cost per run (event-loop thread only)."""

    def __init__(self, max_us: int) -> None:
        self.max_us = max_us
        self.inline_runs = 0  # INFO: runs that never left the loop thread
        # model -> {input size class: CPU µs per run}: a model measured on small inputs says nothing of big ones
        self._cost_us = CostTable()
        self.batches = BatchGather(self.batch_fits, self.run_batch_here)  # auto-batched runs (dag/inline_batch.py)

    def eligible(self, run: RunInfo, queue: DeviceQueue) -> bool:
        if self.max_us <= 0 or len(run.steps) != 1 or not _may_run_here(run.steps[0], queue):
            return False
        step = run.steps[0]
        costs = self._cost_us.costs(_cost_key(step))
        cost = costs.get(_size_class(run, step)) if costs is not None else None
        return cost is not None and cost <= self.max_us

    def batch_eligible(self, run: RunInfo, queue: DeviceQueue) -> bool:
        """A single-op run of an auto-batched model on an idle CPU queue: held for a batch on this thread
        (``batches``, dag/inline_batch.py), which runs it here when its batch fits ``batch_fits``."""
        if self.max_us <= 0 or len(run.steps) != 1:
            return False
        step = run.steps[0]
        return (step.batch is not None and _cost_key(step) is not None and step.device.startswith("CPU")
                and not queue.items)

    def batch_fits(self, runs: Sequence[RunInfo]) -> bool:
        """One call for ``runs`` (a batch of single-op runs of one model) has been seen to cost at most
        BATCH_BUDGET x ``max_us`` on inputs of its size class: a batch serves many requests, so it may take the
        loop thread longer than one op."""
        step = runs[0].steps[0]
        size = size_class([run.slots[i] for run in runs for i in run.steps[0].inputs])
        costs = self._cost_us.costs(_cost_key(step))
        cost = costs.get(size) if costs is not None else None
        return cost is not None and cost <= BATCH_BUDGET * self.max_us

    def run_batch_here(self, runs: Sequence[RunInfo], queue: DeviceQueue) -> None:
        """Run ``runs`` as one batched call on this thread, recorded and counted as a worker would."""
        steps = [run.steps[0] for run in runs]
        elapsed = run_batch(runs, steps, cpu=False)  # no CPU clock read (two syscalls) on the loop thread
        result = runs[0].results[0]
        if result.ok:  # wall time: on the loop thread nothing else runs meanwhile
            self._remember_class(steps[0], result.cost_class, elapsed * 1_000_000)
        self._count(queue, elapsed, batched=len(runs) if len(runs) > 1 else 0)
        spec = steps[0].batch
        if len(runs) > 1 and spec is not None and spec.on_batch is not None:
            spec.on_batch(len(runs))
        self.inline_runs += len(runs)

    def graph_eligible(self, steps: Sequence[Step], queues: Sequence[DeviceQueue], estimate_us: float | None) -> bool:
        """A compiled graph runs whole on the loop thread when every step may (model steps on idle CPU queues,
        no batching, no scripts) and its last runs cost at most GRAPH_BUDGET x ``max_us`` of CPU in all."""
        if self.max_us <= 0 or estimate_us is None or estimate_us > GRAPH_BUDGET * self.max_us:
            return False
        return all(_may_run_here(step, queue) for step, queue in zip(steps, queues, strict=True))

    def run_graph_here(self, run: RunInfo, order: Sequence[int], queues: Sequence[DeviceQueue]) -> float:
        """Run the steps in ``order`` (producers first) on this thread, as ``run_here`` does; the CPU seconds."""
        started = time.thread_time()
        spent: dict[int, list[float]] = {}  # queue → seconds per step: each queue's lock is taken once
        for index in order:
            if run.is_dead(time.monotonic()):
                break
            elapsed = execute_step(run, run.steps[index], queues[index].name, cpu=False)
            spent.setdefault(id(queues[index]), []).append(elapsed)
        for queue in {id(queue): queue for queue in queues}.values():
            if id(queue) in spent:
                self._count(queue, *spent[id(queue)])
        self.inline_runs += 1
        return time.thread_time() - started

    def observe(self, run: RunInfo) -> None:
        """After a worker ran it: remember what the op of a single-op run cost (a batched op: its whole batch,
        on the batch's size class)."""
        if len(run.steps) == 1 and run.results[0].cpu_us > 0:
            result = run.results[0]
            self._remember_class(run.steps[0], result.cost_class or _size_class(run, run.steps[0]), result.cpu_us)

    def _remember(self, run: RunInfo, step: Step, cost_us: float) -> None:
        self._remember_class(step, _size_class(run, step), cost_us)

    def _remember_class(self, step: Step, size: int, cost_us: float) -> None:
        key = _cost_key(step)
        if key is None:
            return
        try:
            costs = self._cost_us.costs_for(key)
        except TypeError:  # a model object that cannot be weakly referenced: never inline it
            return
        previous = costs.get(size)
        costs[size] = cost_us if previous is None else previous + SMOOTHING * (cost_us - previous)

    def run_here(self, run: RunInfo, queue: DeviceQueue) -> None:
        """Run the single step on this thread, recording it exactly as a worker would."""
        step = run.steps[0]
        if run.is_dead(time.monotonic()) or step.work is None:
            return
        # wall time (no thread CPU clock read: two syscalls a run): on the loop thread nothing else runs meanwhile
        elapsed = execute_step(run, step, queue.name, cpu=False)
        self._remember(run, step, elapsed * 1_000_000)
        self._count(queue, elapsed)
        self.inline_runs += 1

    @staticmethod
    def _count(queue: DeviceQueue, *elapsed: float, batched: int = 0) -> None:
        """The queue's INFO counters, as if its worker had run the steps (that took ``elapsed`` seconds each,
        one after the other, ending now; ``batched``: requests that ran in a batch of two or more)."""
        ended = time.perf_counter()
        stamps = []
        for seconds in reversed(elapsed):
            stamps.append((ended - seconds, ended))
            ended -= seconds
        with queue.lock:
            queue.recent.extend(reversed(stamps))
            queue.busy_seconds += sum(elapsed)
            queue.executed += len(elapsed)
            queue.batched_requests += batched


class GraphCosts:
    """The CPU µs one compiled graph's runs cost, by the size class of its inputs (its ``graph_eligible``
    estimate): measured on the workers (the sum of its steps) and on the loop thread alike."""

    def __init__(self) -> None:
        self._cost_us: dict[int, float] = {}

    def estimate(self, size: int) -> float | None:
        return self._cost_us.get(size)

    def observe(self, size: int, cost_us: float) -> None:
        previous = self._cost_us.get(size)
        self._cost_us[size] = cost_us if previous is None else previous + SMOOTHING * (cost_us - previous)


def _may_run_here(step: Step, queue: DeviceQueue) -> bool:
    """A model step (scripts may call the store, which the loop must never wait for) on an idle CPU queue, with
    no auto-batching (BATCHSIZE needs the queue to gather requests)."""
    return (_cost_key(step) is not None and step.batch is None and step.device.startswith("CPU")
            and not queue.items)


def _size_class(run: RunInfo, step: Step) -> int:
    """The inputs' total bytes, rounded up to a power of two: costs are kept per size class."""
    return size_class([run.slots[i] for i in step.inputs])


def _cost_key(step: Step) -> Any:
    """What the estimate is kept for: the loaded model a model step runs (None for other steps)."""
    return getattr(step.work, "model", None) if step.work is not None and not step.side_effects else None

