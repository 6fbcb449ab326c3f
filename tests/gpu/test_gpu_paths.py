"""The GPU paths on a real GPU (marked ``gpu``; skipped without CUDA): batches stacked in pinned staging on
GPU:0 give the CPU's results, and a DAG mixing GPU:0 and CPU keeps its GPU intermediates on the GPU and still
answers what the CPU answers. The engine is driven in process (dag/ and backends/, no server), so the check
needs nothing but torch with CUDA. Run: ``python -m pytest -m gpu tests/gpu/test_gpu_paths.py``."""

from __future__ import annotations

import io
from functools import partial
from typing import Any

import numpy as np
import pytest
import torch

from backends.base import RuntimeOptions
from backends.device import ResidentTensor, parse_device
from backends.tensor import Tensor
from backends.torch_backend import TorchBackend, TorchModel
from dag.batching import BatchPolicy
from dag.execute import ModelWork
from dag.lanes import gpu_lane
from dag.manager import QueueManager
from dag.runinfo import BatchSpec, RunInfo, Step
from tests.dag_support import submit_and_wait

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (a GPU machine)")]


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) + 1


def _blob() -> bytes:
    torch.manual_seed(0)
    buffer = io.BytesIO()
    torch.jit.save(torch.jit.script(_Net().eval()), buffer)
    return buffer.getvalue()


def _load(device: str) -> TorchModel:
    return TorchBackend().load_model(_blob(), parse_device(device.encode()), RuntimeOptions())




def _inputs(count: int) -> list[Tensor]:
    rng = np.random.default_rng(1)
    return [Tensor.from_numpy(rng.standard_normal((1, 8)).astype(np.float32)) for _ in range(count)]


def test_batches_on_gpu0_answer_what_the_cpu_answers() -> None:
    inputs = _inputs(16)
    results: dict[str, list[Any]] = {}
    for device in ("GPU:0", "CPU"):
        model = _load(device)
        spec = BatchSpec(BatchPolicy(4, minbatchsize=4, minbatchtimeout_ms=2_000), model)
        manager = QueueManager(2)
        runs = [RunInfo([Step(0, device, (0,), (1,), ModelWork(model, 1), spec)], [tensor, None])
                for tensor in inputs]
        try:
            submit_and_wait(manager, runs)
            results[device] = [run.slots[1] for run in runs]
            assert all(run.results[0].ok for run in runs)
            assert manager.queues[device].batched_requests > 0  # they did run in batches
        finally:
            manager.close(10)
    for on_gpu, on_cpu in zip(results["GPU:0"], results["CPU"], strict=True):
        assert type(on_gpu) is Tensor  # back on the host before the run was handed back
        np.testing.assert_allclose(on_gpu.to_numpy(), on_cpu.to_numpy(), rtol=1e-4, atol=1e-5)


class _Spy:
    """A ModelWork's model wrapped to record whether each resident run got its input still on the GPU."""

    def __init__(self, model: TorchModel, seen: list[str]) -> None:
        self.model, self.seen = model, seen
        self.input_names, self.output_names = model.input_names, model.output_names

    def run(self, inputs: list[Any]) -> list[Any]:
        self.seen.append("host")
        return self.model.run(inputs)

    def run_resident(self, values: list[object], device: str) -> list[object]:
        self.seen.append("resident" if isinstance(values[0], ResidentTensor) else "host")
        return self.model.run_resident(values, device)


@pytest.mark.parametrize("keep", [True, False])
def test_a_dag_mixing_gpu0_and_cpu_keeps_gpu_intermediates_and_answers_as_the_cpu(keep: bool) -> None:
    gpu, cpu = _load("GPU:0"), _load("CPU")
    seen: list[str] = []
    spy = _Spy(gpu, seen)
    x = _inputs(1)[0]

    def steps(first: Any, second: Any, third: Any, fourth: Any, devices: tuple[str, ...]) -> list[Step]:
        works = [ModelWork(m, 1) for m in (first, second, third, fourth)]
        return [Step(i, devices[i], (i,), (i + 1,), works[i]) for i in range(4)]

    manager = QueueManager(1, lanes=partial(gpu_lane, keep_resident=keep))
    mixed = RunInfo(steps(spy, spy, cpu, spy, ("GPU:0", "GPU:0", "CPU", "GPU:0")), [x, None, None, None, None])
    reference = RunInfo(steps(cpu, cpu, cpu, cpu, ("CPU",) * 4), [x, None, None, None, None])
    try:
        submit_and_wait(manager, [mixed])
        submit_and_wait(manager, [reference])
    finally:
        manager.close(10)
    assert all(result.ok for result in mixed.results)
    # GPU -> GPU takes the tensor as it is; the CPU op forces a crossing; its output goes up again
    assert seen == (["host", "resident", "host"] if keep else ["host", "host", "host"])
    for got, expected in zip(mixed.slots, reference.slots, strict=True):
        assert type(got) is Tensor
        np.testing.assert_allclose(got.to_numpy(), expected.to_numpy(), rtol=1e-4, atol=1e-5)
