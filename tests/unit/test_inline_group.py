"""A loop round's inline runs after its first, run back to back at the end of the round (dag/inline_group.py),
through the real execute path: a real event loop, the real device queues (dag/manager.py) and the real policy."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine
from typing import Any

import numpy as np
import pytest

from backends.errors import AIError
from backends.tensor import Tensor
from dag.inline import InlinePolicy
from dag.manager import QueueManager
from dag.runinfo import RunInfo, Step
from server.ai.execution import execute_run


class Tripling:
    """A model step's work: triples its input; records each call's first value, in call order, and the thread
    of each call (``fail``: a backend error instead; ``cpu_ms``: this much of its thread's CPU first)."""

    def __init__(self, fail: bool = False, cpu_ms: float = 0.0) -> None:
        self.model = self  # what the inline policy keeps its cost estimate for
        self.fail = fail
        self.cpu_ms = cpu_ms
        self.calls: list[float] = []
        self.threads: list[int] = []

    def __call__(self, inputs: list[Any]) -> list[Any]:
        spin_until = time.thread_time() + self.cpu_ms / 1000  # CPU time, not the clock: the cost the policy sees
        while time.thread_time() < spin_until:
            pass
        array = inputs[0].to_numpy()
        self.calls.append(float(array[0]))
        self.threads.append(threading.get_ident())
        if self.fail:
            raise AIError("ERR broken model")
        return [Tensor.from_numpy(array * 3)]


def _run(work: Tripling, value: float, deadline: float | None = None) -> RunInfo:
    x = Tensor.from_numpy(np.array([value, 1.0], dtype=np.float32))
    return RunInfo([Step(0, "CPU", (0,), (1,), work)], [x, None], deadline=deadline)


def _cheap(work: Tripling, policy: InlinePolicy | None = None) -> InlinePolicy:
    """A policy (``policy``, else a new one) that has seen ``work``'s model cost 10 µs on a worker: its runs
    go inline (the first is a try there)."""
    policy = policy or InlinePolicy(200)
    seen = _run(work, 0.0)
    seen.results[0].cpu_us = 10
    policy.observe(seen)
    work.calls.clear()
    return policy


def _tripled(run: RunInfo) -> list[float]:
    result: list[float] = run.slots[1].to_numpy().tolist()
    return result


def _finished_without_waiting(coroutine: Coroutine[Any, Any, RunInfo]) -> RunInfo:
    """Drive ``coroutine`` one step: it must end there, never having waited for anything."""
    with pytest.raises(StopIteration) as ended:
        coroutine.send(None)
    finished: RunInfo = ended.value.value
    return finished


def test_the_rounds_later_runs_wait_for_its_end_and_run_one_by_one_in_order(queues: QueueManager) -> None:
    work = Tripling()
    policy = _cheap(work)
    runs = [_run(work, float(i)) for i in range(5)]

    async def one_round() -> tuple[list[float], list[RunInfo]]:
        tasks = [asyncio.ensure_future(execute_run(queues, run, policy)) for run in runs]
        await asyncio.sleep(0)  # every task has reached the policy; only the round's first has run
        ran_in_the_round = list(work.calls)
        return ran_in_the_round, list(await asyncio.gather(*tasks))

    ran_in_the_round, finished = asyncio.run(one_round())
    assert ran_in_the_round == [0.0]
    assert work.calls == [0.0, 1.0, 2.0, 3.0, 4.0]  # one call each, in arrival order: nothing batched
    assert finished == runs
    assert [_tripled(run) for run in runs] == [[3.0 * i, 3.0] for i in range(5)]
    assert all(run.results[0].ok for run in runs)
    queue = queues.queue("CPU")
    assert (policy.inline_runs, queue.executed, queue.batched_requests) == (5, 5, 0)


def test_a_lone_run_runs_at_once_and_a_new_round_starts_afresh(queues: QueueManager) -> None:
    work = Tripling()
    policy = _cheap(work)

    async def two_rounds() -> list[RunInfo]:
        first = _finished_without_waiting(execute_run(queues, _run(work, 1.0), policy))
        await asyncio.sleep(0)  # the round ends
        await asyncio.sleep(0)
        second = _finished_without_waiting(execute_run(queues, _run(work, 2.0), policy))
        return [first, second]

    finished = asyncio.run(two_rounds())
    assert [_tripled(run) for run in finished] == [[3.0, 3.0], [6.0, 3.0]]
    assert work.calls == [1.0, 2.0]


def test_a_held_run_whose_client_went_away_never_runs(queues: QueueManager) -> None:
    work = Tripling()
    policy = _cheap(work)
    runs = [_run(work, float(i)) for i in range(3)]

    async def one_round() -> list[RunInfo | BaseException]:
        tasks = [asyncio.ensure_future(execute_run(queues, run, policy)) for run in runs]
        await asyncio.sleep(0)
        tasks[1].cancel()  # its client is gone
        return list(await asyncio.gather(*tasks, return_exceptions=True))

    finished = asyncio.run(one_round())
    assert isinstance(finished[1], asyncio.CancelledError)
    assert runs[1].cancelled and runs[1].slots[1] is None
    assert work.calls == [0.0, 2.0]
    assert _tripled(runs[2]) == [6.0, 3.0]


def test_a_held_run_past_its_deadline_does_not_start_and_the_others_do(queues: QueueManager) -> None:
    work = Tripling()
    policy = _cheap(work)
    runs = [_run(work, 0.0), _run(work, 1.0, deadline=0.0), _run(work, 2.0)]

    async def one_round() -> list[RunInfo]:
        return list(await asyncio.gather(*(execute_run(queues, run, policy) for run in runs)))

    asyncio.run(one_round())
    assert runs[1].timed_out and runs[1].slots[1] is None
    assert work.calls == [0.0, 2.0]
    assert [_tripled(runs[0]), _tripled(runs[2])] == [[0.0, 3.0], [6.0, 3.0]]


def test_a_held_run_that_fails_fails_alone(queues: QueueManager) -> None:
    good, broken = Tripling(), Tripling(fail=True)
    policy = _cheap(good)
    seen = _run(broken, 0.0)
    seen.results[0].cpu_us = 10
    policy.observe(seen)
    runs = [_run(good, 0.0), _run(broken, 1.0), _run(good, 2.0)]

    async def one_round() -> list[RunInfo]:
        return list(await asyncio.gather(*(execute_run(queues, run, policy) for run in runs)))

    asyncio.run(one_round())
    assert runs[1].error is not None and runs[1].error.message == "ERR broken model"
    assert runs[0].error is None and runs[2].error is None
    assert _tripled(runs[2]) == [6.0, 3.0]


def test_a_round_whose_loop_stopped_before_its_end_does_not_strand_the_next_loops_runs(
        queues: QueueManager) -> None:
    work = Tripling()
    policy = _cheap(work)
    first_loop = asyncio.new_event_loop()

    def lead_and_stop() -> None:
        first_loop.stop()  # the round's end, scheduled next, never runs on this loop
        policy.run_here(_run(work, 1.0), queues.queue("CPU"))
        policy.group.lead()

    first_loop.call_soon(lead_and_stop)
    first_loop.run_forever()
    first_loop.close()
    assert policy.group.forming()  # the stopped loop's round never ended

    async def next_loop() -> RunInfo:
        return await asyncio.wait_for(execute_run(queues, _run(work, 2.0), policy), 30)  # a hang guard only

    finished = asyncio.run(next_loop())
    assert _tripled(finished) == [6.0, 3.0]
    assert work.calls == [1.0, 2.0]
    assert not policy.group.forming()


def test_held_runs_of_a_model_due_a_try_make_one_try_and_the_rest_go_to_the_workers(queues: QueueManager) -> None:
    leader, costly = Tripling(), Tripling(cpu_ms=5.0)  # 5 ms of CPU: far over the 200 µs budget
    policy = _cheap(costly, _cheap(leader))
    runs = [_run(leader, 9.0), *(_run(costly, float(i)) for i in range(4))]

    async def one_round() -> list[RunInfo]:
        return list(await asyncio.gather(*(execute_run(queues, run, policy) for run in runs)))

    loop_thread = threading.get_ident()
    asyncio.run(one_round())
    assert [_tripled(run) for run in runs[1:]] == [[3.0 * i, 3.0] for i in range(4)]
    assert sorted(costly.calls) == [0.0, 1.0, 2.0, 3.0]
    assert costly.threads[0] == loop_thread  # the try, at the round's end
    assert all(thread != loop_thread for thread in costly.threads[1:])  # the rest saw it fail: workers
    assert policy.inline_runs == 2  # the leader and the try
    assert not policy.eligible(_run(costly, 0.0))
