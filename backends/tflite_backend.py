"""TFLITE models: a ``.tflite`` flatbuffer in a LiteRT interpreter (ai-edge-litert, or tflite-runtime).

As RedisAI's libtflite_c does: inputs and outputs are the model's own (their names are stored), an input of
another shape resizes the interpreter's input and reallocates its tensors, an input of another dtype is
refused, and the texts of its errors are kept. An interpreter is not thread-safe: each model has a lock,
held for a whole run (set inputs, invoke, read outputs). The runtime is imported only when this module is,
i.e. on the first TFLITE model or ``AI.CONFIG LOADBACKEND TFLITE`` (backends/registry.py).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import threading
from types import ModuleType
from typing import Any

import numpy as np

from backends import errors as msgs
from backends.base import NO_NAMES, GraphNames, NamedModel, RuntimeOptions
from backends.device import Device
from backends.errors import AIError, one_line

RUNTIMES = (("ai_edge_litert.interpreter", "ai-edge-litert"), ("tflite_runtime.interpreter", "tflite-runtime"))
# The dtypes RedisAI's TFLite backend copies in and out (tflite_c.cpp); float16 has its own message there.
_SUPPORTED = frozenset(np.dtype(t) for t in ("uint8", "int64", "int32", "int16", "int8", "float32", "bool"))


def import_runtime() -> tuple[ModuleType, str]:
    """The first installed LiteRT interpreter module, and its distribution's version."""
    for module_name, distribution in RUNTIMES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        return module, importlib.metadata.version(distribution)
    raise ImportError("neither ai-edge-litert nor tflite-runtime is installed")


_RUNTIME, _VERSION = import_runtime()


def check_input_type(array: np.ndarray, expected: np.dtype[Any]) -> None:
    """RedisAI's checks before it copies an input in: a dtype it copies, and exactly the model's."""
    if expected not in _SUPPORTED:
        raise AIError(msgs.TFLITE_HALF_INPUT_MSG if expected == np.float16 else msgs.TFLITE_INPUT_DTYPE_MSG)
    if array.dtype != expected:
        raise AIError(msgs.TFLITE_INPUT_TYPE_MSG)


def check_output_type(dtype: np.dtype[Any]) -> None:
    if dtype not in _SUPPORTED:
        raise AIError(msgs.TFLITE_HALF_OUTPUT_MSG if dtype == np.float16 else msgs.TFLITE_OUTPUT_DTYPE_MSG)


class TfliteModel(NamedModel):
    """One interpreter, run by one worker thread at a time."""

    def __init__(self, interpreter: Any) -> None:
        inputs, outputs = interpreter.get_input_details(), interpreter.get_output_details()
        super().__init__([str(d["name"]) for d in inputs], [str(d["name"]) for d in outputs])
        self._interpreter = interpreter
        self._lock = threading.Lock()
        self._input_indices = [int(d["index"]) for d in inputs]
        self._output_indices = [int(d["index"]) for d in outputs]

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        if len(inputs) != len(self._input_indices):
            raise AIError(msgs.TFLITE_INPUT_COUNT_MSG)
        with self._lock:
            try:
                return self._run_locked(inputs)
            except AIError:
                raise
            except Exception as exc:  # the binding's own checks (set_tensor's size check...): an error reply
                raise AIError(msgs.BACKEND_ERROR_FMT.format(detail=one_line(exc))) from exc

    def _run_locked(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        self._fit_shapes(inputs)
        interpreter = self._interpreter
        details = interpreter.get_input_details()
        for index, array, detail in zip(self._input_indices, inputs, details, strict=True):
            check_input_type(array, np.dtype(detail["dtype"]))
            interpreter.set_tensor(index, np.ascontiguousarray(array))
        try:
            interpreter.invoke()
        except Exception as exc:
            raise AIError(msgs.TFLITE_INVOKE_FAILED_MSG) from exc
        return [self._output(index) for index in self._output_indices]

    def _fit_shapes(self, inputs: list[np.ndarray]) -> None:
        """Resize the inputs whose shape changed since the last run, then reallocate once (as RedisAI)."""
        interpreter = self._interpreter
        resized = False
        for index, array, detail in zip(self._input_indices, inputs, interpreter.get_input_details(), strict=True):
            if tuple(detail["shape"]) != array.shape:
                try:
                    interpreter.resize_tensor_input(index, list(array.shape), strict=False)
                except Exception as exc:
                    raise AIError(msgs.TFLITE_RESIZE_FAILED_MSG) from exc
                resized = True
        if resized:
            try:
                interpreter.allocate_tensors()
            except Exception as exc:
                raise AIError(msgs.TFLITE_ALLOCATE_FAILED_MSG) from exc

    def _output(self, index: int) -> np.ndarray:
        array = np.asarray(self._interpreter.get_tensor(index))  # a copy: the interpreter reuses its buffers
        check_output_type(array.dtype)
        return array


class TfliteBackend:
    """The TFLITE backend. ``GPU`` devices run on the CPU, as RedisAI's CPU-only TFLite build does."""

    name = "TFLITE"

    def load_model(self, blob: bytes, device: Device, options: RuntimeOptions,
                   names: GraphNames = NO_NAMES) -> TfliteModel:
        """``names`` is not used: the flatbuffer names its own inputs and outputs."""
        try:
            interpreter = _RUNTIME.Interpreter(model_content=bytes(blob), num_threads=options.intra_op_threads)
        except Exception as exc:
            raise AIError(msgs.TFLITE_LOAD_FAILED_MSG) from exc
        try:
            interpreter.allocate_tensors()
        except Exception as exc:
            raise AIError(msgs.TFLITE_ALLOCATE_FAILED_MSG) from exc
        try:
            return TfliteModel(interpreter)
        except Exception as exc:  # a corrupt flatbuffer can still load: e.g. a tensor name that is not UTF-8
            raise AIError(msgs.TFLITE_LOAD_FAILED_MSG) from exc

    def version(self) -> str:
        return _VERSION
