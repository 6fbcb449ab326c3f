"""Per-model cost estimates, held only while the model lives (dag/inline.py's figures per input size class).

Usage: ``table.costs(model)`` (None until ``table.costs_for(model)`` made one) → ``{input size class:
CostEstimate}``; ``estimate.may_run_inline(budget_us)`` says whether the next run goes to the loop thread,
``ran_inline`` / ``ran_on_worker`` tell it what a run cost where it ran.

A ``weakref.WeakKeyDictionary`` did this before; its ``get`` and ``setdefault`` are interpreted stdlib code
that builds a new weak reference per call, and the inline policy asks twice per run. Here the table is keyed
by the object's id, the entry holds a weak reference to check that the id still names the same object, and
the reference's callback drops the entry when the model is freed.
"""

from __future__ import annotations

import weakref
from typing import Any, Final

SMOOTHING: Final = 0.2  # weight of the newest observation in an estimate
SPIKE: Final = 4.0  # one observation raises an estimate to at most this many times it (+ SPIKE_SLACK_US)
SPIKE_SLACK_US: Final = 10.0  # so that an estimate of ~0 µs can still grow
TRY_FACTOR: Final = 4.0  # the leeway of a try (worker figure) and of a run beside a busy worker (its own figure)
RETRY_FIRST: Final = 4  # over budget on the loop thread: tried there again after this many runs on workers,
RETRY_MAX: Final = 1024  # twice as many after each try that did not stay, up to this many


class CostEstimate:
    """What runs of one model (or one compiled graph) on inputs of one size class cost, kept apart by where
    they ran: CPU µs on the loop thread (``inline_us``; < 0 until a run went there) and CPU µs on a worker
    (``worker_us``; < 0 until one ran there).

    Why two figures: a worker's includes the hand-off itself. torch takes the GIL back several times per call,
    and while the loop thread is busy each time waits for it, so a small model costs a worker several times
    what it costs the loop thread; and the first calls of a TorchScript module (its profiling executor's runs)
    cost milliseconds. Judged by the worker's figure, a cheap model that left the loop thread (its first run
    always does) might never come back (docs/bench-log.md, "The inline cliff").

    So the loop thread's own figure decides; the workers' only says whether a try there is worth it (at most
    ``TRY_FACTOR`` x the budget). Where the loop's figure is over budget, a try is made again after
    ``RETRY_FIRST`` runs on the workers, then twice as many after each further try, up to ``RETRY_MAX`` (a
    model's first run on the loop thread costs more: torch sets up the thread).

    A run here while its device's queue is busy (``contended``: tickets wait, or a worker works) is slowed down by
    the worker computing beside it: the GIL, and the core's other hyperthread. Such a run is judged with
    ``TRY_FACTOR`` x the budget and its figure not kept: within it, the model is ``admitted`` - its runs stay here,
    the queue empties, and the first run with the queue idle gives the figure that decides. Without it, a try made
    while a worker drains the model's earlier runs would always fail, and under load that queue is never empty.

    A try's figure replaces the old one; otherwise each run moves the figure by ``SMOOTHING``, by at most
    ``SPIKE`` times upward (a GC pause must not send a cheap model away; a model that really got slower gets
    there in a few runs). A worker's figure drops at once to a cheaper run (a JIT's first calls cost most),
    and rises smoothed. A plain class with ``__slots__``: one per model and size class, asked on every run
    (compiled).
    """

    __slots__ = ("admitted", "inline_us", "retry_after", "since_try", "worker_us")

    def __init__(self) -> None:
        self.inline_us = -1.0
        self.worker_us = -1.0
        self.admitted = False  # a run beside a busy worker was within the leeway: runs stay here for now
        self.since_try = 0  # runs on the workers since the last run on the loop thread
        self.retry_after = RETRY_FIRST // 2  # the worker runs before the next try; each try doubles it

    def may_run_inline(self, budget_us: float) -> bool:
        """Whether the next run goes to the loop thread: its figure there is within ``budget_us`` (or it is
        admitted), or it is time for a try there (never run there, or over budget ``retry_after`` worker runs
        ago) and a worker saw it cost at most ``TRY_FACTOR`` x ``budget_us``."""
        inline_us = self.inline_us
        if self.admitted or 0.0 <= inline_us <= budget_us:
            return True
        worker_us = self.worker_us
        if worker_us < 0.0 or worker_us > TRY_FACTOR * budget_us:
            return False
        return inline_us < 0.0 or self.since_try >= self.retry_after

    def ran_inline(self, cost_us: float, budget_us: float, contended: bool = False) -> None:
        """A run on the loop thread cost ``cost_us`` of its CPU; ``contended``: its device's queue was busy
        (tickets waited, or a worker was working)."""
        tried = self.since_try > 0 and not self.admitted  # runs went to the workers since the last one here
        self.since_try = 0
        if tried:
            self.retry_after = min(2 * self.retry_after, RETRY_MAX)
        if contended and cost_us <= TRY_FACTOR * budget_us:
            self.admitted = True
            return
        if tried or self.admitted or self.inline_us < 0.0:  # fresh evidence replaces a stale figure
            self.inline_us = cost_us
        else:
            self.inline_us = _smoothed(self.inline_us, cost_us)
        self.admitted = False
        if self.inline_us <= budget_us:  # it stays: should it leave later, the first try comes soon
            self.retry_after = RETRY_FIRST

    def ran_on_worker(self, cost_us: float) -> None:
        """A run on a worker cost ``cost_us`` of that thread's CPU."""
        self.since_try += 1
        if self.worker_us < 0.0 or cost_us < self.worker_us:
            self.worker_us = cost_us
        else:
            self.worker_us = _smoothed(self.worker_us, cost_us)

    def __repr__(self) -> str:
        return (f"CostEstimate(inline_us={self.inline_us:.1f}, worker_us={self.worker_us:.1f}, "
                f"admitted={self.admitted}, since_try={self.since_try}, retry_after={self.retry_after})")


def _smoothed(estimate: float, cost_us: float) -> float:
    return estimate + SMOOTHING * (min(cost_us, SPIKE * estimate + SPIKE_SLACK_US) - estimate)


class CostTable:
    """object → {size class: CostEstimate} (see the module docstring)."""

    def __init__(self) -> None:
        self._by_id: dict[int, tuple[weakref.ref[Any], dict[int, CostEstimate]]] = {}

    def costs(self, owner: Any) -> dict[int, CostEstimate] | None:
        """The estimates kept for ``owner``, if any."""
        entry = self._by_id.get(id(owner))
        if entry is None or entry[0]() is not owner:
            return None
        return entry[1]

    def costs_for(self, owner: Any) -> dict[int, CostEstimate]:
        """The estimates kept for ``owner``, made empty when there are none; TypeError when ``owner`` cannot be
        weakly referenced (such an object is never measured)."""
        found = self.costs(owner)
        if found is not None:
            return found
        ident = id(owner)
        found = {}
        self._by_id[ident] = (weakref.ref(owner, lambda ref: self._drop(ident, ref)), found)
        return found

    def _drop(self, ident: int, ref: weakref.ref[Any]) -> None:
        entry = self._by_id.get(ident)
        if entry is not None and entry[0] is ref:  # not a newer object that was given the same id
            del self._by_id[ident]

    def __len__(self) -> int:
        return len(self._by_id)
