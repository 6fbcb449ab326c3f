"""Auto-batching policy, RedisAI's batching rules: which queued requests run together, or how long to wait.

Pure: no threads, no queue, no tensors — only the facts the decision needs (``BatchCandidate``), so it is
unit-tested on its own. The worker calls ``select_batch`` under the queue's lock.

Rules, and where we differ from RedisAI 1.2.7 (on purpose):

* A request's batch size is dim 0 of its inputs when they all agree (and none is 0-d); otherwise 0, and a
  request of size 0 — or of size ≥ BATCHSIZE — runs alone at once.
* Partners must use the same loaded model, the same number of inputs, and per input the same dtype and the
  same dims after dim 0 (RedisAI does not compare dtypes; mixing them would corrupt the batch).
* The batch never exceeds BATCHSIZE: a partner that would overflow is skipped, a smaller one later in the
  queue may still fit (RedisAI adds while the total is below BATCHSIZE and may overshoot).
* Below MINBATCHSIZE the batch waits — for more partners, until MINBATCHTIMEOUT after the *oldest*
  member was queued, and never past the earliest member deadline (its TIMEOUT) — and then runs with what
  it has (RedisAI stops collecting once the timeout expired and runs the first request alone).
* A waiting batch never blocks the queue: the worker goes on with other requests and comes back when
  woken (a new request arrives) or when the wait expires.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Final


class BatchPolicy:
    """A model's BATCHSIZE, MINBATCHSIZE and MINBATCHTIMEOUT (ms).

    This and ``BatchCandidate`` are built for every batchable request: immutable plain classes, because
    mypyc compiles their ``__init__`` where a frozen dataclass's runs interpreted (docs/performance.md).
    """

    __slots__ = ("batchsize", "minbatchsize", "minbatchtimeout_ms")

    def __init__(self, batchsize: int, minbatchsize: int = 0, minbatchtimeout_ms: int = 0) -> None:
        self.batchsize: Final = batchsize
        self.minbatchsize: Final = minbatchsize
        self.minbatchtimeout_ms: Final = minbatchtimeout_ms


class BatchCandidate:
    """What the policy knows about one ready request whose next op is a batchable model op.

    ``model`` identifies the loaded model (requests for a model re-stored meanwhile never mix with the old
    one); ``signature`` is, per input, (dtype, dims after dim 0); ``size`` is the batch size (0 = alone).
    """

    __slots__ = ("deadline", "enqueued_at", "model", "signature", "size")

    def __init__(self, model: Hashable, signature: tuple[tuple[str, tuple[int, ...]], ...], size: int,
                 enqueued_at: float, deadline: float | None = None) -> None:
        self.model: Final = model
        self.signature: Final = signature
        self.size: Final = size
        self.enqueued_at: Final = enqueued_at
        self.deadline: Final = deadline


class RunBatch:
    """Run these candidates (indices into the list given to ``select_batch``) as one model call. A plain class
    (one per batch; a dataclass's ``__init__`` stays interpreted under mypyc) that compares by value."""

    __slots__ = ("members",)

    def __init__(self, members: tuple[int, ...]) -> None:
        self.members: Final = members

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunBatch) and other.members == self.members

    def __hash__(self) -> int:
        return hash(self.members)

    def __repr__(self) -> str:
        return f"RunBatch({self.members!r})"


class WaitForBatch:
    """Not enough partners yet: look again at ``until`` (monotonic seconds) or when woken; None = only when woken."""

    __slots__ = ("until",)

    def __init__(self, until: float | None) -> None:
        self.until: Final = until

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WaitForBatch) and other.until == self.until

    def __hash__(self) -> int:
        return hash(self.until)

    def __repr__(self) -> str:
        return f"WaitForBatch({self.until!r})"


Decision = RunBatch | WaitForBatch


def batch_size_of(shapes: Sequence[tuple[int, ...]]) -> int:
    """dim 0 shared by every input, or 0 (no inputs, a 0-d input, or inputs that disagree)."""
    if not shapes or not shapes[0]:
        return 0
    first = shapes[0][0]
    for shape in shapes:
        if not shape or shape[0] != first:
            return 0
    return first


def compatible(a: BatchCandidate, b: BatchCandidate) -> bool:
    return a.model == b.model and a.signature == b.signature and b.size > 0


def _expiry(policy: BatchPolicy, members: list[BatchCandidate]) -> float | None:
    """When a batch below MINBATCHSIZE runs anyway: MINBATCHTIMEOUT after its oldest member was queued."""
    if policy.minbatchtimeout_ms <= 0:
        return None
    return min(m.enqueued_at for m in members) + policy.minbatchtimeout_ms / 1000


def _wake_at(expiry: float | None, members: list[BatchCandidate]) -> float | None:
    """The worker must look again at the expiry or at the first member deadline (that member then times out)."""
    limits = [m.deadline for m in members if m.deadline is not None]
    if expiry is not None:
        limits.append(expiry)
    return min(limits) if limits else None


def select_batch(policy: BatchPolicy, candidates: Sequence[BatchCandidate], now: float) -> Decision:
    """Decide for ``candidates[0]`` (the request at the head); the others are ready requests behind it, in
    queue order."""
    head = candidates[0]
    if head.size == 0 or head.size >= policy.batchsize:
        return RunBatch((0,))
    members, total = [0], head.size
    for index in range(1, len(candidates)):
        candidate = candidates[index]
        if not compatible(head, candidate) or total + candidate.size > policy.batchsize:
            continue
        members.append(index)
        total += candidate.size
        if total == policy.batchsize:
            break
    if total >= policy.minbatchsize:
        return RunBatch(tuple(members))
    chosen = [candidates[i] for i in members]
    expiry = _expiry(policy, chosen)
    if expiry is not None and now >= expiry:
        return RunBatch(tuple(members))
    return WaitForBatch(_wake_at(expiry, chosen))
