"""The compiled executor's scheduling (dag/compiled.py) on real device queues and worker threads."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from backends.errors import AIError
from dag.compiled import StepCounters
from dag.manager import QueueManager
from dag.runinfo import RunInfo, Step


class Add:
    """A Work adding its inputs (and a constant), recording the order the steps ran in."""

    def __init__(self, name: str, ran: list[str], constant: int = 0, fail: bool = False) -> None:
        self.name, self.ran, self.constant, self.fail = name, ran, constant, fail

    def __call__(self, inputs: list[Any]) -> list[Any]:
        self.ran.append(self.name)
        if self.fail:
            raise AIError(f"{self.name} failed")
        return [sum(inputs) + self.constant]


@pytest.fixture
def manager() -> Iterator[QueueManager]:
    queues = QueueManager(threads_per_queue=1)
    yield queues
    queues.close(5)


def _run(manager: QueueManager, run: RunInfo, consumers: list[tuple[int, ...]], deps: list[int]) -> RunInfo:
    done = threading.Event()
    run.on_done = lambda _run: done.set()
    StepCounters(run, consumers, deps, manager.push_step).start([i for i, count in enumerate(deps) if count == 0])
    assert done.wait(10)
    return run


def test_a_diamond_over_two_devices_runs_each_step_once_its_inputs_exist(manager: QueueManager) -> None:
    ran: list[str] = []
    # slot 0: x; a = x + 1 (CPU); b = x + 2 (CPU:1); y = a + b (CPU)
    steps = [Step(0, "CPU", (0,), (1,), Add("a", ran, 1)), Step(1, "CPU:1", (0,), (2,), Add("b", ran, 2)),
             Step(2, "CPU", (1, 2), (3,), Add("y", ran))]
    run = _run(manager, RunInfo(steps, [10, None, None, None]), [(2,), (2,), ()], [0, 0, 2])
    assert run.slots == [10, 11, 12, 23] and ran[-1] == "y" and sorted(ran) == ["a", "b", "y"]
    assert all(result.ok for result in run.results) and run.refcount == 0


def test_a_chain_runs_in_order(manager: QueueManager) -> None:
    ran: list[str] = []
    steps = [Step(i, "CPU", (i,), (i + 1,), Add(str(i), ran, 1)) for i in range(5)]
    run = _run(manager, RunInfo(steps, [0, *([None] * 5)]), [(1,), (2,), (3,), (4,), ()], [0, 1, 1, 1, 1])
    assert run.slots[-1] == 5 and ran == ["0", "1", "2", "3", "4"]


def test_a_failed_step_stops_its_consumers_and_is_the_first_failure(manager: QueueManager) -> None:
    ran: list[str] = []
    steps = [Step(0, "CPU", (0,), (1,), Add("a", ran, fail=True)), Step(1, "CPU", (1,), (2,), Add("b", ran))]
    run = _run(manager, RunInfo(steps, [1, None, None]), [(1,), ()], [0, 1])
    assert ran == ["a"] and run.results[1].ok is False and run.results[1].error is None
    failure = run.first_failure()
    assert failure is not None and failure.message == "a failed"


def test_a_run_past_its_deadline_queues_nothing_more(manager: QueueManager) -> None:
    ran: list[str] = []
    steps = [Step(0, "CPU", (0,), (1,), Add("a", ran)), Step(1, "CPU", (1,), (2,), Add("b", ran))]
    run = _run(manager, RunInfo(steps, [1, None, None], deadline=0.0), [(1,), ()], [0, 1])
    assert run.timed_out and ran == []
