"""TorchScript models: loaded from bytes with ``torch.jit.load`` (never pickle), run without autograd.

torch releases the GIL inside its kernels, so models on different device queues really run in parallel.

On a GPU (docs/gpu.md) each worker thread of the queue has its own CUDA stream (``TorchLane``, made current on
that thread), inputs go through pinned host staging with non-blocking copies, outputs come back into pinned
memory, and the thread waits on a blocking CUDA event (it sleeps; it never spins). ``run_resident`` leaves the
outputs on the GPU (``backends.device.ResidentTensor``) for the next op of the run on the same device. The CPU
path is the one it always was: no staging, no events, no lanes. Usage::

    model = TorchBackend().load_model(blob, parse_device(b"GPU:0"), RuntimeOptions())
    lane = open_lane(parse_device(b"GPU:0"))   # once, on the worker thread; None without CUDA
    outputs = model.run([array])              # numpy in, numpy out
"""

from __future__ import annotations

import io
import threading
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any, Final, cast

import numpy as np
import numpy.typing as npt
import torch

from backends import errors as msgs
from backends.base import NO_NAMES, GraphNames, NamedModel, RuntimeOptions
from backends.cuda_graphs import CudaGraphs
from backends.device import Device, ResidentTensor, cuda_ordinal
from backends.errors import AIError, one_line
from backends.tensor import Tensor
from backends.torch_threads import prepare_run_thread, use_intra_op_threads
from backends.torch_writes import allow_read_only_inputs, writes_in_place

_THREADS_LOCK = threading.Lock()

# torch dtypes an output may stay on the GPU in: those a host Tensor has (others are copied back at once, as the
# CPU path does, and fail or convert the same way there)
_DTYPE_NAMES: Final = MappingProxyType({
    torch.float32: "FLOAT", torch.float64: "DOUBLE", torch.float16: "FLOAT16", torch.int8: "INT8",
    torch.int16: "INT16", torch.int32: "INT32", torch.int64: "INT64", torch.uint8: "UINT8", torch.bool: "BOOL",
})


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
        self._on_cpu = device.type == "cpu"  # no .to() round trips for inputs and outputs
        self._intra_op_threads = intra_op_threads
        self._copies_inputs = writes_in_place(module)  # else inputs are passed as the read-only views they are
        if not self._copies_inputs:
            allow_read_only_inputs()

    def fusion_part(self) -> tuple[torch.jit.ScriptModule, int] | None:
        """The module and its intra-op thread count, when a stored graph may call it inside one traced function
        (backends/torch_fusion.py): on the CPU, and never writing into its inputs (which are then not copied)."""
        return (self._module, self._intra_op_threads) if self._on_cpu and not self._copies_inputs else None

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """This module is interpreted (``NamedModel``'s subclasses are: docs/performance.md), so a run of a small
        model keeps its own Python calls few: helpers inlined as plain loops, a single tensor taken directly."""
        prepare_run_thread(self._intra_op_threads)  # on this thread: autograd off (backends/torch_threads.py)
        tensors = []
        for array in inputs:
            if array.dtype == object:  # a STRING tensor: as scripts answer it (the fuzz found torch's TypeError)
                raise AIError(msgs.TENSOR_UNSUPPORTED_DTYPE_MSG)
            # decoded inputs are read-only views of stored bytes: a model that may write in place gets a copy
            tensors.append(torch.from_numpy(array.copy() if self._copies_inputs and not array.flags.writeable
                                            else array))
        if not self._on_cpu:
            return self._run_on_gpu(tensors)
        try:
            result = self._forward(*tensors)
        except AIError:
            raise
        except Exception as exc:
            raise AIError(msgs.BACKEND_ERROR_FMT.format(detail=one_line(exc))) from exc
        # outputs made with autograd off need no detach(); C order: Tensor.from_result copies
        if type(result) is torch.Tensor:  # a strided view, the rare case, not contiguous() every run
            return [result.numpy()]
        return [t.numpy() for t in _flatten(result)]

    def _call(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        try:
            return _flatten(self._forward(*tensors))
        except AIError:
            raise
        except Exception as exc:
            raise AIError(msgs.BACKEND_ERROR_FMT.format(detail=one_line(exc))) from exc

    def _run_on_gpu(self, tensors: list[torch.Tensor]) -> list[np.ndarray]:
        """Inputs up through pinned staging (non-blocking, on this thread's stream), the call, the outputs down
        into pinned memory; one blocking wait for the lot."""
        outputs = self._call([upload(tensor, self._device) for tensor in tensors])
        hosts = [download(t) for t in outputs]
        wait_for_stream(self._device)
        return [host.numpy() for host in hosts]

    def run_resident(self, values: Sequence[object], device_name: str,
                     graphs: CudaGraphs | None = None) -> list[object]:
        """Run with inputs that are host ``Tensor``s or ``ResidentTensor``s of this GPU, and leave the outputs on
        it (``ResidentTensor``s of ``device_name``): the DAG engine's path for a GPU queue (dag/residency.py).
        Outputs of a dtype a host tensor lacks come back to the host at once, as ``run`` brings them. ``graphs``:
        the lane's CUDA graphs (``--cuda-graphs``): the call is replayed from them when it can be."""
        prepare_run_thread(self._intra_op_threads)
        stream = torch.cuda.current_stream(self._device)
        tensors = [_device_input(value, self._device, stream) for value in values]
        outputs = self._call(tensors) if graphs is None else graphs.run(self, self._call, tensors)
        ready = new_event()
        ready.record(stream)
        return [_keep(t, device_name, ready, stream) for t in outputs]


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
        if target.type == "cuda":  # the weights' copies ran on this thread's stream: done before any worker's
            torch.cuda.synchronize(target)
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


class OnDevice:
    """A resident output's torch tensor, the event that marks it computed and the stream it was made on."""

    __slots__ = ("event", "stream", "tensor")

    def __init__(self, tensor: torch.Tensor, event: torch.cuda.Event, stream: torch.cuda.Stream) -> None:
        self.tensor: Final = tensor
        self.event: Final = event
        self.stream: Final = stream


def _keep(tensor: torch.Tensor, device_name: str, ready: torch.cuda.Event, stream: torch.cuda.Stream) -> object:
    name = _DTYPE_NAMES.get(tensor.dtype)
    if name is None:  # as ``run`` would: copied back now (and refused there if no host tensor has the dtype)
        host = download(tensor)
        wait_for_stream(tensor.device)
        return Tensor.from_result(host.numpy())
    return ResidentTensor(device_name, name, tuple(tensor.shape), OnDevice(tensor, ready, stream), resident_to_host)


def _device_input(value: object, device: torch.device, stream: torch.cuda.Stream) -> torch.Tensor:
    """A run's input on ``device``: a resident one as it is (after its producer's event, and recorded as used on
    this stream so its memory is not reused under us), a host one uploaded."""
    if isinstance(value, ResidentTensor) and isinstance(value.value, OnDevice):
        kept = value.value
        if kept.stream != stream:
            stream.wait_event(kept.event)
            kept.tensor.record_stream(stream)
        return kept.tensor
    assert isinstance(value, Tensor)
    array = value.to_numpy()
    if array.dtype == object:
        raise AIError(msgs.TENSOR_UNSUPPORTED_DTYPE_MSG)
    return upload(torch.from_numpy(array if array.flags.writeable else array.copy()), device)


def resident_to_host(value: object) -> Tensor:
    """A resident output copied to the host: on the stream that made it, into pinned memory, one blocking wait."""
    assert isinstance(value, OnDevice)
    with torch.cuda.stream(value.stream):
        host = download(value.tensor)
        done = new_event(blocking=True)
        done.record(value.stream)
    done.synchronize()
    return Tensor.from_result(host.numpy())


def upload(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` (host) on ``device`` by a non-blocking copy on the current stream, from pinned memory: the
    tensor itself when it is pinned already (a batch stacked in a lane's staging), else a pinned staging copy
    (torch's caching host allocator: the block is not reused before the copy has run)."""
    if not tensor.is_pinned():
        staged = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
        staged.copy_(tensor)
        tensor = staged
    return tensor.to(device, non_blocking=True)


def download(tensor: torch.Tensor) -> torch.Tensor:
    """A non-blocking copy of ``tensor`` (on a GPU) into fresh pinned host memory, C order; valid once the
    current stream has reached this point (``wait_for_stream``)."""
    source = tensor.detach()
    host = torch.empty(source.shape, dtype=source.dtype, pin_memory=True)
    host.copy_(source, non_blocking=True)
    return host


def new_event(blocking: bool = False) -> torch.cuda.Event:
    """A CUDA event without timing; ``blocking``: a host wait on it sleeps (cudaEventBlockingSync), never spins."""
    return torch.cuda.Event(blocking=blocking)  # type: ignore[no-untyped-call]  # torch leaves it untyped


def new_stream(device: torch.device) -> torch.cuda.Stream:
    """A fresh CUDA stream on ``device``."""
    return torch.cuda.Stream(device)  # type: ignore[no-untyped-call]  # torch leaves it untyped


def wait_for_stream(device: torch.device) -> None:
    """Block (sleep, not spin: a blocking-sync event) until the current stream of ``device`` has done its work."""
    done = new_event(blocking=True)
    done.record(torch.cuda.current_stream(device))
    done.synchronize()


class TorchLane:
    """One worker thread's own way onto its device (dag/worker.py opens one per thread of a GPU queue).

    On CUDA: a stream of its own, made the thread's current stream (``bind``), so the copies and kernels of one
    thread overlap another's; and staging buffers in pinned memory (``allocate``) that batches are stacked
    into; and (``cuda_graphs``, on CUDA only) the lane's own CUDA graphs. On a CPU device (tests, and the
    bookkeeping without a GPU): no stream, plain memory, no graphs. Usage::

        lane = TorchLane(torch.device("cuda", 0), cuda_graphs=True)
        lane.bind()                                   # on the worker thread, before its first step
        buffer = lane.allocate(np.dtype("<f4"), (16, 3, 224, 224))
    """

    def __init__(self, device: torch.device, keep_resident: bool = True, cuda_graphs: bool = False) -> None:
        self.device = device
        self.pin = device.type == "cuda" and torch.cuda.is_available()
        self.stream: torch.cuda.Stream | None = new_stream(device) if self.pin else None
        self.keep_resident = keep_resident and self.pin  # intermediates stay only on a GPU
        # graphs replay on the resident path, so they need it
        self.graphs: CudaGraphs | None = CudaGraphs() if cuda_graphs and self.keep_resident else None

    def bind(self) -> None:
        """Make this lane's stream the calling thread's current stream for its device (thread-local in torch)."""
        if self.stream is not None:
            torch.cuda.set_stream(self.stream)

    def allocate(self, dtype: np.dtype[Any], shape: tuple[int, ...]) -> npt.NDArray[Any]:
        """An empty C-contiguous array for a batch's stacked rows: pinned on CUDA (torch's caching host allocator,
        so blocks are reused); the numpy array keeps the torch tensor that owns the memory alive."""
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        raw = torch.empty(size, dtype=torch.uint8, pin_memory=self.pin).numpy()
        return raw.view(dtype).reshape(shape)


def open_lane(device: Device, keep_resident: bool = True, cuda_graphs: bool = False) -> TorchLane | None:
    """The lane of a worker thread of ``device``'s queue: None for a CPU device, or when torch sees no such GPU
    (the worker then takes the path it always took)."""
    if not device.is_gpu or not torch.cuda.is_available():
        return None
    ordinal = device.index or 0
    if ordinal >= torch.cuda.device_count():
        return None
    return TorchLane(torch.device("cuda", ordinal), keep_resident, cuda_graphs)
