"""Concatenating a batch's inputs and splitting its outputs: once, for every backend.

A backend only ever sees one call with the batch's inputs (RedisAI re-implemented this in each backend).
On a GPU queue the rows are stacked straight into a staging buffer the worker's lane gives (pinned host memory
when CUDA is there: one copy into it, then one non-blocking copy to the device); elsewhere numpy allocates
the batch as it always did. Usage::

    batched = concat_inputs(members)                        # CPU queues
    batched = concat_inputs(members, allocate=lane.allocate)  # a GPU queue's worker
    per_member = split_outputs(outputs, [1, 1, 2])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from backends import errors as msgs
from backends.errors import AIError
from backends.tensor import Tensor

# (numpy dtype, shape) -> an empty C-contiguous array of them that the caller may write into
Allocate = Callable[[np.dtype[Any], tuple[int, ...]], npt.NDArray[Any]]


def concat_inputs(members: Sequence[Sequence[Tensor]], allocate: Allocate | None = None) -> list[Tensor]:
    """Per input position, the members' tensors stacked along dim 0, in batch order; into buffers from
    ``allocate`` when given (a GPU lane's pinned staging), else into one numpy allocates (CPU: as always)."""
    if allocate is None:
        return [Tensor.from_numpy(np.concatenate([m[i].to_numpy() for m in members], axis=0))
                for i in range(len(members[0]))]
    return [_stacked(members[0][i].dtype, [m[i].to_numpy() for m in members], allocate)
            for i in range(len(members[0]))]


def stack_rows(arrays: Sequence[npt.NDArray[Any]], allocate: Allocate) -> npt.NDArray[Any]:
    """``arrays`` (one dtype, equal dims after dim 0) concatenated along dim 0 into one buffer of ``allocate``:
    the rows are written once, straight where the device copy reads them. Object (STRING) arrays cannot live
    in a staging buffer: numpy allocates those."""
    first = arrays[0]
    if first.dtype == object:
        return np.concatenate(arrays, axis=0)
    out = allocate(first.dtype, (sum(int(a.shape[0]) for a in arrays), *first.shape[1:]))
    np.concatenate(arrays, axis=0, out=out)
    return out


def _stacked(dtype: str, arrays: list[npt.NDArray[Any]], allocate: Allocate) -> Tensor:
    stacked = stack_rows(arrays, allocate)
    return Tensor(dtype, stacked.shape, stacked)


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
