"""Auto-batched runs gathered on the event-loop thread (dag/inline_batch.py), through the real execute path:
a real event loop, the real device queues and worker threads (dag/manager.py), the real policy."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from backends.errors import AIError
from backends.tensor import Tensor
from dag.batching import BatchPolicy
from dag.inline import InlinePolicy
from dag.manager import QueueManager
from dag.runinfo import BatchSpec, RunInfo, Step, size_class
from server.ai.execution import execute_run


class Doubling:
    """A model step's work: doubles its input along every row (``fail``: a backend error instead)."""

    def __init__(self, fail: bool = False) -> None:
        self.model = self  # what the inline policy keeps its cost estimate for
        self.fail = fail
        self.calls: list[int] = []  # rows of each call

    def __call__(self, inputs: list[Any]) -> list[Any]:
        array = inputs[0].to_numpy()
        self.calls.append(int(array.shape[0]))
        if self.fail:
            raise AIError("ERR broken model")
        return [Tensor.from_numpy(array * 2)]


def _run(work: Doubling, spec: BatchSpec, value: float, width: int = 2, deadline: float | None = None) -> RunInfo:
    x = Tensor.from_numpy(np.full((1, width), value, dtype=np.float32))
    return RunInfo([Step(0, "CPU", (0,), (1,), work, spec)], [x, None], deadline=deadline)


def _teach(policy: InlinePolicy, work: Doubling, spec: BatchSpec, rows: int, cost_us: int = 10) -> None:
    """Tell the policy a batched call of ``rows`` rows of width 2 cost ``cost_us`` (as a worker measures it)."""
    run = _run(work, spec, 0.0)
    run.results[0].cpu_us = cost_us
    run.results[0].cost_class = size_class([Tensor.from_numpy(np.zeros((rows, 2), dtype=np.float32))])
    policy.observe(run)


async def _all(queues: QueueManager, policy: InlinePolicy, runs: list[RunInfo]) -> list[RunInfo]:
    """Execute ``runs`` concurrently: every one reaches the gather in the same loop iteration."""
    return list(await asyncio.gather(*(execute_run(queues, run, policy) for run in runs)))


def _doubled(run: RunInfo) -> list[list[float]]:
    result: list[list[float]] = run.slots[1].to_numpy().tolist()
    return result


def test_runs_of_one_iteration_run_here_as_one_batch(queues: QueueManager) -> None:
    policy, work, spec = InlinePolicy(200), Doubling(), BatchSpec(BatchPolicy(8), "m")
    _teach(policy, work, spec, rows=5)
    queue = queues.queue("CPU")
    runs = [_run(work, spec, float(i)) for i in range(5)]
    asyncio.run(_all(queues, policy, runs))
    assert work.calls == [5]  # one call, on this thread: no worker saw it
    assert [_doubled(run) for run in runs] == [[[2.0 * i, 2.0 * i]] for i in range(5)]
    assert all(run.results[0].ok and run.results[0].duration_us >= 0 for run in runs)
    assert (queue.executed, queue.batched_requests, policy.inline_runs) == (1, 5, 5)


def test_unknown_cost_goes_to_the_workers_which_teach_it(queues: QueueManager) -> None:
    policy, work = InlinePolicy(200), Doubling()
    # MINBATCHSIZE 4: the worker waits for all four, so its batched call is measured on their size class
    spec = BatchSpec(BatchPolicy(8, minbatchsize=4, minbatchtimeout_ms=60_000), "m")
    queue = queues.queue("CPU")
    first = asyncio.run(_all(queues, policy, [_run(work, spec, float(i)) for i in range(4)]))
    assert work.calls == [4] and policy.inline_runs == 0 and queue.batched_requests == 4
    assert first[0].results[0].cost_class == size_class([first[0].slots[0]] * 4)
    again = asyncio.run(_all(queues, policy, [_run(work, spec, float(i)) for i in range(4)]))
    assert work.calls == [4, 4] and policy.inline_runs == 4 and queue.batched_requests == 8
    assert [_doubled(run) for run in again] == [[[2.0 * i, 2.0 * i]] for i in range(4)]


def test_below_minbatchsize_the_workers_wait_for_partners(queues: QueueManager) -> None:
    policy, work = InlinePolicy(200), Doubling()
    spec = BatchSpec(BatchPolicy(8, minbatchsize=4, minbatchtimeout_ms=50), "m")
    _teach(policy, work, spec, rows=2)
    runs = asyncio.run(_all(queues, policy, [_run(work, spec, 1.0), _run(work, spec, 2.0)]))
    assert work.calls == [2] and policy.inline_runs == 0  # run by the worker after MINBATCHTIMEOUT
    assert [_doubled(run) for run in runs] == [[[2.0, 2.0]], [[4.0, 4.0]]]


def test_a_batch_too_dear_for_the_loop_goes_to_the_workers(queues: QueueManager) -> None:
    policy, work, spec = InlinePolicy(200), Doubling(), BatchSpec(BatchPolicy(8), "m")
    _teach(policy, work, spec, rows=3, cost_us=50_000)
    runs = asyncio.run(_all(queues, policy, [_run(work, spec, float(i)) for i in range(3)]))
    assert policy.inline_runs == 0 and sum(work.calls) == 3
    assert [_doubled(run) for run in runs] == [[[2.0 * i, 2.0 * i]] for i in range(3)]


def test_dead_and_abandoned_runs_are_left_out(queues: QueueManager) -> None:
    policy, work, spec = InlinePolicy(200), Doubling(), BatchSpec(BatchPolicy(8), "m")
    _teach(policy, work, spec, rows=2)
    expired = _run(work, spec, 9.0, deadline=time.monotonic() - 1)
    gone = _run(work, spec, 8.0)
    runs = [_run(work, spec, 1.0), expired, gone, _run(work, spec, 2.0)]

    async def scenario() -> list[Any]:
        tasks = [asyncio.ensure_future(execute_run(queues, run, policy)) for run in runs]
        await asyncio.sleep(0)  # every run is held now; the batch runs at the end of the next iteration
        tasks[2].cancel()  # its client went away
        return await asyncio.gather(*tasks, return_exceptions=True)

    outcome = asyncio.run(scenario())
    assert isinstance(outcome[2], asyncio.CancelledError) and gone.cancelled
    assert work.calls == [2]  # the two live runs, together
    assert expired.timed_out and not expired.results[0].ok and expired.slots[1] is None
    assert gone.slots[1] is None
    assert _doubled(runs[0]) == [[2.0, 2.0]] and _doubled(runs[3]) == [[4.0, 4.0]]


def test_a_backend_error_goes_to_every_member(queues: QueueManager) -> None:
    policy, work, spec = InlinePolicy(200), Doubling(fail=True), BatchSpec(BatchPolicy(8), "m")
    _teach(policy, work, spec, rows=3)
    runs = asyncio.run(_all(queues, policy, [_run(work, spec, float(i)) for i in range(3)]))
    assert work.calls == [3]
    assert all(run.error is not None and run.error.message == "ERR broken model" for run in runs)


def test_incompatible_inputs_and_batchsize_make_separate_batches(queues: QueueManager) -> None:
    policy, work, spec = InlinePolicy(200), Doubling(), BatchSpec(BatchPolicy(2), "m")
    for rows in (1, 2):
        _teach(policy, work, spec, rows=rows)
    wide = Tensor.from_numpy(np.zeros((1, 3), dtype=np.float32))
    policy.observe(_observed_run(work, spec, size_class([wide]), 10))
    runs = [_run(work, spec, 1.0), _run(work, spec, 2.0, width=3), _run(work, spec, 3.0), _run(work, spec, 4.0)]
    asyncio.run(_all(queues, policy, runs))
    assert sorted(work.calls) == [1, 1, 2]  # widths 2 and 3 never mix; at most BATCHSIZE 2 rows a call
    assert policy.inline_runs == 4
    assert [_doubled(run)[0][0] for run in runs] == [2.0, 4.0, 6.0, 8.0]


def test_without_inlining_batched_runs_go_to_the_queue(queues: QueueManager) -> None:
    policy, work, spec = InlinePolicy(0), Doubling(), BatchSpec(BatchPolicy(8, 3, 60_000), "m")
    runs = asyncio.run(_all(queues, policy, [_run(work, spec, float(i)) for i in range(3)]))
    assert work.calls == [3] and policy.inline_runs == 0
    assert [_doubled(run) for run in runs] == [[[2.0 * i, 2.0 * i]] for i in range(3)]
    assert queues.queue("CPU").batched_requests == 3


def _observed_run(work: Doubling, spec: BatchSpec, cost_class: int, cost_us: int) -> RunInfo:
    run = _run(work, spec, 0.0)
    run.results[0].cpu_us, run.results[0].cost_class = cost_us, cost_class
    return run
