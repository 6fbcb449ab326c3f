"""A COMPILED graph run inline whose every op is a TorchScript model on the CPU: one traced call for all of
them (backends/torch_fusion.py) instead of a call, a conversion and a record per op.

Usage (server/commands/graph_run.py, on the loop thread)::

    cpu_seconds = bound.fusion.run(bound.steps, bound.queues, run, ai.inline)   # None: run op by op

The fused call is made on the first inline run of a binding that can use one (every step a model op whose
model may be called so: ``TorchModel.fusion_part``), traced on that run's inputs, and kept with the binding.
A run it cannot take — a STRING input, a deadline already passed, any error inside the call — records nothing
and returns None: the caller runs the graph op by op, which gives each op's own error in run order. A fused run
records every op as succeeded, each with an equal share of the call's time (AI.INFO ``duration``), and counts
a call per op in its device queue's INFO counters, as the op-by-op run does.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from backends.tensor import Tensor
from dag.execute import ModelWork
from dag.inline import InlinePolicy
from dag.queues import DeviceQueue
from dag.runinfo import RunInfo, Step
from dag.worker import count_call


class GraphFusion:
    """One bound graph's fused call (``run``), made once; nothing when its ops cannot be fused."""

    def __init__(self) -> None:
        self._tried = False
        self._fused: Any = None  # backends.torch_fusion.FusedTorch (torch is imported only for a torch graph)
        self._external: tuple[int, ...] = ()

    def run(self, steps: Sequence[Step], queues: Sequence[DeviceQueue], run: RunInfo,
            inline: InlinePolicy) -> float | None:
        """Run every step in one call and record them; the CPU seconds, or None (nothing recorded)."""
        if (self._tried and self._fused is None) or run.is_dead(time.monotonic()):
            return None
        started, cpu_started = time.perf_counter(), time.thread_time()
        external = self._external if self._tried else _external_slots(steps)
        arrays = [_array(run.slots[slot]) for slot in external]
        if any(array is None or array.dtype == object for array in arrays):
            return None
        if not self._tried:
            self._tried, self._external = True, external
            self._fused = _fuse(steps, external, arrays)
            if self._fused is None:
                return None
        try:
            outputs = [Tensor.from_result(array) for array in self._fused.run(arrays)]
        except Exception:  # the op-by-op run gives the error of the op that fails, in run order
            return None
        _record(steps, queues, run, outputs, time.perf_counter() - started)
        inline.inline_runs += 1
        return time.thread_time() - cpu_started


def _external_slots(steps: Sequence[Step]) -> tuple[int, ...]:
    """The slots the steps read and none of them writes (the graph's inputs and constants), in first-read order."""
    produced = {slot for step in steps for slot in step.outputs}
    return tuple(dict.fromkeys(slot for step in steps for slot in step.inputs if slot not in produced))


def _array(value: Any) -> Any:
    return value.to_numpy() if isinstance(value, Tensor) else None


def _fuse(steps: Sequence[Step], external: tuple[int, ...], arrays: list[Any]) -> Any:
    """The steps' fused call, or None when one of them is not a TorchScript model that may be fused."""
    parts = []
    for step in steps:
        work = step.work
        if not isinstance(work, ModelWork) or step.batch is not None:
            return None
        fusion_part = getattr(work.model, "fusion_part", None)
        part = fusion_part() if fusion_part is not None else None
        if part is None or work.n_outputs != len(step.outputs):
            return None
        parts.append((part, step.inputs, step.outputs))
    if not parts:
        return None
    from backends.torch_fusion import fuse  # a torch model is loaded: torch is there

    return fuse([(module, inputs, outputs) for (module, _threads), inputs, outputs in parts], external, arrays,
                parts[0][0][1])


def _record(steps: Sequence[Step], queues: Sequence[DeviceQueue], run: RunInfo, outputs: list[Tensor],
            seconds: float) -> None:
    """Each step succeeded with its outputs and an equal share of ``seconds``; a call per step in its queue."""
    share = seconds / len(steps)
    at = 0
    for step, queue in zip(steps, queues, strict=True):
        run.record_success(step, outputs[at : at + len(step.outputs)], int(share * 1_000_000))
        at += len(step.outputs)
        count_call(queue, share)
