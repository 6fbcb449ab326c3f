"""TorchScript models: loaded from bytes with ``torch.jit.load`` (never pickle), run without autograd.

torch releases the GIL inside its kernels, so models on different device queues really run in parallel.
"""

from __future__ import annotations

import io
import threading
from typing import Any, cast

import numpy as np
import torch

from backends import errors as msgs
from backends.base import NO_NAMES, GraphNames, NamedModel, RuntimeOptions
from backends.device import Device, cuda_ordinal
from backends.errors import AIError, one_line
from backends.torch_threads import prepare_run_thread, use_intra_op_threads

_THREADS_LOCK = threading.Lock()


def torch_device(device: Device) -> torch.device:
    """``cpu``, or ``cuda:n`` for ``GPU:n`` when torch sees that GPU (models and scripts alike)."""
    if not device.is_gpu:
        return torch.device("cpu")
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return torch.device("cuda", cuda_ordinal(device, visible, msgs.TORCH_GPU_NOT_AVAILABLE_MSG))


def _flatten(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _flatten(item)]
    raise AIError(msgs.MODEL_OUTPUT_TYPE_FMT.format(kind=type(value).__name__))


def _output_count(module: torch.jit.ScriptModule) -> int:
    returns = cast(Any, module.forward).schema.returns
    if len(returns) != 1:
        return len(returns)
    kind = returns[0].type
    if isinstance(kind, torch.TupleType):
        return len(kind.elements())
    return 1


class TorchModel(NamedModel):
    """A loaded TorchScript module on one device."""

    def __init__(self, module: torch.jit.ScriptModule, device: torch.device, intra_op_threads: int = 1) -> None:
        arguments = cast(Any, module.forward).schema.arguments
        # without self; RedisAI: one empty name per returned tensor
        super().__init__([arg.name for arg in arguments[1:]], [""] * _output_count(module))
        self._module = module
        # the ScriptMethod itself: nn.Module.__call__'s hook machinery costs ~2 us a run, and a loaded
        # TorchScript module has no hooks
        self._forward = module.forward
        self._device = device
        self._on_cpu = device.type == "cpu"  # no .to() round trips for inputs and outputs (~1 us each)
        self._intra_op_threads = intra_op_threads

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """This module is interpreted (``NamedModel``'s subclasses are: docs/performance.md), so a run of a small
        model keeps its own Python calls few: helpers inlined as plain loops, a single tensor taken directly."""
        prepare_run_thread(self._intra_op_threads)  # on this thread: autograd off (backends/torch_threads.py)
        tensors = []
        for array in inputs:
            if array.dtype == object:  # a STRING tensor: as scripts answer it (the fuzz found torch's TypeError)
                raise AIError(msgs.TENSOR_UNSUPPORTED_DTYPE_MSG)
            # decoded inputs are read-only views of the store's bytes: a model that works in place gets a copy
            tensors.append(torch.from_numpy(array if array.flags.writeable else array.copy()))
        if not self._on_cpu:
            tensors = [tensor.to(self._device) for tensor in tensors]
        try:
            result = self._forward(*tensors)
        except AIError:
            raise
        except Exception as exc:
            raise AIError(msgs.BACKEND_ERROR_FMT.format(detail=one_line(exc))) from exc
        if self._on_cpu:  # outputs made with autograd off need no detach(); C order: Tensor.from_result copies
            if type(result) is torch.Tensor:  # a strided view, the rare case, not contiguous() every run
                return [result.numpy()]
            return [t.numpy() for t in _flatten(result)]
        return [t.detach().to("cpu").contiguous().numpy() for t in _flatten(result)]


class TorchBackend:
    """The TORCH backend."""

    name = "TORCH"

    def load_model(self, blob: bytes, device: Device, options: RuntimeOptions,
                   names: GraphNames = NO_NAMES) -> TorchModel:
        """``names`` is not used: the model names its own inputs and outputs."""
        target = torch_device(device)
        self._apply_threads(options)
        try:
            module = cast(Any, torch.jit).load(io.BytesIO(blob), map_location=target)
        except Exception as exc:
            raise AIError(msgs.BACKEND_ERROR_FMT.format(detail=one_line(exc))) from exc
        module.eval()
        return TorchModel(module, target, options.intra_op_threads)

    @staticmethod
    def _apply_threads(options: RuntimeOptions) -> None:
        """INTER_OP_PARALLELISM sizes torch's one process-wide inter-op pool; INTRA_OP_PARALLELISM is per thread,
        applied by each run on its own worker thread (and here, for the loading thread's own work)."""
        use_intra_op_threads(options.intra_op_threads)
        with _THREADS_LOCK:
            if options.inter_op_threads > 0 and torch.get_num_interop_threads() != options.inter_op_threads:
                try:
                    torch.set_num_interop_threads(options.inter_op_threads)
                except RuntimeError:
                    pass  # can only be set before the first parallel work; documented in docs/configuration.md

    def version(self) -> str:
        return str(torch.__version__)
