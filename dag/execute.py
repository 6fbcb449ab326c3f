"""What a model step does on its worker: tensors in, backend run, tensors out, output count checked.

On a GPU lane that keeps intermediates (dag/residency.py), ``run_resident`` leaves the outputs on the device.
Usage::

    work = ModelWork(model, n_outputs=1)
    outputs = work([tensor])                 # host Tensors
"""

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

    def can_stay_resident(self) -> bool:
        """The backend can leave this model's outputs on its device (a torch model on a GPU): dag/residency.py."""
        return callable(getattr(self.model, "run_resident", None))

    def run_resident(self, inputs: list[Any], device: str) -> list[Any]:
        """Run with outputs left on ``device`` (``ResidentTensor``s; inputs host ``Tensor``s or resident ones of
        this device); the output count checked as ``__call__`` checks it."""
        model: Any = self.model  # a backend's model beyond the LoadedModel protocol (checked by can_stay_resident)
        outputs: list[Any] = model.run_resident(inputs, device)
        if len(outputs) != self.n_outputs:
            raise AIError(msgs.MODEL_OUTPUT_COUNT_MSG)
        return outputs


def tensor_to_numpy(tensor: Tensor) -> Any:
    return tensor.to_numpy()
