"""A graph's TorchScript ops as one traced call (server/ai/graph_fusion.py, backends/torch_fusion.py): the same
outputs, records and queue counts as the op-by-op run, and the op-by-op run whenever a model or an input does
not allow the call, with real TorchScript models."""

from __future__ import annotations

import io

import numpy as np
import torch

from backends.base import RuntimeOptions
from backends.device import parse_device
from backends.tensor import Tensor
from backends.torch_backend import TorchBackend, TorchModel
from dag.execute import ModelWork
from dag.inline import InlinePolicy
from dag.queues import DeviceQueue
from dag.runinfo import RunInfo, Step
from server.ai.graph_fusion import GraphFusion
from tests import models


class _AddsOneInPlace(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x * 2


class _Halves(torch.nn.Module):
    """Its two outputs: the input's first and second half along dim 1 (any width)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        half = x.shape[1] // 2
        return x[:, :half], x[:, half:]


def _model(blob: bytes) -> TorchModel:
    return TorchBackend().load_model(blob, parse_device(b"CPU"), RuntimeOptions())


def _scripted(module: torch.nn.Module) -> bytes:
    buffer = io.BytesIO()
    torch.jit.save(torch.jit.script(module), buffer)
    return buffer.getvalue()


def _step(index: int, model: TorchModel, inputs: tuple[int, ...], outputs: tuple[int, ...]) -> Step:
    return Step(index, "CPU", inputs, outputs, ModelWork(model, len(outputs)))


def _diamond() -> list[Step]:
    """x(0) → halves (1, 2); each doubled (3, 4); added (5)."""
    dbl, add = _model(models.torch_double()), _model(models.torch_add())
    halves = _model(_scripted(_Halves()))
    return [_step(0, halves, (0,), (1, 2)), _step(1, dbl, (1,), (3,)), _step(2, dbl, (2,), (4,)),
            _step(3, add, (3, 4), (5,))]


def _run(steps: list[Step], value: Tensor, n_slots: int = 6) -> RunInfo:
    slots: list[object] = [None] * n_slots
    slots[0] = value
    return RunInfo(steps, slots)


def _values(run: RunInfo) -> list[list[float]]:
    return [slot.to_numpy().tolist() for slot in run.slots if isinstance(slot, Tensor)]


def test_a_fused_run_gives_what_the_op_by_op_run_gives_on_inputs_of_any_shape() -> None:
    steps, queues = _diamond(), [DeviceQueue("CPU")] * 4
    fusion, policy = GraphFusion(), InlinePolicy(200)
    for width in (4, 8, 2, 6):  # traced on the first run's (1, 4): the others must not be fixed to it
        value = Tensor.from_numpy(np.arange(2 * width, dtype=np.float32).reshape(2, width))
        fused, by_op = _run(steps, value), _run(steps, value)
        assert fusion.run(steps, queues, fused, policy) is not None
        policy.run_graph_here(by_op, range(len(steps)), queues)
        assert _values(fused) == _values(by_op)
        assert all(result.ok for result in fused.results)
    assert queues[0].executed == 2 * 4 * 4  # a call per op, fused or not


def test_a_model_writing_into_its_input_is_never_fused() -> None:
    steps = [_step(0, _model(_scripted(_AddsOneInPlace())), (0,), (1,))]
    run = _run(steps, Tensor.from_numpy(np.ones((1, 4), np.float32)), 2)
    assert GraphFusion().run(steps, [DeviceQueue("CPU")], run, InlinePolicy(200)) is None
    assert run.slots[1] is None and not run.results[0].ok  # nothing recorded: the caller runs op by op


def test_a_call_that_fails_records_nothing_and_leaves_it_to_the_op_by_op_run() -> None:
    add = _model(models.torch_add())
    steps = [_step(0, add, (0, 1), (2,))]
    fusion, queue = GraphFusion(), DeviceQueue("CPU")
    good = RunInfo(steps, [Tensor.from_numpy(np.ones((1, 4), np.float32))] * 2 + [None])
    assert fusion.run(steps, [queue], good, InlinePolicy(200)) is not None
    bad = RunInfo(steps, [Tensor.from_numpy(np.ones((1, 4), np.float32)),
                          Tensor.from_numpy(np.ones((1, 3), np.float32)), None])  # shapes that do not add
    assert fusion.run(steps, [queue], bad, InlinePolicy(200)) is None
    assert bad.slots[2] is None and bad.error is None and queue.executed == 1


def test_a_string_input_is_left_to_the_op_by_op_run() -> None:
    steps = [_step(0, _model(models.torch_double()), (0,), (1,))]
    run = _run(steps, Tensor.from_numpy(np.array([[b"a", b"b"]], dtype=object)), 2)
    assert GraphFusion().run(steps, [DeviceQueue("CPU")], run, InlinePolicy(200)) is None
