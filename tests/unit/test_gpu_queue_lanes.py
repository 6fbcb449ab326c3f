"""Two lanes per GPU queue (``--gpu-lanes``), tested without a GPU: a CPU queue stands in for the GPU queue
(``laned``), with lanes that record the threads they were bound on. How many threads each queue runs, two runs
in flight on one queue at once (each on its own lane), batches still formed on a two-lane queue, and a real
TorchScript model on CPU lanes answering what torch answers under concurrent clients."""

from __future__ import annotations

import io
import threading
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from backends.base import RuntimeOptions
from backends.device import parse_device
from backends.tensor import Tensor
from backends.torch_backend import TorchBackend, TorchLane
from dag.batching import BatchPolicy
from dag.execute import ModelWork
from dag.lanes import DEFAULT_GPU_LANES, Lane, is_gpu_queue, worker_threads
from dag.manager import QueueManager
from dag.runinfo import BatchSpec, RunInfo, Step
from tests.dag_support import submit_and_wait


class _RecordingLane:
    """A lane on a CPU queue that records the thread it was bound on (plain memory, nothing kept resident)."""

    keep_resident = False
    graphs = None

    def __init__(self) -> None:
        self.thread = ""

    def bind(self) -> None:
        self.thread = threading.current_thread().name

    def allocate(self, dtype: np.dtype[Any], shape: tuple[int, ...]) -> npt.NDArray[Any]:
        return np.empty(shape, dtype=dtype)


class _Lanes:
    """The lane factory: a fresh lane for every worker thread of the stand-in GPU queue ``CPU:1``."""

    def __init__(self) -> None:
        self.opened: list[_RecordingLane] = []
        self.lock = threading.Lock()

    def __call__(self, queue_name: str) -> Lane | None:
        if queue_name != "CPU:1":
            return None
        lane = _RecordingLane()
        with self.lock:
            self.opened.append(lane)
        return lane


def _stand_in(name: str) -> bool:
    return name == "CPU:1"




def test_gpu_queues_run_gpu_lanes_threads_and_cpu_queues_threads_per_queue() -> None:
    assert DEFAULT_GPU_LANES == 2
    assert is_gpu_queue("GPU") and is_gpu_queue("GPU:1") and not is_gpu_queue("CPU")
    assert worker_threads("GPU:0", threads_per_queue=1, gpu_lanes=2) == 2
    assert worker_threads("GPU:0", threads_per_queue=3, gpu_lanes=2) == 3  # never fewer than the other queues
    assert worker_threads("GPU:0", threads_per_queue=1, gpu_lanes=1) == 1  # one lane: the path before lanes
    assert worker_threads("CPU", threads_per_queue=1, gpu_lanes=4) == 1
    manager = QueueManager(1, lanes=_Lanes(), laned=_stand_in)
    try:
        manager.queue("CPU")
        manager.queue("CPU:1")
        assert (manager.threads_for("CPU"), manager.threads_for("CPU:1"), manager.threads_for("GPU:0")) == (1, 2, 1)
        assert manager.worker_threads() == 3
        assert QueueManager(1).threads_for("GPU:0") == 2  # by default, real GPU queues get two lanes
    finally:
        manager.close(5)


def test_two_runs_are_in_flight_on_one_queue_each_on_its_own_lane() -> None:
    """Each run blocks until the other is running too: only a queue with two lanes lets both finish."""
    lanes = _Lanes()
    both_running = threading.Barrier(2, timeout=60)
    ran_on: list[str] = []

    def meets_the_other(inputs: list[Any]) -> list[Any]:
        both_running.wait()
        ran_on.append(threading.current_thread().name)
        return [inputs[0] + 1]

    manager = QueueManager(1, lanes=lanes, laned=_stand_in)
    runs = [RunInfo([Step(0, "CPU:1", (0,), (1,), meets_the_other)], [x, None]) for x in (1, 10)]
    try:
        submit_and_wait(manager, runs)
    finally:
        manager.close(5)
    assert [run.slots[1] for run in runs] == [2, 11] and all(run.results[0].ok for run in runs)
    assert len(lanes.opened) == 2 and sorted(ran_on) == sorted(lane.thread for lane in lanes.opened)


def test_a_two_lane_queue_still_forms_batches() -> None:
    calls: list[int] = []

    def model_rows(inputs: list[Any]) -> list[Any]:
        calls.append(int(inputs[0].shape[0]))
        return [Tensor.from_numpy(inputs[0].to_numpy() * 2)]

    spec = BatchSpec(BatchPolicy(4, minbatchsize=4, minbatchtimeout_ms=600_000), "model")
    manager = QueueManager(1, lanes=_Lanes(), laned=_stand_in)
    runs = [RunInfo([Step(0, "CPU:1", (0,), (1,), model_rows, spec)],
                    [Tensor.from_numpy(np.full((1, 2), i, np.float32)), None]) for i in range(4)]
    try:
        submit_and_wait(manager, runs)
        queue = manager.queues["CPU:1"]
        assert (queue.executed, queue.batched_requests) == (1, 4)
    finally:
        manager.close(5)
    assert calls == [4]
    for i, run in enumerate(runs):
        np.testing.assert_array_equal(run.slots[1].to_numpy(), np.full((1, 2), 2 * i, np.float32))


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(x))


def test_a_torch_model_on_two_cpu_lanes_answers_concurrent_clients_as_torch_does() -> None:
    torch.manual_seed(0)
    net = torch.jit.script(_Net().eval())
    buffer = io.BytesIO()
    torch.jit.save(net, buffer)
    model = TorchBackend().load_model(buffer.getvalue(), parse_device(b"CPU"), RuntimeOptions())
    opened: list[TorchLane] = []

    def torch_lanes(queue_name: str) -> Lane | None:
        lane = TorchLane(torch.device("cpu"))  # a real lane: no stream, plain staging, nothing kept resident
        opened.append(lane)
        return lane

    manager = QueueManager(1, lanes=torch_lanes, laned=lambda name: name == "CPU")
    rng = np.random.default_rng(3)
    per_client = [[rng.standard_normal((1, 8)).astype(np.float32) for _ in range(10)] for _ in range(4)]
    answers: list[list[npt.NDArray[Any]]] = [[] for _ in per_client]

    def client(number: int) -> None:  # one request at a time, each waited for, as a client's pipeline does
        for row in per_client[number]:
            run = RunInfo([Step(0, "CPU", (0,), (1,), ModelWork(model, 1))], [Tensor.from_numpy(row), None])
            submit_and_wait(manager, [run])
            answers[number].append(run.slots[1].to_numpy())

    threads = [threading.Thread(target=client, args=(n,)) for n in range(len(per_client))]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    finally:
        manager.close(5)
    assert len(opened) == 2
    with torch.no_grad():
        for rows, got in zip(per_client, answers, strict=True):
            assert len(got) == len(rows)
            for row, answer in zip(rows, got, strict=True):
                np.testing.assert_allclose(answer, net(torch.from_numpy(row)).numpy(), rtol=1e-6, atol=1e-6)


def test_the_gpu_options_reach_the_queues() -> None:
    """``--gpu-lanes`` and ``--cuda-graphs`` as a server is built from its settings (INFO's threads= with them)."""
    from server.ai.state import AIState
    from server.config import Config

    queues = AIState.from_config(Config(port=0, gpu_lanes=3, cuda_graphs=True, threads_per_queue=1)).queues
    try:
        assert queues.threads_for("GPU:0") == 3 and queues.threads_for("CPU") == 1
        assert getattr(queues.lanes, "keywords", {}).get("cuda_graphs") is True  # the lane factory's
    finally:
        queues.close(timeout=5.0)
