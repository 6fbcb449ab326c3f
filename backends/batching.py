"""Concatenating a batch's inputs and splitting its outputs: once, for every backend.

A backend only ever sees one call with the batch's inputs (RedisAI re-implemented this in each backend).
"""

from __future__ import annotations

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
    """Each member's rows of every output, as views of it (rows along dim 0 of a C-contiguous array are one);
    an output whose dim 0 is not the batch's total fails them all."""
    total = sum(sizes)
    per_member: list[list[Tensor]] = [[] for _ in sizes]
    for output in outputs:
        array = output.to_numpy()
        if array.ndim == 0 or array.shape[0] != total:
            raise AIError(msgs.BATCH_SIZE_MISMATCH_MSG)
        dtype, rows = output.dtype, array.shape[1:]
        start = 0
        for member, size in zip(per_member, sizes, strict=True):
            member.append(Tensor(dtype, (size, *rows), array[start : start + size]))
            start += size
    return per_member
