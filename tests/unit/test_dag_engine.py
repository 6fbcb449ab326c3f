"""The run-info, device queues and worker loop, with plain Python values in the slots (no backends)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from backends.errors import AIError
from dag.manager import QueueManager
from dag.queues import DeviceQueue
from dag.runinfo import DeviceTicket, RunInfo, Step, make_tickets


def _add_one(inputs: list[Any]) -> list[Any]:
    return [inputs[0] + 1]


def _run_and_wait(manager: QueueManager, run: RunInfo, timeout: float = 10.0) -> RunInfo:
    done = threading.Event()
    run.on_done = lambda _run: done.set()
    manager.submit(run)
    assert done.wait(timeout), "the run never finished"
    return run


class _Meet:
    """A step that returns only once every step sharing its barrier is running too: two of them finish only
    if they ran at the same time (a broken barrier is the step's error). No clock involved."""

    def __init__(self, barrier: threading.Barrier) -> None:
        self.barrier = barrier

    def __call__(self, inputs: list[Any]) -> list[Any]:
        self.barrier.wait()
        return [(inputs[0] if inputs else 0) + 1]


class _Slow:
    """A step that sleeps (releasing the GIL like a real kernel) and records when it ran."""

    def __init__(self, seconds: float, log: list[tuple[str, float, float]], name: str) -> None:
        self.seconds, self.log, self.name = seconds, log, name
        self.started = threading.Event()

    def __call__(self, inputs: list[Any]) -> list[Any]:
        self.started.set()
        start = time.monotonic()
        time.sleep(self.seconds)
        self.log.append((self.name, start, time.monotonic()))
        return [(inputs[0] if inputs else 0) + 1]


def test_tickets_one_per_device_in_first_appearance_order() -> None:
    steps = [Step(0, "CPU", (), (0,)), Step(1, "CPU:1", (0,), (1,)), Step(2, "CPU", (1,), ())]
    run = RunInfo(steps, [None, None])
    tickets = make_tickets(run)
    assert [(t.device, t.step_indices) for t in tickets] == [("CPU", [0, 2]), ("CPU:1", [1])]
    assert run.refcount == 2


def test_take_skips_tickets_whose_inputs_are_missing() -> None:
    queue = DeviceQueue("CPU")
    blocked = RunInfo([Step(0, "CPU", (0,), (1,))], [None, None])
    ready = RunInfo([Step(0, "CPU", (0,), (1,))], [41, None])
    queue.items.extend([DeviceTicket(blocked, "CPU", [0]), DeviceTicket(ready, "CPU", [0])])
    tickets, _ = queue.take_locked(time.monotonic())
    assert [t.run for t in tickets] == [ready]
    tickets, wait = queue.take_locked(time.monotonic())
    assert tickets == [] and wait is None  # nothing ready, no deadline: sleep until woken


def test_take_returns_the_deadline_to_wait_for() -> None:
    queue = DeviceQueue("CPU")
    run = RunInfo([Step(0, "CPU", (0,), ())], [None], deadline=time.monotonic() + 5)
    queue.items.append(DeviceTicket(run, "CPU", [0]))
    tickets, wait = queue.take_locked(time.monotonic())
    assert tickets == [] and wait is not None and 4 < wait <= 5.01
    tickets, _ = queue.take_locked(time.monotonic() + 6)
    assert len(tickets) == 1 and tickets[0].run.timed_out


def test_chain_across_two_devices() -> None:
    manager = QueueManager(1)
    steps = [Step(0, "CPU", (0,), (1,), _add_one), Step(1, "CPU:1", (1,), (2,), _add_one),
             Step(2, "CPU", (2,), (3,), _add_one)]
    run = _run_and_wait(manager, RunInfo(steps, [1, None, None, None]))
    assert run.slots == [1, 2, 3, 4]
    assert all(r.ok for r in run.results)
    manager.close(5)


def test_error_stops_the_other_devices_and_reply_waits_for_running_branch() -> None:
    manager = QueueManager(1)
    log: list[tuple[str, float, float]] = []

    long_op = _Slow(0.3, log, "long")

    def fail(inputs: list[Any]) -> list[Any]:
        assert long_op.started.wait(5)  # branch A is running when branch B fails
        raise AIError("ERR boom")

    steps = [Step(0, "CPU:0", (0,), (1,), long_op), Step(1, "CPU:1", (0,), (2,), fail),
             Step(2, "CPU:1", (2,), (3,), _add_one)]
    started = time.monotonic()
    run = _run_and_wait(manager, RunInfo(steps, [0, None, None, None]))
    finished = time.monotonic()
    assert run.error is not None and run.error.message == "ERR boom"
    assert run.results[0].ok and log and finished >= log[0][2]  # answered only after the running op ended
    assert run.results[2].error is None and not run.results[2].ok  # never ran: NA
    assert finished - started >= 0.3
    follow_up = _run_and_wait(manager, RunInfo([Step(0, "CPU:1", (0,), (1,), _add_one)], [5, None]))
    assert follow_up.slots == [5, 6]
    manager.close(5)


def test_timeout_while_waiting_for_a_batch_partner_or_input() -> None:
    manager = QueueManager(1)
    run = RunInfo([Step(0, "CPU", (0,), (1,), _add_one)], [None, None], deadline=time.monotonic() + 0.05)
    _run_and_wait(manager, run)
    assert run.timed_out
    manager.close(5)


def test_two_devices_run_in_parallel() -> None:
    manager = QueueManager(1)
    meet = threading.Barrier(2, timeout=10)
    steps = [Step(0, "CPU:0", (0,), (1,), _Meet(meet)), Step(1, "CPU:1", (0,), (2,), _Meet(meet))]
    run = _run_and_wait(manager, RunInfo(steps, [0, None, None]))
    assert run.error is None and run.slots[1:] == [1, 1]  # both ran, each while the other was running
    manager.close(5)


def test_worker_survives_unexpected_exceptions() -> None:
    manager = QueueManager(1)

    def broken(inputs: list[Any]) -> list[Any]:
        raise ZeroDivisionError("oops")

    run = _run_and_wait(manager, RunInfo([Step(0, "CPU", (0,), (1,), broken)], [1, None]))
    assert run.error is not None and "ZeroDivisionError" in run.error.message
    again = _run_and_wait(manager, RunInfo([Step(0, "CPU", (0,), (1,), _add_one)], [1, None]))
    assert again.slots == [1, 2]
    manager.close(5)


@pytest.mark.parametrize("clients", [50])
def test_many_concurrent_runs_get_their_own_results(clients: int) -> None:
    manager = QueueManager(2)
    runs = []
    events = []
    for value in range(clients):
        steps = [Step(0, "CPU:0", (0,), (1,), _add_one), Step(1, "CPU:1", (1,), (2,), _add_one)]
        run = RunInfo(steps, [value, None, None])
        event = threading.Event()
        run.on_done = lambda _run, e=event: e.set()
        runs.append(run)
        events.append(event)
    for run in runs:
        manager.submit(run)
    assert all(event.wait(10) for event in events)
    assert [run.slots[2] for run in runs] == [value + 2 for value in range(clients)]
    manager.close(5)


def test_independent_ops_on_one_device_run_in_parallel_with_two_threads() -> None:
    manager = QueueManager(2)
    meet = threading.Barrier(2, timeout=10)
    steps = [Step(0, "CPU", (0,), (1,), _Meet(meet)), Step(1, "CPU", (0,), (2,), _Meet(meet)),
             Step(2, "CPU", (1, 2), (3,), lambda inputs: [inputs[0] + inputs[1]])]
    run = _run_and_wait(manager, RunInfo(steps, [0, None, None, None]))
    assert run.error is None  # the two independent ops ran at the same time, on the queue's two threads
    assert run.slots[3] == 2  # the dependent op ran after both, with their outputs
    manager.close(5)
