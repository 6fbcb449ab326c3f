"""CUDA graphs for TORCH models on a GPU lane (``--cuda-graphs``): capture a run once per model and input
signature, replay it after.

Why: a small model at batch 1 is bound by kernel launches (each a few microseconds of CPU under the GIL); a
replayed graph launches the whole forward pass at once. Each lane (one worker thread, one CUDA stream) keeps
its own graphs, with their own static input and output buffers, so two lanes never write one buffer. A run
copies its inputs into the static inputs, replays on the lane's stream and clones the static outputs (the next
replay overwrites them, and a resident output may outlive it). The first run of a signature warms the model up
on a side stream, then captures it; a capture that fails (a model that syncs with the host, or changes its
control flow) marks that signature eager for good. At most ``limit`` signatures per model and lane are kept
(captured or failed); beyond them a run is eager. Graphs are dropped with their model (a weak key).
Usage::

    graphs = CudaGraphs()                                  # one per lane
    outputs = graphs.run(model, model_call, device_inputs) # replayed, captured now, or eager
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Final, Generic, Protocol, TypeVar

import torch

log = logging.getLogger("redisai.worker")

# per input: its shape and dtype; a graph replays only inputs of exactly this signature
Signature = tuple[tuple[tuple[int, ...], str], ...]
Call = Callable[[Sequence[torch.Tensor]], list[torch.Tensor]]

DEFAULT_SIGNATURES: Final = 8  # input signatures captured per model and lane (each holds its buffers and pool)
WARMUP_RUNS: Final = 3  # eager runs before the capture (TorchScript's profiling executor settles in these)

Entry = TypeVar("Entry")


def signature(tensors: Sequence[torch.Tensor]) -> Signature:
    """The key a graph is captured under: every input's shape and dtype, in order."""
    return tuple((tuple(int(d) for d in t.shape), str(t.dtype)) for t in tensors)


class GraphTable(Generic[Entry]):
    """One model's graphs on one lane, by input signature: an entry, or None (its capture failed: eager for
    good). Bounded: once ``limit`` signatures are known, a new one is not captured (``has_room``)."""

    __slots__ = ("entries", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.entries: dict[Signature, Entry | None] = {}

    def has_room(self) -> bool:
        return len(self.entries) < self.limit

    def known(self, key: Signature) -> bool:
        return key in self.entries

    def get(self, key: Signature) -> Entry | None:
        return self.entries.get(key)

    def add(self, key: Signature, entry: Entry | None) -> None:
        if key in self.entries or not self.has_room():
            raise ValueError("a graph table holds each signature once, and at most its limit")
        self.entries[key] = entry


class CapturedGraph:
    """A captured run: the graph, and the static buffers it reads and writes."""

    __slots__ = ("graph", "inputs", "outputs")

    def __init__(self, graph: torch.cuda.CUDAGraph, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> None:
        self.graph: Final = graph
        self.inputs: Final = inputs
        self.outputs: Final = outputs

    def replay(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Inputs into the static buffers, the graph, fresh copies of the outputs: all on the current stream."""
        for static, given in zip(self.inputs, inputs, strict=True):
            static.copy_(given, non_blocking=True)
        self.graph.replay()
        return [output.clone() for output in self.outputs]


class Replayable(Protocol):
    """What a capture gives (``CapturedGraph``): it runs the captured call on inputs of its signature."""

    def replay(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]: ...


Capture = Callable[[Call, Sequence[torch.Tensor]], Replayable]


def capture_graph(call: Call, inputs: Sequence[torch.Tensor]) -> CapturedGraph:
    """``call`` on copies of ``inputs`` (all on one CUDA device) warmed up on a side stream of its own, then
    captured on that stream (never torch's one default capture stream, which every lane would share) in
    ``thread_local`` mode (the other lanes' threads keep running meanwhile). Raises when it cannot be."""
    if not inputs or any(t.device.type != "cuda" for t in inputs):
        raise ValueError("a CUDA graph needs inputs on a CUDA device")
    device = inputs[0].device
    with torch.cuda.device(device):
        stream = torch.cuda.current_stream(device)
        static = [t.clone() for t in inputs]
        side = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]  # torch leaves it untyped
        side.wait_stream(stream)
        with torch.cuda.stream(side):
            for _ in range(WARMUP_RUNS):
                call(static)
        stream.wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"):
            outputs = call(static)
    return CapturedGraph(graph, static, outputs)


class CudaGraphs:
    """One lane's graphs, per model (weakly: a model dropped drops its graphs; a capture must not hold its
    model) and input signature."""

    def __init__(self, limit: int = DEFAULT_SIGNATURES, capture: Capture = capture_graph) -> None:
        self.limit = limit
        self.capture = capture
        self.tables: weakref.WeakKeyDictionary[object, GraphTable[Replayable]] = (
            weakref.WeakKeyDictionary())
        self.captured = 0  # captures made, and failed, on this lane
        self.failed = 0

    def run(self, model: object, call: Call, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """``call(inputs)``'s outputs: by replaying ``model``'s graph of this signature, by capturing it now
        (room left), or eagerly (no room, or the capture failed once)."""
        table = self.tables.get(model)
        if table is None:
            table = GraphTable(self.limit)
            self.tables[model] = table
        key = signature(inputs)
        if not table.known(key):
            if not table.has_room():
                return call(inputs)
            table.add(key, self._capture(call, inputs))
        entry = table.get(key)
        return call(inputs) if entry is None else entry.replay(inputs)

    def _capture(self, call: Call, inputs: Sequence[torch.Tensor]) -> Replayable | None:
        try:
            captured = self.capture(call, inputs)
        except Exception:
            log.warning("could not capture a CUDA graph for inputs %s; they run eagerly", signature(inputs),
                        exc_info=True)
            self.failed += 1
            return None
        self.captured += 1
        return captured
