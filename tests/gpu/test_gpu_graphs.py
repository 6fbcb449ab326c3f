"""CUDA graphs and two lanes per GPU queue on a real GPU (marked ``gpu``; skipped without CUDA): replayed runs
answer what eager runs and the CPU answer, for new inputs of a captured shape and for a second shape; a model
that syncs with the host cannot be captured and runs eagerly; a GPU queue runs two lanes by default, and runs
from concurrent clients on them (graphs on and off, a DAG of GPU ops) answer what the CPU answers. The engine
is driven in process (dag/ and backends/). Run: ``python -m pytest -m gpu tests/gpu/test_gpu_graphs.py``."""

from __future__ import annotations

import io
from collections.abc import Callable

import numpy as np
import pytest
import torch

from backends.base import RuntimeOptions
from backends.cuda_graphs import CudaGraphs
from backends.device import ResidentTensor, parse_device
from backends.tensor import Tensor
from backends.torch_backend import TorchBackend, TorchModel
from dag.execute import ModelWork
from dag.manager import QueueManager
from dag.runinfo import RunInfo, Step
from tests.dag_support import submit_and_wait

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (a GPU machine)")]


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Linear(8, 16)
        self.second = torch.nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(x))) + x


class _Syncs(torch.nn.Module):
    """Reads a value on the host in its forward pass: a CUDA graph cannot capture that."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if float(x.sum()) > 0:
            return x * 2
        return x - 1


def _load(make: Callable[[], torch.nn.Module], device: str) -> TorchModel:
    """The module ``make`` builds, with the same weights on every device (seeded before it is built)."""
    torch.manual_seed(0)
    buffer = io.BytesIO()
    torch.jit.save(torch.jit.script(make().eval()), buffer)
    return TorchBackend().load_model(buffer.getvalue(), parse_device(device.encode()), RuntimeOptions())


def _rows(count: int, batch: int = 1, seed: int = 1) -> list[Tensor]:
    rng = np.random.default_rng(seed)
    return [Tensor.from_numpy(rng.standard_normal((batch, 8)).astype(np.float32)) for _ in range(count)]


def _hosted(outputs: list[object]) -> np.ndarray:
    (out,) = outputs
    assert isinstance(out, ResidentTensor)
    return out.host().to_numpy()


def _close(got: np.ndarray, expected: np.ndarray) -> None:
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_replayed_runs_answer_what_eager_runs_and_the_cpu_answer() -> None:
    gpu, cpu = _load(_Net, "GPU:0"), _load(_Net, "CPU")
    graphs = CudaGraphs()
    inputs = _rows(5) + _rows(3, batch=4, seed=2)  # new values of one shape each run, then a second shape
    for tensor in inputs:
        replayed = _hosted(gpu.run_resident([tensor], "GPU:0", graphs))
        eager = _hosted(gpu.run_resident([tensor], "GPU:0"))
        expected = cpu.run([tensor.to_numpy()])[0]
        _close(replayed, expected)
        _close(eager, expected)
    assert (graphs.captured, graphs.failed) == (2, 0)


def test_a_model_that_syncs_with_the_host_runs_eagerly() -> None:
    gpu = _load(_Syncs, "GPU:0")
    graphs = CudaGraphs()
    for tensor in _rows(3):
        got = _hosted(gpu.run_resident([tensor], "GPU:0", graphs))
        x = tensor.to_numpy()
        _close(got, x * 2 if x.sum() > 0 else x - 1)
    assert (graphs.captured, graphs.failed) == (0, 1)




@pytest.mark.parametrize("graphs", [False, True])
def test_two_lanes_answer_concurrent_dags_of_gpu_ops_as_the_cpu(graphs: bool) -> None:
    gpu, cpu = _load(_Net, "GPU:0"), _load(_Net, "CPU")
    manager = QueueManager(1, cuda_graphs=graphs)
    assert manager.threads_for("GPU:0") == 2
    work = ModelWork(gpu, 1)
    runs = [RunInfo([Step(i, "GPU:0", (i,), (i + 1,), work) for i in range(3)], [x, None, None, None])
            for x in _rows(32, seed=5)]
    try:
        submit_and_wait(manager, runs)
    finally:
        manager.close(10)
    for run in runs:
        assert all(result.ok for result in run.results)
        expected = run.slots[0].to_numpy()
        for index in range(3):
            expected = cpu.run([expected])[0]
            got = run.slots[index + 1]
            assert type(got) is Tensor
            _close(got.to_numpy(), expected)
