"""RunInfo: one request's shared state, and DeviceTicket: its per-device cursor.

Every execution — a single AI.MODELEXECUTE or a whole DAG — is one RunInfo. It is fanned out as one
ticket per device; all tickets share this object: the tensor slots, the per-op results, the first error,
the timed-out and cancelled flags, the reference count and one lock. Nothing is copied between tickets,
so there are no shallow copies sharing raw state by accident (RedisAI's ``int *dagError``).

Ownership: slots and results are written by worker threads under ``lock``; the event loop reads them
only after ``on_done`` has fired (reference count 0), when no worker touches the run any more.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Final, Protocol

from backends.errors import AIError
from dag.batching import BatchCandidate, BatchPolicy, batch_size_of


class Work(Protocol):
    """What a step does on its worker thread: input slot values in, output slot values out."""

    def __call__(self, inputs: list[Any]) -> list[Any]: ...


class BatchSpec:
    """A model step that may be batched with other requests for the same loaded model.

    ``on_batch`` is told the size of every batch of two or more requests that ran (metrics); it is called on
    the worker thread. Immutable (a plain class, like ``Step`` below).
    """

    __slots__ = ("model", "on_batch", "policy")

    def __init__(self, policy: BatchPolicy, model: Hashable, on_batch: Callable[[int], None] | None = None) -> None:
        self.policy: Final = policy
        self.model: Final = model
        self.on_batch: Final = on_batch


class Step:
    """One op of a run, resolved to slot indices and a device queue.

    ``work`` is None for ops that do nothing on a worker (AI.TENSORSET is done at parse time,
    AI.TENSORGET is answered at reply time) but still wait for their inputs, which keeps a device's
    ticket alive until the other devices have produced what it must return.

    Step, StepResult, RunInfo and DeviceTicket are built for every request: plain classes, not dataclasses (mypyc
    compiles their ``__init__``; a dataclass's generated one runs interpreted).
    """

    __slots__ = ("batch", "device", "index", "inputs", "outputs", "side_effects", "work")

    def __init__(self, index: int, device: str, inputs: tuple[int, ...], outputs: tuple[int, ...],
                 work: Work | None = None, batch: BatchSpec | None = None, side_effects: bool = False) -> None:
        self.index = index
        self.device = device
        self.inputs = inputs
        self.outputs = outputs
        self.work = work
        self.batch = batch
        self.side_effects = side_effects  # a script may call Redis: it keeps its place among its device's ops


class StepResult:
    """How one op ended: ``ok``; ``error`` set when it failed; neither when it never ran (``NA``)."""

    __slots__ = ("cost_class", "cpu_us", "duration_us", "error", "ok")

    def __init__(self) -> None:
        self.ok = False
        self.error: AIError | None = None
        self.duration_us = 0
        self.cpu_us = 0  # CPU time of the op on the thread that ran it (dag/inline.py's cost estimate)
        self.cost_class = 0  # a batched op: the size class of the whole batch's inputs, which cpu_us is the cost of

    def __repr__(self) -> str:
        return f"StepResult(ok={self.ok}, error={self.error!r}, duration_us={self.duration_us})"


class RunInfo:
    """The shared state of one execution (see the module docstring)."""

    __slots__ = (
        "cancelled",
        "deadline",
        "error",
        "host_after",
        "lock",
        "on_done",
        "on_step",
        "refcount",
        "resident",
        "results",
        "slots",
        "steps",
        "timed_out",
        "waiters",
    )

    def __init__(self, steps: list[Step], slots: list[Any], deadline: float | None = None,
                 on_done: Callable[[RunInfo], None] | None = None) -> None:
        self.steps = steps
        self.slots = slots
        self.deadline = deadline  # time.monotonic() value; None = no TIMEOUT
        self.on_done = on_done
        self.results = [StepResult() for _ in steps]
        self.lock = threading.Lock()
        self.refcount = 0
        self.error: AIError | None = None
        self.timed_out = False
        self.cancelled = False
        self.waiters: list[Any] = []  # the DeviceQueues holding this run's tickets
        # a GPU op may have left outputs on its device (dag/residency.py): readers elsewhere bring them over first
        self.resident = False
        # the slots read after the run (a DAG's TENSORGET and PERSIST slots, a graph's outputs): only those of its
        # resident tensors come back to the host when it ends; None: all of them
        self.host_after: frozenset[int] | None = None
        # after each step on a worker: a compiled graph's scheduler (dag/compiled.py) pushes the steps it made
        # ready; None (a DAG): the worker wakes the run's other queues, whose tickets look at their inputs again
        self.on_step: Callable[[Step], None] | None = None

    def is_dead(self, now: float) -> bool:
        """Stop at the next step: an op failed, the deadline passed, or the client went away."""
        if self.error is not None or self.timed_out or self.cancelled:
            return True
        if self.deadline is not None and now > self.deadline:
            self.timed_out = True
            return True
        return False

    def first_failure(self) -> AIError | None:
        """The error of the failed step that comes first in step order: one answer however the devices raced."""
        return next((result.error for result in self.results if result.error is not None), None)

    def ready(self, step: Step) -> bool:
        slots = self.slots
        return all(slots[i] is not None for i in step.inputs)

    def record_success(self, step: Step, outputs: Sequence[Any], duration_us: int) -> None:
        with self.lock:
            for slot, value in zip(step.outputs, outputs, strict=True):
                self.slots[slot] = value
            result = self.results[step.index]
            result.ok, result.duration_us = True, duration_us

    def record_failure(self, step: Step, error: AIError, duration_us: int) -> None:
        with self.lock:
            result = self.results[step.index]
            result.error, result.duration_us = error, duration_us
            if self.error is None:
                self.error = error

    def release(self) -> bool:
        """One ticket let go; True for the last one (the run is finished)."""
        with self.lock:
            self.refcount -= 1
            return self.refcount == 0


class DeviceTicket:
    """A run's ops on one device, in command order, and how far this device got."""

    __slots__ = ("cursor", "device", "enqueued_at", "run", "step_indices")

    def __init__(self, run: RunInfo, device: str, step_indices: list[int]) -> None:
        self.run = run
        self.device = device
        self.step_indices = step_indices
        self.cursor = 0
        self.enqueued_at = time.monotonic()

    @property
    def current(self) -> Step:
        return self.run.steps[self.step_indices[self.cursor]]

    @property
    def finished(self) -> bool:
        return self.cursor >= len(self.step_indices)

    def ready(self) -> bool:
        return self.run.ready(self.current)

    def inputs(self) -> list[Any]:
        run = self.run
        return [run.slots[i] for i in self.current.inputs]

    def batch_candidate(self) -> BatchCandidate | None:
        """What the batching policy needs to know about this (ready) ticket, if its next op can batch."""
        return batch_candidate(self.run, self.current, self.enqueued_at)


def batch_candidate(run: RunInfo, step: Step, enqueued_at: float) -> BatchCandidate | None:
    """What the batching policy needs to know about ``step`` of ``run`` (its inputs ready), if it can batch."""
    spec = step.batch
    if spec is None:
        return None
    slots = run.slots
    tensors = [slots[i] for i in step.inputs]  # backends' Tensor: .dtype a name, .shape a tuple
    signature = tuple((t.dtype, t.shape[1:]) for t in tensors)
    return BatchCandidate(spec.model, signature, batch_size_of([t.shape for t in tensors]), enqueued_at, run.deadline)


def size_class(tensors: Sequence[Any]) -> int:
    """Total bytes of ``tensors``, to a power of two: op costs are kept per size class (dag/inline.py)."""
    return max(sum(getattr(getattr(t, "array", None), "nbytes", 0) for t in tensors), 1).bit_length()


def make_tickets(run: RunInfo, per_step: bool = False) -> list[DeviceTicket]:
    """One ticket per distinct device, in order of first appearance (RedisAI's fan-out); sets the run's
    reference count.

    ``per_step`` (used when a queue has several worker threads): one ticket per step instead, so that
    independent ops on the same device can run at the same time on different threads. Every op still starts
    only once its inputs exist (readiness is per slot), so dependent ops keep their order. A run with a
    script step keeps one ticket per device: scripts can call Redis, and those calls keep their order.
    """
    if per_step and not any(step.side_effects for step in run.steps):
        tickets = [DeviceTicket(run, step.device, [step.index]) for step in run.steps]
    else:
        by_device: dict[str, list[int]] = {}
        for step in run.steps:
            by_device.setdefault(step.device, []).append(step.index)
        tickets = [DeviceTicket(run, device, indices) for device, indices in by_device.items()]
    run.refcount = len(tickets)
    return tickets
