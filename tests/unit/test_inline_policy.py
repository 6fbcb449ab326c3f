"""Which runs go inline on the loop thread (dag/inline.py), and that they are recorded as a worker would."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from backends.errors import AIError
from backends.tensor import Tensor
from dag.batching import BatchPolicy
from dag.cost_table import CostEstimate
from dag.inline import InlinePolicy
from dag.manager import QueueManager
from dag.queues import DeviceQueue
from dag.runinfo import BatchSpec, RunInfo, Step
from dag.script_work import ScriptWork
from server.ai.execution import execute_run


class FakeModel:
    """Doubles its input; ``fail`` makes it raise a backend error; ``hold``: it waits for that event first."""

    def __init__(self, fail: bool = False, hold: threading.Event | None = None) -> None:
        self.fail = fail
        self.hold = hold

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        if self.hold is not None:
            self.hold.wait(30)
        if self.fail:
            raise AIError("ERR broken model")
        return [inputs[0] * 2]


class Work:
    def __init__(self, model: FakeModel) -> None:
        self.model = model

    def __call__(self, inputs: list[Any]) -> list[Any]:
        return [Tensor.from_numpy(out) for out in self.model.run([t.to_numpy() for t in inputs])]


def _run(model: FakeModel, device: str = "CPU", batch: BatchSpec | None = None, side_effects: bool = False,
         steps: int = 1, deadline: float | None = None) -> RunInfo:
    x = Tensor.from_numpy(np.array([1.0, 2.0], dtype=np.float32))
    all_steps = [Step(i, device, (0,), (1 + i,), Work(model), batch, side_effects) for i in range(steps)]
    return RunInfo(all_steps, [x, *([None] * steps)], deadline=deadline)


def _observed(policy: InlinePolicy, run: RunInfo, cpu_us: int) -> None:
    run.results[0].cpu_us = cpu_us
    policy.observe(run)


def test_a_model_goes_inline_only_once_it_was_seen_to_be_cheap() -> None:
    policy, model = InlinePolicy(200), FakeModel()
    assert not policy.eligible(_run(model))  # never seen: its first run goes to a worker
    _observed(policy, _run(model), 50)
    assert policy.eligible(_run(model))
    other = FakeModel()
    _observed(policy, _run(other), 5_000)
    assert not policy.eligible(_run(other))


def test_what_never_goes_inline() -> None:
    policy, model = InlinePolicy(200), FakeModel()
    _observed(policy, _run(model), 10)
    batch = BatchSpec(BatchPolicy(8, 0, 0), "m")
    assert not policy.eligible(_run(model, batch=batch))  # batching needs the queue
    assert not policy.eligible(_run(model, side_effects=True))  # scripts may call the store
    assert not policy.eligible(_run(model, device="GPU:0"))
    assert not policy.eligible(_run(model, steps=2))  # DAGs of several ops keep their fan-out
    assert not InlinePolicy(0).eligible(_run(model))  # --inline-op-us 0


def test_a_cheap_model_comes_back_from_the_workers_after_its_costly_first_runs() -> None:
    """The cliff: a TorchScript module's first calls cost milliseconds, and a worker's figure includes the GIL
    hand-offs (hundreds of µs under load). Judged by those, a model cheap on the loop thread never came back;
    now a worker figure within 4 x the budget earns it a try here, and its own figure here decides."""
    policy, queue, model = InlinePolicy(200), DeviceQueue("CPU"), FakeModel()
    for cost_us in (63_000, 1_700):  # the profiling executor's runs
        _observed(policy, _run(model), cost_us)
        assert not policy.eligible(_run(model))
    _observed(policy, _run(model), 350)  # over the budget, as a worker measures it: still worth a try
    assert policy.eligible(_run(model))
    tried = _run(model)
    policy.run_here(tried, queue)
    assert tried.results[0].ok and policy.inline_runs == 1


def test_an_eligible_run_overtakes_tickets_queued_for_a_worker() -> None:
    """Waiting for an idle queue made the workers a trap: under load a busy model's queue is never empty. Here the
    CPU worker is held by one run and another waits in its queue; a cheap model's run goes inline all the same."""
    policy, model = InlinePolicy(200), FakeModel()
    _observed(policy, _run(model), 10)
    queues, gate = QueueManager(threads_per_queue=1), threading.Event()
    try:
        queue = queues.queue("CPU")
        queues.submit(_run(FakeModel(hold=gate)))
        assert _until(lambda: not queue.items)  # the worker took it, and holds it
        waiting = _run(FakeModel())
        queues.submit(waiting)
        assert len(queue.items) == 1
        overtaking = _run(model)
        asyncio.run(execute_run(queues, overtaking, policy))
        assert overtaking.results[0].ok and policy.inline_runs == 1
        assert len(queue.items) == 1 and not waiting.results[0].ok  # still queued, not run yet
    finally:
        gate.set()
        queues.close(5)


def _until(condition: Callable[[], bool]) -> bool:
    """Poll ``condition`` for up to 30 s (a worker thread's progress): whether it came true."""
    for _ in range(3000):
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_a_queue_is_busy_while_its_worker_works() -> None:
    """What makes an inline run ``contended``: tickets waiting, or a worker working with none waiting."""
    queues, gate = QueueManager(threads_per_queue=1), threading.Event()
    try:
        queue = queues.queue("CPU")
        assert not queue.busy()
        held = _run(FakeModel(hold=gate))
        queues.submit(held)
        assert _until(lambda: not queue.items)
        assert queue.busy() and queue.running == 1
        gate.set()
        assert _until(lambda: not queue.busy())
        assert held.results[0].ok and queue.running == 0
    finally:
        gate.set()
        queues.close(5)


def test_a_script_never_goes_inline() -> None:
    """A single AI.SCRIPTEXECUTE is a one-op run without side_effects set; it still never runs on the loop thread,
    where a script that never returns would stop the whole server (only a worker can be abandoned to it)."""
    policy = InlinePolicy(200)
    x = Tensor.from_numpy(np.array([1.0], dtype=np.float32))
    script: Any = object()
    run = RunInfo([Step(0, "CPU", (0,), (1,), ScriptWork(script, "f", entry_point=True, n_outputs=1))], [x, None])
    _observed(policy, run, 1)
    assert not policy.eligible(run)
    cheap = CostEstimate()
    cheap.ran_inline(1.0, 200)
    assert not policy.graph_eligible(run.steps, cheap)


def test_a_model_that_grows_slow_goes_back_to_the_workers() -> None:
    policy, model = InlinePolicy(200), FakeModel()
    _observed(policy, _run(model), 100)
    for _ in range(20):
        _observed(policy, _run(model), 10_000)
    assert not policy.eligible(_run(model))


def test_an_inline_run_is_recorded_as_a_worker_records_it() -> None:
    policy, queue = InlinePolicy(200), DeviceQueue("CPU")
    run = _run(FakeModel())
    policy.run_here(run, queue)
    assert run.results[0].ok and run.error is None
    assert run.slots[1] is not None and run.slots[1].to_numpy().tolist() == [2.0, 4.0]
    assert (policy.inline_runs, queue.executed) == (1, 1)
    failing = _run(FakeModel(fail=True))
    policy.run_here(failing, queue)
    assert failing.error is not None and failing.error.message == "ERR broken model"


@pytest.mark.parametrize("deadline", [0.0])
def test_an_inline_run_past_its_deadline_does_not_start(deadline: float) -> None:
    run = _run(FakeModel(), deadline=deadline)
    InlinePolicy(200).run_here(run, DeviceQueue("CPU"))
    assert run.timed_out and run.slots[1] is None


def test_a_model_measured_on_small_inputs_is_not_inlined_on_big_ones() -> None:
    policy, model = InlinePolicy(200), FakeModel()
    _observed(policy, _run(model), 10)
    big = _run(model)
    big.slots[0] = Tensor.from_numpy(np.zeros(100_000, dtype=np.float32))
    assert policy.eligible(_run(model))
    assert not policy.eligible(big)
