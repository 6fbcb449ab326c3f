"""What a model step does on its worker: tensors in, backend run, tensors out, output count checked."""

from __future__ import annotations

from typing import Any

from backends import errors as msgs
from backends.base import LoadedModel
from backends.errors import AIError
from backends.tensor import Tensor


class ModelWork:
    """Runs one loaded model on its inputs (a ``Work`` for a model step)."""

    def __init__(self, model: LoadedModel, n_outputs: int) -> None:
        self.model = model
        self.n_outputs = n_outputs

    def __call__(self, inputs: list[Any]) -> list[Any]:
        arrays = [tensor_to_numpy(t) for t in inputs]
        outputs = self.model.run(arrays)
        if len(outputs) != self.n_outputs:
            raise AIError(msgs.MODEL_OUTPUT_COUNT_MSG)
        return [Tensor.from_result(out) for out in outputs]


def tensor_to_numpy(tensor: Tensor) -> Any:
    return tensor.to_numpy()
