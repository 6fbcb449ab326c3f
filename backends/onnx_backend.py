"""ONNX models on onnxruntime: one InferenceSession per (model, device), run with plain ``run()``.

``run()`` is several times faster than ``run_with_ort_values`` for small models. The
MODEL_EXECUTION_TIMEOUT is enforced by one watchdog thread that sets ``RunOptions.terminate`` on runs
past their deadline, as RedisAI does.
"""

from __future__ import annotations

import heapq
import itertools
import re
import threading
import time
from collections.abc import Sequence

import numpy as np
import onnxruntime as ort

from backends import errors as msgs
from backends.base import NO_NAMES, GraphNames, NamedModel, RuntimeOptions
from backends.device import Device
from backends.errors import AIError

_ORT_PREFIX = re.compile(r"^\[ONNXRuntimeError\] : \d+ : [A-Z_]+ : ")  # added by the Python binding


class Watchdog:
    """Terminates onnxruntime runs that outlive their deadline (one thread for all sessions)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, ort.RunOptions]] = []
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, options: ort.RunOptions, timeout_ms: int) -> int:
        token = next(self._ids)
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + timeout_ms / 1000, token, options))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="onnx-watchdog", daemon=True)
                self._thread.start()
            self._cond.notify()
        return token

    def release(self, token: int) -> None:
        with self._cond:
            self._heap = [entry for entry in self._heap if entry[1] != token]
            heapq.heapify(self._heap)

    def _loop(self) -> None:
        with self._cond:
            while True:
                if not self._heap:
                    self._cond.wait()
                    continue
                deadline, _, options = self._heap[0]
                delay = deadline - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                heapq.heappop(self._heap)
                options.terminate = True


class OnnxModel(NamedModel):
    """A loaded ONNX model."""

    def __init__(self, session: ort.InferenceSession, timeout_ms: int, watchdog: Watchdog,
                 on_gpu: bool = False) -> None:
        super().__init__([i.name for i in session.get_inputs()], [o.name for o in session.get_outputs()])
        # The binding's own run on the CPU: InferenceSession.run's Python checks (every input fed, no OrtValue
        # of another session, graph capture) cost ~1.3 us of the MLP's ~6.5 us here, and our feed always names
        # every input with a numpy array. A GPU session keeps them: its run falls back to the CPU on EPFail.
        self._session = session
        binding = getattr(session, "_sess", None)
        self._run = binding.run if binding is not None and not on_gpu else session.run
        self._timeout_ms = timeout_ms
        self._watchdog = watchdog

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Plain loops, not comprehensions: this module is interpreted, and each comprehension is a call."""
        feed = {}
        for name, array in zip(self._inputs, inputs, strict=True):
            feed[name] = array if array.dtype != object else _ort_input(array)
        options = ort.RunOptions() if self._timeout_ms > 0 else None
        token = self._watchdog.watch(options, self._timeout_ms) if options is not None else None
        try:
            outputs = []
            for out in self._run(self._outputs, feed, options):
                outputs.append(np.asarray(out))
            return outputs
        except Exception as exc:
            raise AIError(ort_message(exc)) from exc
        finally:
            if token is not None:
                self._watchdog.release(token)


def _ort_input(array: np.ndarray) -> np.ndarray:
    """A STRING tensor (an object array of ``bytes``) as an array of ``str``: onnxruntime's binding feeds an
    element's ``str()``, so ``b'input11'`` would reach the model as the text ``b'input11'``. Its outputs come
    back as ``str`` and are encoded as UTF-8 again (``Tensor.from_numpy``)."""
    if array.dtype != object:
        return array
    try:
        return np.array([item.decode() for item in array.reshape(-1).tolist()], dtype=object).reshape(array.shape)
    except UnicodeDecodeError as exc:
        raise AIError(msgs.ONNX_STRING_NOT_UTF8_MSG) from exc


Provider = str | tuple[str, dict[str, int]]
_CUDA = "CUDAExecutionProvider"


def onnx_providers(device: Device, available: Sequence[str]) -> list[Provider]:
    """The execution providers of a session on ``device``: the CPU, or CUDA on GPU ``n`` (its ``device_id``:
    ``GPU:1`` runs on the second GPU, not the first) with the CPU for the nodes CUDA does not take.
    ``available`` is onnxruntime's list; without CUDA (the ``onnxruntime`` CPU package) a GPU device is
    RedisAI's "GPU requested but ONNX couldn't find CUDA". A ``device_id`` beyond the GPUs present is
    onnxruntime's own error when the session is made."""
    if not device.is_gpu:
        return ["CPUExecutionProvider"]
    if _CUDA not in available:
        raise AIError(msgs.ONNX_GPU_NOT_AVAILABLE_MSG)
    return [(_CUDA, {"device_id": device.index or 0}), "CPUExecutionProvider"]


def ort_message(exc: BaseException) -> str:
    """ONNX Runtime's own message, as RedisAI replies it (the C API's status message): one line, without the
    ``[ONNXRuntimeError] : <code> : <NAME> : `` prefix the Python binding adds."""
    text = " ".join(str(exc).split("\n"))
    return msgs.BACKEND_ERROR_FMT.format(detail=_ORT_PREFIX.sub("", text, count=1))


class OnnxBackend:
    """The ONNX backend."""

    name = "ONNX"

    def __init__(self) -> None:
        self._watchdog = Watchdog()

    def load_model(self, blob: bytes, device: Device, options: RuntimeOptions,
                   names: GraphNames = NO_NAMES) -> OnnxModel:
        """``names`` is not used: the model names its own inputs and outputs."""
        providers = self._providers(device)
        session_options = ort.SessionOptions()
        session_options.intra_op_num_threads = options.intra_op_threads
        session_options.inter_op_num_threads = options.inter_op_threads
        session_options.log_severity_level = 3
        try:
            session = ort.InferenceSession(blob, sess_options=session_options, providers=providers)
        except Exception as exc:
            raise AIError(ort_message(exc)) from exc
        return OnnxModel(session, options.execution_timeout_ms, self._watchdog, device.is_gpu)

    @staticmethod
    def _providers(device: Device) -> list[Provider]:
        return onnx_providers(device, ort.get_available_providers())

    def version(self) -> str:
        return str(ort.__version__)
