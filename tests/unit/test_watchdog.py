"""The run watchdog (dag/watchdog.py) on real worker threads, with works the test holds and releases: no sockets,
no wall-clock thresholds (a deadline only has to pass; every wait is a bound)."""

from __future__ import annotations

import threading
import time
from typing import Any

from dag.manager import QueueManager
from dag.queues import LONGEST_WAIT_S, DeviceQueue
from dag.runinfo import DeviceTicket, RunInfo, Step
from tests.support import wait_until


class Held:
    """A work that returns its input only once the test sets ``release``."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def __call__(self, inputs: list[Any]) -> list[Any]:
        self.release.wait(60)
        return [inputs[0]]


def _run(work: Any, deadline: float | None = None) -> tuple[RunInfo, threading.Event]:
    done = threading.Event()
    run = RunInfo([Step(0, "CPU", (0,), (1,), work)], [1, None], deadline=deadline)
    run.on_done = lambda _run: done.set()
    return run, done


def test_a_step_past_its_deadline_is_given_up_and_a_fresh_worker_serves_the_queue() -> None:
    manager = QueueManager(1)
    held = Held()
    stuck, stuck_done = _run(held, deadline=time.monotonic() + 0.05)
    manager.submit(stuck)
    assert stuck_done.wait(30)  # answered although its step never returned
    assert stuck.timed_out and stuck.error is None
    assert (manager.watchdog.abandoned, manager.watchdog.stuck) == (1, 1)
    after, after_done = _run(lambda inputs: [inputs[0] * 2])
    manager.submit(after)
    assert after_done.wait(30) and after.slots[1] == 2  # the fresh worker ran it
    assert manager.worker_threads() == 2
    held.release.set()
    assert wait_until(lambda: manager.watchdog.stuck == 0 and manager.worker_threads() == 1)
    assert stuck.slots[1] is None and not stuck.results[0].ok  # the late result was dropped
    manager.close(5)


def test_a_step_that_ends_in_time_is_recorded_and_nothing_is_abandoned() -> None:
    manager = QueueManager(1, script_limit_ms=60_000)
    run, done = _run(lambda inputs: [inputs[0] + 1], deadline=time.monotonic() + 60)
    manager.submit(run)
    assert done.wait(30) and run.slots[1] == 2 and not run.timed_out
    assert (manager.watchdog.abandoned, manager.watchdog.stuck) == (0, 0)
    manager.close(5)


def test_the_script_limit_applies_to_scripts_only() -> None:
    from dag.script_work import ScriptWork

    manager = QueueManager(1, script_limit_ms=1)
    model_step = Step(0, "CPU", (0,), (1,), lambda inputs: inputs)
    script_step = Step(0, "CPU", (0,), (1,), ScriptWork(object(), "f", entry_point=True, n_outputs=1))  # type: ignore[arg-type]
    run = RunInfo([model_step], [1, None])
    now = time.monotonic()
    assert manager.watchdog.deadline_for(run, model_step, now) is None
    assert manager.watchdog.deadline_for(run, script_step, now) == now + 0.001
    with_timeout = RunInfo([script_step], [1, None], deadline=now - 1)
    assert manager.watchdog.deadline_for(with_timeout, script_step, now) == now - 1  # the earlier one
    manager.watchdog.script_limit_ms = 0
    assert manager.watchdog.deadline_for(run, script_step, now) is None
    manager.close(5)


def test_a_queue_never_asks_for_a_wait_threading_cannot_make() -> None:
    """A ticket of a run with the longest TIMEOUT (2^63 - 1 ms) that waits for its inputs: the wait is capped."""
    queue = DeviceQueue("CPU")
    run = RunInfo([Step(0, "CPU", (0,), (1,), lambda inputs: inputs)], [None, None],
                  deadline=time.monotonic() + (2**63 - 1) / 1000)
    queue.items.append(DeviceTicket(run, "CPU", [0]))
    with queue.cond:
        tickets, wait = queue.take_locked(time.monotonic())
    assert tickets == [] and wait == LONGEST_WAIT_S < threading.TIMEOUT_MAX
