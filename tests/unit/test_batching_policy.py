"""The auto-batching policy as a pure function: sizes, caps, compatibility, waiting, deadlines."""

from __future__ import annotations

import numpy as np
import pytest

from backends.batching import concat_inputs, split_outputs
from backends.errors import AIError
from backends.tensor import Tensor
from dag.batching import BatchCandidate, BatchPolicy, RunBatch, WaitForBatch, batch_size_of, select_batch

SIG = (("FLOAT", (2,)),)


def cand(size: int, model: str = "m", signature: tuple[tuple[str, tuple[int, ...]], ...] = SIG,
         at: float = 0.0, deadline: float | None = None) -> BatchCandidate:
    return BatchCandidate(model, signature, size, at, deadline)


def test_batch_size_of() -> None:
    assert batch_size_of([(3, 2), (3, 5)]) == 3
    assert batch_size_of([(3, 2), (4, 2)]) == 0
    assert batch_size_of([(3, 2), ()]) == 0
    assert batch_size_of([]) == 0


@pytest.mark.parametrize("size", [0, 8, 9])
def test_alone_when_size_zero_or_at_least_batchsize(size: int) -> None:
    assert select_batch(BatchPolicy(8, 4, 0), [cand(size), cand(1)], 0.0) == RunBatch((0,))


def test_collects_compatible_partners_in_queue_order_up_to_batchsize() -> None:
    queue = [cand(2), cand(2, model="other"), cand(1, signature=(("FLOAT", (3,)),)), cand(1, signature=(("INT32", (2,)),)),
             cand(3), cand(2), cand(1)]
    decision = select_batch(BatchPolicy(6), queue, 0.0)
    assert decision == RunBatch((0, 4, 6))  # 2 + 3 = 5; the 2 would overflow 6 and is skipped; the 1 fits


def test_stops_at_exactly_batchsize() -> None:
    assert select_batch(BatchPolicy(4), [cand(2), cand(2), cand(1)], 0.0) == RunBatch((0, 1))


def test_without_minbatchsize_runs_with_what_is_there() -> None:
    assert select_batch(BatchPolicy(8), [cand(1)], 0.0) == RunBatch((0,))


def test_waits_below_minbatchsize_until_its_timeout() -> None:
    policy = BatchPolicy(8, minbatchsize=4, minbatchtimeout_ms=200)
    queue = [cand(1, at=10.0), cand(1, at=10.05)]
    assert select_batch(policy, queue, 10.1) == WaitForBatch(10.2)
    assert select_batch(policy, queue, 10.2) == RunBatch((0, 1))


def test_waits_forever_without_minbatchtimeout_but_wakes_for_a_deadline() -> None:
    assert select_batch(BatchPolicy(8, minbatchsize=4), [cand(1)], 5.0) == WaitForBatch(None)
    decision = select_batch(BatchPolicy(8, 4, 1000), [cand(1, at=0.0, deadline=0.3), cand(1, deadline=0.2)], 0.1)
    assert decision == WaitForBatch(0.2)


def test_reaching_minbatchsize_runs_at_once() -> None:
    policy = BatchPolicy(8, minbatchsize=4, minbatchtimeout_ms=10_000)
    assert select_batch(policy, [cand(2), cand(1), cand(1)], 0.0) == RunBatch((0, 1, 2))


def test_concat_and_split_once_for_all_backends() -> None:
    a = [Tensor.from_numpy(np.array([[1.0, 2.0]], dtype=np.float32))]
    b = [Tensor.from_numpy(np.array([[3.0, 4.0], [5.0, 6.0]], dtype=np.float32))]
    (merged,) = concat_inputs([a, b])
    assert merged.shape == (3, 2)
    parts = split_outputs([merged], [1, 2])
    assert parts[0][0].to_numpy().tolist() == [[1.0, 2.0]]
    assert parts[1][0].to_numpy().tolist() == [[3.0, 4.0], [5.0, 6.0]]
    with pytest.raises(AIError, match="Model did not generate the expected batch size"):
        split_outputs([merged], [1, 1])
