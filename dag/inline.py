"""Small model ops run on the event-loop thread itself, when handing them to a worker costs more than they do.

A device worker pays for every op with thread hand-offs: a condition wake-up, the GIL taken back (with the
loop busy, up to the 5 ms switch interval, several times for torch, which re-acquires the GIL to release
its Python-owned inputs), and a ``call_soon_threadsafe`` back: for a small model, many times what its
compute costs (docs/bench-log.md, "The inline cliff"). RedisAI never paid this: it has no GIL.

So a single-op run (AI.MODELEXECUTE, or a one-model DAG) runs inline, on the calling (loop) thread, when:

* its model has been seen to cost at most ``max_us`` microseconds per run on this thread, on inputs of the
  same size class (total bytes, to a power of two), or it is time to try it here (dag/cost_table.py
  ``CostEstimate``): the first run of each model and size class always goes to a worker and is measured
  there, and a model a worker saw cost at most 4 x ``max_us`` (the hand-off included) is then tried here;
  inline runs keep their own figure up to date, so a model that grows slow goes back to the workers, and is
  tried here again after a while;
* it is on a CPU device, with no auto-batching, and is a model (scripts may call the store, which the loop
  thread must never wait for).

It may overtake tickets queued for a worker (other clients' runs: a client's own commands run one after the
other). It does not wait for an idle queue: under load the queue of a model on the workers is never
empty, so none of its runs would ever come back.

An auto-batched run (a model stored with BATCHSIZE) on an idle CPU queue is gathered with the others of the
same loop iteration instead (``batches``, dag/inline_batch.py), and their batch runs here when one call of
that model on the batch's size class was seen to cost at most BATCH_BUDGET x ``max_us`` here (or is due a
try, as above); the first batches of each class go to a worker, whose batched call is measured
(``StepResult.cost_class``).

A compiled stored graph (server/commands/graph_run.py) runs whole on the loop thread, producers first, when
every step is such a model step and the graph's own cost (``GraphCosts``, per input size class) is at most
GRAPH_BUDGET x ``max_us`` here (or is due a try).

The inline runs that reach this thread in one loop round after its first wait for the end of the round and
run there one after the other (``group``, dag/inline_group.py): torch's code stays in the caches.

Inline runs keep everything else as it is: the same RunInfo, results, durations (AI.INFO), TIMEOUT checked
before the op starts, and the queue's INFO counters. ``--inline-op-us 0`` turns it off.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Final

from dag.cost_table import CostEstimate, CostTable
from dag.inline_batch import BatchGather
from dag.inline_group import RoundGroup
from dag.queues import DeviceQueue
from dag.runinfo import RunInfo, Step, size_class
from dag.worker import count_call, execute_step, run_batch

GRAPH_BUDGET: Final = 4  # a compiled graph runs inline while its whole run costs at most this many times max_us
# a gathered batch (one call for many requests) runs inline while it costs at most this x max_us
BATCH_BUDGET: Final = 4

# time's functions as module constants: compiled, a call of ``time.x()`` looks ``x`` up on the module each time
_monotonic: Final = time.monotonic
_perf_counter: Final = time.perf_counter
_thread_time: Final = time.thread_time


class InlinePolicy:
    """Which runs go inline, from each model's observed cost per run (event-loop thread only)."""

    def __init__(self, max_us: int) -> None:
        self.max_us = max_us
        self.inline_runs = 0  # INFO: runs that never left the loop thread
        # model -> {input size class: its costs}: a model measured on small inputs says nothing of big ones
        self._cost_us = CostTable()
        self.batches = BatchGather(self.batch_fits, self.run_batch_here)  # auto-batched runs (dag/inline_batch.py)
        self.group = RoundGroup(self.eligible, self.run_here)  # a round's later inline runs (dag/inline_group.py)

    def eligible(self, run: RunInfo) -> bool:
        if self.max_us <= 0 or len(run.steps) != 1 or not _may_run_here(run.steps[0]):
            return False
        step = run.steps[0]
        costs = self._cost_us.costs(_cost_key(step))
        estimate = costs.get(_size_class(run, step)) if costs is not None else None
        return estimate is not None and estimate.may_run_inline(self.max_us)

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
        BATCH_BUDGET x ``max_us`` here on inputs of its size class, or is due a try: a batch serves many
        requests, so it may take the loop thread longer than one op."""
        step = runs[0].steps[0]
        size = size_class([run.slots[i] for run in runs for i in run.steps[0].inputs])
        costs = self._cost_us.costs(_cost_key(step))
        estimate = costs.get(size) if costs is not None else None
        return estimate is not None and estimate.may_run_inline(BATCH_BUDGET * self.max_us)

    def run_batch_here(self, runs: Sequence[RunInfo], queue: DeviceQueue) -> None:
        """Run ``runs`` as one batched call on this thread, recorded and counted as a worker would."""
        steps = [run.steps[0] for run in runs]
        elapsed = run_batch(runs, steps)  # this thread's CPU time is the cost (see run_here)
        result = runs[0].results[0]
        estimate = self._estimate(steps[0], result.cost_class) if result.ok else None
        if estimate is not None:  # gathered only while the queue was empty: never contended
            estimate.ran_inline(result.cpu_us, BATCH_BUDGET * self.max_us)
        self._count(queue, elapsed, batched=len(runs) if len(runs) > 1 else 0)
        spec = steps[0].batch
        if len(runs) > 1 and spec is not None and spec.on_batch is not None:
            spec.on_batch(len(runs))
        self.inline_runs += len(runs)

    def graph_eligible(self, steps: Sequence[Step], estimate: CostEstimate | None) -> bool:
        """A compiled graph runs whole on the loop thread when every step may (model steps on CPU queues, no
        batching, no scripts) and its runs cost at most GRAPH_BUDGET x ``max_us`` of CPU in all here, or are
        due a try (``estimate``: the graph's, for its inputs' size class)."""
        if self.max_us <= 0 or estimate is None or not estimate.may_run_inline(self.graph_budget_us):
            return False
        return all(_may_run_here(step) for step in steps)

    @property
    def graph_budget_us(self) -> float:
        return GRAPH_BUDGET * self.max_us

    def run_graph_here(self, run: RunInfo, order: Sequence[int], queues: Sequence[DeviceQueue]) -> float:
        """Run the steps in ``order`` (producers first) on this thread, as ``run_here`` does; the CPU seconds.
        (Whether a queue held tickets meanwhile, the caller asks ``contended`` first.)"""
        started = _thread_time()
        spent: dict[int, list[float]] = {}  # queue → seconds per step: each queue's lock is taken once
        for index in order:
            if run.is_dead(_monotonic()):
                break
            elapsed = execute_step(run, run.steps[index], queues[index].name, cpu=False)
            spent.setdefault(id(queues[index]), []).append(elapsed)
        for queue in {id(queue): queue for queue in queues}.values():
            if id(queue) in spent:
                self._count(queue, *spent[id(queue)])
        self.inline_runs += 1
        return _thread_time() - started

    def observe(self, run: RunInfo) -> None:
        """After a worker ran it: remember what the op of a single-op run cost (a batched op: its whole batch,
        on the batch's size class)."""
        if len(run.steps) == 1 and run.results[0].cpu_us > 0:
            result = run.results[0]
            estimate = self._estimate(run.steps[0], result.cost_class or _size_class(run, run.steps[0]))
            if estimate is not None:
                estimate.ran_on_worker(result.cpu_us)

    def _estimate(self, step: Step, size: int) -> CostEstimate | None:
        """The estimate of ``step``'s model on inputs of class ``size``, made on first use (None: not a model
        step, or a model that cannot be weakly referenced, which is never measured)."""
        key = _cost_key(step)
        if key is None:
            return None
        try:
            costs = self._cost_us.costs_for(key)
        except TypeError:
            return None
        estimate = costs.get(size)
        if estimate is None:
            estimate = costs[size] = CostEstimate()
        return estimate

    def run_here(self, run: RunInfo, queue: DeviceQueue) -> None:
        """Run the single step on this thread, recording it exactly as a worker would."""
        step = run.steps[0]
        if run.is_dead(_monotonic()) or step.work is None:
            return
        # the cost is this thread's CPU time, not wall time: while a worker computes beside it (a model coming
        # back from the workers) torch waits here for the GIL at every op, which wall time would count as the
        # model's; a preempted run on a busy machine is no spike either
        contended = queue.busy()
        elapsed = execute_step(run, step, queue.name)
        estimate = self._estimate(step, _size_class(run, step))
        if estimate is not None:
            estimate.ran_inline(run.results[0].cpu_us, self.max_us, contended)
        count_call(queue, elapsed)  # not _count: one step needs none of its tuples and loops
        self.inline_runs += 1

    @staticmethod
    def _count(queue: DeviceQueue, *elapsed: float, batched: int = 0) -> None:
        """The queue's INFO counters, as if its worker had run the steps (that took ``elapsed`` seconds each,
        one after the other, ending now; ``batched``: requests that ran in a batch of two or more)."""
        ended = _perf_counter()
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
    estimate): on the workers (the sum of its steps) and on the loop thread, kept apart (``CostEstimate``)."""

    def __init__(self) -> None:
        self._by_size: dict[int, CostEstimate] = {}

    def estimate(self, size: int) -> CostEstimate | None:
        return self._by_size.get(size)

    def estimate_for(self, size: int) -> CostEstimate:
        """The estimate for inputs of class ``size``, made on first use."""
        estimate = self._by_size.get(size)
        if estimate is None:
            estimate = self._by_size[size] = CostEstimate()
        return estimate


def _may_run_here(step: Step) -> bool:
    """A model step (scripts may call the store, which the loop must never wait for) on a CPU queue, with no
    auto-batching (BATCHSIZE needs the queue to gather requests)."""
    return _cost_key(step) is not None and step.batch is None and step.device.startswith("CPU")


def _size_class(run: RunInfo, step: Step) -> int:
    """The inputs' total bytes, rounded up to a power of two: costs are kept per size class."""
    return size_class([run.slots[i] for i in step.inputs])


def _cost_key(step: Step) -> Any:
    """What the estimate is kept for: the loaded model a model step runs (None for other steps)."""
    return getattr(step.work, "model", None) if step.work is not None and not step.side_effects else None

