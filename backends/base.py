"""The Backend protocol: what a model runtime (TorchScript, ONNX Runtime, TensorFlow, TFLite) provides.

A backend loads a serialized model for a device and runs it on numpy arrays. Batching (concatenating
requests along dim 0 and splitting the outputs) happens once, above the backends, for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from backends.device import Device


@dataclass(frozen=True, slots=True)
class RuntimeOptions:
    """Settings a backend honours when it loads a model (RedisAI's AI.CONFIG values)."""

    intra_op_threads: int = 1  # per worker thread; 1 unless the user asks for more (docs/configuration.md)
    inter_op_threads: int = 0
    execution_timeout_ms: int = 0  # ONNX MODEL_EXECUTION_TIMEOUT; 0 = none


@dataclass(frozen=True, slots=True)
class GraphNames:
    """The graph nodes a model is fed and fetched by, as given at store time (INPUTS/OUTPUTS).

    Only TF needs them (a GraphDef has no notion of "the" inputs); the other backends name their own."""

    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()


NO_NAMES = GraphNames()


class NamedModel:
    """What every backend's model class reports the same way: its input and output names, fixed at load."""

    def __init__(self, inputs: list[str], outputs: list[str]) -> None:
        self._inputs = inputs
        self._outputs = outputs

    @property
    def input_names(self) -> list[str]:
        return self._inputs

    @property
    def output_names(self) -> list[str]:
        return self._outputs


class LoadedModel(Protocol):
    """A model ready to run on its device. ``run`` is called from device worker threads."""

    @property
    def input_names(self) -> list[str]: ...

    @property
    def output_names(self) -> list[str]: ...

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]: ...


class Backend(Protocol):
    """One model runtime."""

    name: str

    def load_model(self, blob: bytes, device: Device, options: RuntimeOptions,
                   names: GraphNames = NO_NAMES) -> LoadedModel: ...

    def version(self) -> str: ...
