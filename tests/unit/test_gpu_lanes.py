"""The GPU path's machinery, tested without a GPU: batches stacked into a lane's staging buffer and split back,
the lanes each worker thread opens (none for CPU queues), and intermediates kept in backend form between ops
of one device (dag/residency.py) with a fake lane and model on CPU queues. Results never change."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import torch

from backends.batching import concat_inputs, split_outputs, stack_rows
from backends.device import ResidentTensor
from backends.tensor import Tensor, string_tensor
from backends.torch_backend import TorchLane, open_lane
from dag.batching import BatchPolicy
from dag.execute import ModelWork
from dag.lanes import Lane, gpu_lane, no_lane
from dag.manager import QueueManager
from dag.mangle import resolve
from dag.ops import DagOp, TensorGetOp, TensorSetOp
from dag.residency import dag_reads, finish_run, resident_work, settle_run
from dag.runinfo import BatchSpec, RunInfo, Step

CUDA = torch.cuda.is_available()


class _Buffers:
    """An ``allocate`` that remembers the buffers it gave (plain memory, as a lane without CUDA gives)."""

    def __init__(self) -> None:
        self.given: list[npt.NDArray[Any]] = []

    def __call__(self, dtype: np.dtype[Any], shape: tuple[int, ...]) -> npt.NDArray[Any]:
        buffer = np.empty(shape, dtype=dtype)
        self.given.append(buffer)
        return buffer


class _FakeLane:
    """A lane on a CPU queue: its own staging buffers, the thread it was bound on, and whether it keeps
    outputs resident."""

    def __init__(self, keep_resident: bool = True, graphs: object | None = None) -> None:
        self.keep_resident = keep_resident
        self.graphs = graphs
        self.buffers = _Buffers()
        self.bound_on: list[str] = []

    def bind(self) -> None:
        self.bound_on.append(threading.current_thread().name)

    def allocate(self, dtype: np.dtype[Any], shape: tuple[int, ...]) -> npt.NDArray[Any]:
        return self.buffers(dtype, shape)


class _Hosts:
    """Counts the copies of resident values to the host."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, value: object) -> Tensor:
        self.count += 1
        assert isinstance(value, np.ndarray)
        return Tensor.from_numpy(value)


class _PlusOne:
    """A model whose backend can keep its outputs "on the device": here a numpy array in a ResidentTensor.
    It records the kinds of the inputs it was given."""

    input_names = ["x"]
    output_names = [""]

    def __init__(self, hosts: _Hosts) -> None:
        self.hosts = hosts
        self.seen: list[str] = []

    def run(self, inputs: list[npt.NDArray[Any]]) -> list[npt.NDArray[Any]]:
        self.seen.append("host")
        return [inputs[0] + 1]

    def run_resident(self, values: list[object], device: str) -> list[object]:
        value = values[0]
        if isinstance(value, ResidentTensor):
            assert value.device == device  # the engine never hands over another device's tensor
            self.seen.append("resident")
            array = value.value
            assert isinstance(array, np.ndarray)
        else:
            assert isinstance(value, Tensor)
            self.seen.append("host")
            array = value.to_numpy()
        out = array + 1
        return [ResidentTensor(device, "FLOAT", out.shape, out, self.hosts)]


def _run_and_wait(manager: QueueManager, run: RunInfo) -> RunInfo:
    done = threading.Event()
    run.on_done = lambda _run: done.set()
    manager.submit(run)
    assert done.wait(10), "the run never finished"
    return run


def _tensor(values: list[list[float]]) -> Tensor:
    return Tensor.from_numpy(np.array(values, dtype=np.float32))


# --- stacking and splitting ---------------------------------------------------------------------------------


def test_rows_are_stacked_straight_into_the_given_buffer() -> None:
    members = [[_tensor([[1, 2]]), Tensor.from_numpy(np.array([[7]], dtype=np.int64))],
               [_tensor([[3, 4], [5, 6]]), Tensor.from_numpy(np.array([[8], [9]], dtype=np.int64))]]
    buffers = _Buffers()
    stacked = concat_inputs(members, allocate=buffers)
    plain = concat_inputs(members)
    assert [(t.dtype, t.shape) for t in stacked] == [(t.dtype, t.shape) for t in plain] == [
        ("FLOAT", (3, 2)), ("INT64", (3, 1))]
    for mine, theirs, buffer in zip(stacked, plain, buffers.given, strict=True):
        np.testing.assert_array_equal(mine.to_numpy(), theirs.to_numpy())
        assert mine.to_numpy() is buffer  # no second copy: the buffer is the batch


def test_string_rows_are_not_staged() -> None:
    buffers = _Buffers()
    stacked = stack_rows([string_tensor([b"a"], (1,)).to_numpy(), string_tensor([b"b", b"c"], (2,)).to_numpy()],
                         buffers)
    assert stacked.tolist() == [b"a", b"b", b"c"] and buffers.given == []


def test_split_gives_each_member_its_rows_as_views() -> None:
    output = _tensor([[1, 1], [2, 2], [3, 3]])
    first, second = split_outputs([output], [1, 2])
    assert first[0].shape == (1, 2) and second[0].shape == (2, 2)
    np.testing.assert_array_equal(second[0].to_numpy(), [[2, 2], [3, 3]])
    assert np.shares_memory(second[0].to_numpy(), output.to_numpy())


def test_a_torch_lane_on_the_cpu_has_no_stream_and_plain_buffers() -> None:
    lane = TorchLane(torch.device("cpu"))
    assert lane.stream is None and not lane.pin and not lane.keep_resident
    lane.bind()  # nothing to make current
    buffer = lane.allocate(np.dtype("<f4"), (2, 3, 4))
    assert buffer.shape == (2, 3, 4) and buffer.dtype == np.float32 and buffer.flags.c_contiguous
    buffer[:] = 1.5  # writable memory that outlives the torch tensor it came from
    members = [[_tensor([[1, 2]])], [_tensor([[3, 4]])]]
    np.testing.assert_array_equal(concat_inputs(members, allocate=lane.allocate)[0].to_numpy(), [[1, 2], [3, 4]])


# --- lanes per worker thread ----------------------------------------------------------------------------------


def test_cpu_queues_get_no_lane() -> None:
    assert gpu_lane("CPU") is None and gpu_lane("CPU:1") is None and no_lane("GPU:0") is None


@pytest.mark.skipif(CUDA, reason="checks the machine without CUDA")
def test_without_cuda_a_gpu_queue_gets_no_lane() -> None:
    from backends.device import parse_device

    assert gpu_lane("GPU:0") is None and open_lane(parse_device(b"GPU:0")) is None


def test_each_worker_thread_opens_and_binds_its_own_lane() -> None:
    opened: list[tuple[str, str]] = []
    lanes: list[_FakeLane] = []

    def factory(queue_name: str) -> Lane | None:
        opened.append((queue_name, threading.current_thread().name))
        if queue_name != "CPU:1":
            return None
        lane = _FakeLane()
        lanes.append(lane)
        return lane

    manager = QueueManager(2, lanes=factory)
    try:
        manager.queue("CPU")
        manager.queue("CPU:1")
        run = RunInfo([Step(0, "CPU:1", (0,), (1,), lambda inputs: [inputs[0] + 1])], [1, None])
        assert _run_and_wait(manager, run).slots[1] == 2  # the lane of a plain work changes nothing
    finally:
        manager.close(5)
    assert sorted(name for name, _thread in opened) == ["CPU", "CPU", "CPU:1", "CPU:1"]
    assert all(thread.startswith(f"worker-{name}-") for name, thread in opened)  # on the worker's own thread
    assert sorted(lane.bound_on[0] for lane in lanes) == sorted(t for n, t in opened if n == "CPU:1")


def test_a_lane_that_fails_to_open_leaves_the_plain_path() -> None:
    def broken(queue_name: str) -> Lane | None:
        raise RuntimeError("no device")

    manager = QueueManager(1, lanes=broken)
    try:
        run = RunInfo([Step(0, "CPU", (0,), (1,), lambda inputs: [inputs[0] * 3])], [2, None])
        assert _run_and_wait(manager, run).slots[1] == 6
    finally:
        manager.close(5)


def test_a_batch_on_a_lane_is_stacked_into_its_buffers_with_the_same_results() -> None:
    hosts = _Hosts()
    lane = _FakeLane(keep_resident=False)
    manager = QueueManager(1, lanes=lambda name: lane)
    model = _PlusOne(hosts)
    spec = BatchSpec(BatchPolicy(4, minbatchsize=2, minbatchtimeout_ms=60_000), model)
    finished: list[RunInfo] = []
    both = threading.Event()

    def on_done(run: RunInfo) -> None:
        finished.append(run)
        if len(finished) == 2:
            both.set()

    runs = []
    try:
        for row in ([[1.0, 2.0]], [[3.0, 4.0], [5.0, 6.0]]):
            run = RunInfo([Step(0, "CPU", (0,), (1,), ModelWork(model, 1), spec)], [_tensor(row), None],
                          on_done=on_done)
            runs.append(run)
            manager.submit(run)
        assert both.wait(10), "the batch never ran"
    finally:
        manager.close(5)
    assert [r.results[0].ok for r in runs] == [True, True]
    np.testing.assert_array_equal(runs[0].slots[1].to_numpy(), [[2, 3]])
    np.testing.assert_array_equal(runs[1].slots[1].to_numpy(), [[4, 5], [6, 7]])
    assert model.seen == ["host"] and len(lane.buffers.given) == 1  # one call, inputs in the lane's buffer
    assert lane.buffers.given[0].shape == (3, 2)


# --- intermediates kept in backend form between same-device ops ------------------------------------------------


def test_intermediates_stay_resident_between_ops_of_one_device_and_cross_once() -> None:
    hosts = _Hosts()
    model = _PlusOne(hosts)
    lane = _FakeLane()
    # CPU keeps outputs resident (its fake lane); CPU:1 has no lane: the plain path, host tensors only
    manager = QueueManager(1, lanes=lambda name: lane if name == "CPU" else None)
    steps = [Step(0, "CPU", (0,), (1,), ModelWork(model, 1)),    # x -> a (resident)
             Step(1, "CPU", (1,), (2,), ModelWork(model, 1)),    # a -> b (takes a as it is; b resident)
             Step(2, "CPU:1", (2,), (3,), ModelWork(model, 1))]  # b -> c (another device: b crosses)
    try:
        run = _run_and_wait(manager, RunInfo(steps, [_tensor([[1.0]]), None, None, None]))
    finally:
        manager.close(5)
    assert [r.ok for r in run.results] == [True, True, True]
    assert model.seen == ["host", "resident", "host"]
    assert all(type(slot) is Tensor for slot in run.slots)  # what the loop reads: host tensors, as before
    assert [float(slot.to_numpy()[0, 0]) for slot in run.slots] == [1.0, 2.0, 3.0, 4.0]
    assert hosts.count == 2 and not run.resident  # b once for CPU:1, a once at the end; never twice


def test_without_a_lane_nothing_is_resident() -> None:
    model = _PlusOne(_Hosts())
    manager = QueueManager(1, lanes=no_lane)
    steps = [Step(0, "CPU", (0,), (1,), ModelWork(model, 1)), Step(1, "CPU", (1,), (2,), ModelWork(model, 1))]
    try:
        run = _run_and_wait(manager, RunInfo(steps, [_tensor([[1.0]]), None, None]))
    finally:
        manager.close(5)
    assert model.seen == ["host", "host"] and not run.resident
    assert float(run.slots[2].to_numpy()[0, 0]) == 3.0


def test_only_model_works_of_resident_capable_backends_on_keeping_lanes_stay() -> None:
    model = _PlusOne(_Hosts())
    step = Step(0, "GPU:0", (0,), (1,), ModelWork(model, 1))
    assert resident_work(step, None) is None
    assert resident_work(step, _FakeLane(keep_resident=False)) is None
    assert resident_work(Step(0, "GPU:0", (0,), (1,), lambda inputs: inputs), _FakeLane()) is None
    plain: Any = type("Plain", (), {"run": lambda self, inputs: inputs, "input_names": [], "output_names": [""]})()
    assert resident_work(Step(0, "GPU:0", (0,), (1,), ModelWork(plain, 1)), _FakeLane()) is None
    assert resident_work(step, _FakeLane()) is not None


def test_a_finished_run_brings_over_only_the_slots_read_after_it() -> None:
    hosts = _Hosts()
    kept = ResidentTensor("GPU:0", "FLOAT", (3, 1), np.ones((3, 1), np.float32), hosts)
    read = ResidentTensor("GPU:0", "FLOAT", (1,), np.full(1, 2, np.float32), hosts)
    run = RunInfo([], [kept, read])
    run.resident = True
    finish_run(run, needed={1})
    assert run.slots[0] is kept and kept.shape == (3, 1)  # never copied; its shape still answers AI.INFO's samples
    assert type(run.slots[1]) is Tensor and float(run.slots[1].to_numpy()[0]) == 2.0
    assert hosts.count == 1 and not run.resident


def test_a_dags_reads_after_its_run_are_its_tensorgets_and_persists() -> None:
    ops: list[DagOp] = [TensorSetOp(b"a", None), TensorSetOp(b"b", None), TensorGetOp(b"a", None),
                        TensorSetOp(b"a", None)]
    resolved = resolve([b"x"], ops, [b"b"])  # slots: x 0, a 1, b 2, the second a 3
    assert dag_reads(ops, resolved) == {1, 2}
    assert dag_reads([], resolve([b"x"], [], [])) == frozenset()


def test_finishing_a_run_brings_every_resident_slot_to_the_host_before_on_done() -> None:
    hosts = _Hosts()
    seen: list[object] = []

    def broken(value: object) -> Tensor:
        raise RuntimeError("device lost")

    run = RunInfo([], [ResidentTensor("GPU:0", "FLOAT", (1,), np.ones(1, np.float32), hosts),
                       ResidentTensor("GPU:0", "FLOAT", (1,), np.ones(1, np.float32), broken), 5],
                  on_done=lambda finished: seen.extend(finished.slots))
    run.resident = True
    finish_run(run)
    assert type(seen[0]) is Tensor and seen[1] is None and seen[2] == 5 and hosts.count == 1
    settle_run(run)  # nothing left to bring
    assert hosts.count == 1
