"""Concatenating a batch's inputs and splitting its outputs: once, for every backend.

A backend only ever sees one call with the batch's inputs (RedisAI re-implemented this in each backend).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from backends import errors as msgs
from backends.errors import AIError
from backends.tensor import Tensor


def concat_inputs(members: Sequence[Sequence[Tensor]]) -> list[Tensor]:
    """Per input position, the members' tensors stacked along dim 0, in batch order."""
    return [Tensor.from_numpy(np.concatenate([m[i].to_numpy() for m in members], axis=0))
            for i in range(len(members[0]))]


def split_outputs(outputs: Sequence[Tensor], sizes: Sequence[int]) -> list[list[Tensor]]:
    """Each member's rows of every output; an output whose dim 0 is not the batch's total fails them all."""
    total = sum(sizes)
    bounds = np.cumsum([0, *sizes])
    per_member: list[list[Tensor]] = [[] for _ in sizes]
    for output in outputs:
        array = output.to_numpy()
        if array.ndim == 0 or array.shape[0] != total:
            raise AIError(msgs.BATCH_SIZE_MISMATCH_MSG)
        for member, (start, stop) in enumerate(itertools.pairwise(bounds)):
            per_member[member].append(Tensor.from_numpy(array[start:stop]))
    return per_member
