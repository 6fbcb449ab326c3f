"""CUDA graphs' bookkeeping (backends/cuda_graphs.py), tested without a GPU: the signature a graph is kept
under, the bound on signatures per model and lane, capture once then replay, eager runs after a failed capture
or beyond the bound, graphs dropped with their model, and the lane handing its graphs to a model's resident
run. The capture itself is CUDA's (``capture_graph``): here it is refused on CPU tensors, and the run falls back
to eager with the same results; tests/gpu/test_gpu_graphs.py replays real graphs."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
import torch

from backends import errors as msgs
from backends.cuda_graphs import Call, CudaGraphs, GraphTable, capture_graph, signature
from backends.device import ResidentTensor
from backends.errors import AIError
from backends.tensor import Tensor
from backends.torch_backend import TorchLane
from dag.execute import ModelWork
from dag.residency import resident_work
from dag.runinfo import Step


class _Replay:
    """What a capture gave: runs the captured call again, counting replays (CUDA's graph replays the kernels).
    It holds its model weakly, as a CUDA graph holds nothing of it: an entry that held its model would keep it
    alive through the weak-keyed table."""

    def __init__(self, call: Call) -> None:
        self.call = weakref.WeakMethod(call)
        self.replays = 0

    def replay(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        self.replays += 1
        call = self.call()
        assert call is not None
        return call(inputs)


class _Captures:
    """A capture that succeeds (or raises, ``fail``) and keeps what it made."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.made: list[_Replay] = []

    def __call__(self, call: Call, inputs: Sequence[torch.Tensor]) -> _Replay:
        if self.fail:
            raise RuntimeError("operation not permitted when stream is capturing")
        self.made.append(_Replay(call))
        return self.made[-1]


class _Model:
    """Something graphs are kept for (weakly referenced), with its call."""

    def __init__(self) -> None:
        self.eager = 0

    def call(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        self.eager += 1
        return [inputs[0] * 2]


def _x(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.ones(shape, dtype=dtype)


def test_a_signature_is_every_inputs_shape_and_dtype_in_order() -> None:
    assert signature([_x(1, 3), _x(2, dtype=torch.int64)]) == (((1, 3), "torch.float32"), ((2,), "torch.int64"))
    assert signature([_x(1, 3)]) != signature([_x(2, 3)]) != signature([_x(2, 3, dtype=torch.float16)])
    assert signature([_x(1), _x(2)]) != signature([_x(2), _x(1)])


def test_a_table_holds_at_most_its_limit_of_signatures() -> None:
    table: GraphTable[str] = GraphTable(2)
    first, second = signature([_x(1)]), signature([_x(2)])
    table.add(first, "graph")
    table.add(second, None)  # a failed capture takes its place too
    assert not table.has_room() and table.known(second) and table.get(second) is None
    with pytest.raises(ValueError):
        table.add(signature([_x(3)]), "graph")
    roomy: GraphTable[str] = GraphTable(2)
    roomy.add(first, "a")
    with pytest.raises(ValueError):  # a signature is captured once
        roomy.add(first, "b")
    assert table.get(first) == "graph" and roomy.get(first) == "a"


def test_captured_once_per_signature_then_replayed() -> None:
    captures, model = _Captures(), _Model()
    graphs = CudaGraphs(limit=4, capture=captures)
    for _ in range(3):
        (out,) = graphs.run(model, model.call, [_x(1, 3)])
        assert torch.equal(out, _x(1, 3) * 2)
    graphs.run(model, model.call, [_x(2, 3)])
    assert graphs.captured == 2 and [made.replays for made in captures.made] == [3, 1]
    other = _Model()  # another model: graphs of its own, even for the same signature
    graphs.run(other, other.call, [_x(1, 3)])
    assert graphs.captured == 3


def test_beyond_the_limit_a_signature_runs_eagerly_without_a_capture() -> None:
    captures, model = _Captures(), _Model()
    graphs = CudaGraphs(limit=1, capture=captures)
    graphs.run(model, model.call, [_x(1)])
    eager_before = model.eager
    (out,) = graphs.run(model, model.call, [_x(5)])
    assert torch.equal(out, _x(5) * 2) and model.eager == eager_before + 1
    assert graphs.captured == 1 and len(captures.made) == 1


def test_a_failed_capture_runs_eagerly_and_is_never_tried_again() -> None:
    captures, model = _Captures(fail=True), _Model()
    graphs = CudaGraphs(limit=4, capture=captures)
    for _ in range(3):
        (out,) = graphs.run(model, model.call, [_x(2)])
        assert torch.equal(out, _x(2) * 2)
    assert graphs.failed == 1 and graphs.captured == 0 and model.eager == 3


def test_cuda_refuses_a_capture_of_cpu_tensors_and_the_run_is_eager() -> None:
    model = _Model()
    with pytest.raises(ValueError):
        capture_graph(model.call, [_x(1)])
    with pytest.raises(ValueError):
        capture_graph(model.call, [])
    graphs = CudaGraphs()  # the real capture
    (out,) = graphs.run(model, model.call, [_x(3)])
    assert torch.equal(out, _x(3) * 2) and graphs.failed == 1


def test_graphs_go_with_their_model() -> None:
    graphs = CudaGraphs(capture=_Captures())
    model = _Model()
    graphs.run(model, model.call, [_x(1)])
    assert len(graphs.tables) == 1
    del model
    gc.collect()
    assert len(graphs.tables) == 0


def test_a_lane_on_the_cpu_has_no_graphs() -> None:
    assert TorchLane(torch.device("cpu"), cuda_graphs=True).graphs is None


def _to_host(value: object) -> Tensor:
    assert isinstance(value, np.ndarray)
    return Tensor.from_numpy(value)


class _ResidentModel:
    """A model whose resident run records the graphs it was handed."""

    input_names = ["x"]
    output_names = [""]

    def __init__(self, outputs: int = 1) -> None:
        self.outputs = outputs
        self.handed: list[object] = []

    def run(self, inputs: list[Any]) -> list[Any]:
        return inputs

    def run_resident(self, values: list[object], device: str, graphs: object | None = None) -> list[object]:
        self.handed.append(graphs)
        return [ResidentTensor(device, "FLOAT", (1,), np.ones(1, np.float32), _to_host)] * self.outputs


class _GraphLane:
    keep_resident = True

    def __init__(self, graphs: object | None) -> None:
        self.graphs = graphs

    def bind(self) -> None:
        return None

    def allocate(self, dtype: np.dtype[Any], shape: tuple[int, ...]) -> Any:
        return np.empty(shape, dtype=dtype)


def test_a_lane_hands_its_graphs_to_the_models_resident_run() -> None:
    model, graphs = _ResidentModel(), CudaGraphs()
    step = Step(0, "GPU:0", (0,), (1,), ModelWork(model, 1))
    with_graphs, without = resident_work(step, _GraphLane(graphs)), resident_work(step, _GraphLane(None))
    assert with_graphs is not None and without is not None
    assert len(with_graphs([Tensor.from_numpy(np.ones(1, np.float32))])) == 1
    without([Tensor.from_numpy(np.ones(1, np.float32))])
    assert model.handed == [graphs, None]
    wrong = resident_work(Step(0, "GPU:0", (0,), (1,), ModelWork(_ResidentModel(outputs=2), 1)), _GraphLane(graphs))
    assert wrong is not None
    with pytest.raises(AIError, match=msgs.MODEL_OUTPUT_COUNT_MSG):
        wrong([Tensor.from_numpy(np.ones(1, np.float32))])
