"""Several TorchScript models of one stored graph called as one traced function: one call into torch a run,
instead of one a model op with its conversions (server/ai/graph_fusion.py decides when).

Usage::

    fused = fuse([(module, (0,), (1,)), (module, (1,), (2,))], external=(0,), examples=[array], threads=1)
    outputs = fused.run([array])        # numpy in; every op's outputs, op after op, numpy out

The traced function calls each model's own ``forward`` (``prim::CallMethod``): nothing of the models is
re-traced, so their control flow and shapes stay as general as they are; the trace only fixes which model
feeds which. Tracing needs example inputs: the first run's.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from backends import errors as msgs
from backends.errors import AIError
from backends.torch_threads import prepare_run_thread

Part = tuple[torch.jit.ScriptModule, tuple[int, ...], tuple[int, ...]]  # (module, input slots, output slots)


class _Chain(torch.nn.Module):
    """The graph's model calls in run order over a dict of slots; returns every call's outputs, flattened."""

    def __init__(self, parts: Sequence[Part], external: tuple[int, ...]) -> None:
        super().__init__()
        self.models = torch.nn.ModuleList([module for module, _inputs, _outputs in parts])
        self.wiring = [(inputs, outputs) for _module, inputs, outputs in parts]
        self.external = external

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        slots: dict[int, torch.Tensor] = dict(zip(self.external, args, strict=True))
        produced: list[torch.Tensor] = []
        for model, (inputs, outputs) in zip(self.models, self.wiring, strict=True):
            result = model(*[slots[slot] for slot in inputs])
            flat = [result] if isinstance(result, torch.Tensor) else list(result)
            if len(flat) != len(outputs) or not all(isinstance(t, torch.Tensor) for t in flat):
                raise AIError(msgs.MODEL_OUTPUT_COUNT_MSG)
            slots.update(zip(outputs, flat, strict=True))
            produced.extend(flat)
        return tuple(produced)


class FusedTorch:
    """A traced ``_Chain``: ``run`` takes the external inputs (numpy) and gives every op's outputs (numpy)."""

    def __init__(self, traced: Any, threads: int) -> None:
        self._forward = traced.forward  # the method itself: nn.Module.__call__'s hook machinery costs a run ~2 us
        self._threads = threads

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        prepare_run_thread(self._threads)  # autograd off on this thread, as a model's own run
        outputs = self._forward(*[torch.from_numpy(array) for array in inputs])
        return [output.numpy() for output in outputs]


def fuse(parts: Sequence[Part], external: tuple[int, ...], examples: Sequence[np.ndarray],
         threads: int) -> FusedTorch | None:
    """The parts traced as one function on ``examples`` (the external inputs' arrays), or None when tracing
    fails (the graph then runs op by op)."""
    prepare_run_thread(threads)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.jit.trace's deprecation notice, and tracer warnings
            trace: Any = torch.jit.trace  # (untyped in torch's stubs)
            traced = trace(_Chain(parts, external), tuple(torch.from_numpy(a) for a in examples), check_trace=False)
    except Exception:  # a model the tracer cannot follow: run op by op, as before
        return None
    return FusedTorch(traced, threads)
