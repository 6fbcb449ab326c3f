"""Which runs go inline on the loop thread (dag/inline.py), and that they are recorded as a worker would."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from backends.errors import AIError
from backends.tensor import Tensor
from dag.batching import BatchPolicy
from dag.inline import InlinePolicy
from dag.queues import DeviceQueue
from dag.runinfo import BatchSpec, DeviceTicket, RunInfo, Step
from dag.script_work import ScriptWork


class FakeModel:
    """Doubles its input; ``fail`` makes it raise a backend error."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
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
    policy, queue, model = InlinePolicy(200), DeviceQueue("CPU"), FakeModel()
    assert not policy.eligible(_run(model), queue)  # never seen: its first run goes to a worker
    _observed(policy, _run(model), 50)
    assert policy.eligible(_run(model), queue)
    other = FakeModel()
    _observed(policy, _run(other), 5_000)
    assert not policy.eligible(_run(other), queue)


def test_what_never_goes_inline() -> None:
    policy, queue, model = InlinePolicy(200), DeviceQueue("CPU"), FakeModel()
    _observed(policy, _run(model), 10)
    batch = BatchSpec(BatchPolicy(8, 0, 0), "m")
    assert not policy.eligible(_run(model, batch=batch), queue)  # batching needs the queue
    assert not policy.eligible(_run(model, side_effects=True), queue)  # scripts may call the store
    assert not policy.eligible(_run(model, device="GPU:0"), queue)
    assert not policy.eligible(_run(model, steps=2), queue)  # DAGs of several ops keep their fan-out
    assert not InlinePolicy(0).eligible(_run(model), queue)  # --inline-op-us 0
    busy = DeviceQueue("CPU")
    busy.items.append(DeviceTicket(_run(model), "CPU", [0]))
    assert not policy.eligible(_run(model), busy)  # queued ops are not overtaken


def test_a_script_never_goes_inline() -> None:
    """A single AI.SCRIPTEXECUTE is a one-op run without side_effects set; it still never runs on the loop thread,
    where a script that never returns would stop the whole server (only a worker can be abandoned to it)."""
    policy, queue = InlinePolicy(200), DeviceQueue("CPU")
    x = Tensor.from_numpy(np.array([1.0], dtype=np.float32))
    script: Any = object()
    run = RunInfo([Step(0, "CPU", (0,), (1,), ScriptWork(script, "f", entry_point=True, n_outputs=1))], [x, None])
    _observed(policy, run, 1)
    assert not policy.eligible(run, queue)
    assert not policy.graph_eligible(run.steps, [queue], 1.0)


def test_a_model_that_grows_slow_goes_back_to_the_workers() -> None:
    policy, queue, model = InlinePolicy(200), DeviceQueue("CPU"), FakeModel()
    _observed(policy, _run(model), 100)
    for _ in range(20):
        _observed(policy, _run(model), 10_000)
    assert not policy.eligible(_run(model), queue)


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
    policy, queue, model = InlinePolicy(200), DeviceQueue("CPU"), FakeModel()
    _observed(policy, _run(model), 10)
    big = _run(model)
    big.slots[0] = Tensor.from_numpy(np.zeros(100_000, dtype=np.float32))
    assert policy.eligible(_run(model), queue)
    assert not policy.eligible(big, queue)
