"""Worker lanes: what each worker thread of a GPU queue opens on its device before its first step.

A lane is one thread's own CUDA stream (made current on that thread, so the copies and kernels of one worker
overlap another's), its pinned staging buffers (batches are stacked straight into them), whether model
outputs stay on the device between the ops of a run (dag/residency.py), and its CUDA graphs when they are on
(backends/cuda_graphs.py). A GPU queue runs ``--gpu-lanes`` worker threads (at least ``--threads-per-queue``),
so that one request's copies overlap another's compute; a CPU queue's workers get no lane and take the path
they always took. The torch implementation is ``backends.torch_backend.TorchLane``; it is imported only for a
GPU queue, so ``import dag`` never imports torch. Usage::

    lane = gpu_lane("GPU:0")          # on the worker thread; None for "CPU", or without torch/CUDA
    if lane is not None:
        lane.bind()
    manager = QueueManager(1, lanes=functools.partial(gpu_lane, keep_resident=False))
    worker_threads("GPU:0", threads_per_queue=1, gpu_lanes=2)   # 2
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final, Protocol

import numpy as np
import numpy.typing as npt

from backends.device import parse_device_lenient

log = logging.getLogger("redisai.worker")

# worker threads (lanes) per GPU queue by default: two runs in flight, so one's copies overlap the other's compute
DEFAULT_GPU_LANES: Final = 2


class Lane(Protocol):
    """One worker thread's way onto its device (``backends.torch_backend.TorchLane`` is one)."""

    @property
    def keep_resident(self) -> bool:
        """Model outputs stay on the device for the run's next op there (dag/residency.py)."""
        ...

    def bind(self) -> None:
        """Make the lane's stream current on the calling thread."""

    def allocate(self, dtype: np.dtype[Any], shape: tuple[int, ...]) -> npt.NDArray[Any]:
        """A staging buffer a batch's rows are stacked into (pinned on a GPU)."""
        ...

    @property
    def graphs(self) -> object | None:
        """This lane's CUDA graphs (``backends.cuda_graphs.CudaGraphs``), handed to a model's resident run; None
        when they are off."""
        ...


# the lane a worker thread of a queue opens, by queue name (None: no lane, the plain path)
LaneFactory = Callable[[str], "Lane | None"]


def no_lane(queue_name: str) -> Lane | None:
    """No lane for any queue: every worker takes the plain path (tests; a server without GPU work)."""
    return None


def is_gpu_queue(queue_name: str) -> bool:
    """A queue whose workers run on a GPU (``GPU``, ``GPU:n``): it gets lanes and ``--gpu-lanes`` threads."""
    return queue_name.startswith("GPU")


def worker_threads(queue_name: str, threads_per_queue: int, gpu_lanes: int,
                   laned: Callable[[str], bool] = is_gpu_queue) -> int:
    """How many worker threads serve ``queue_name``: ``threads_per_queue``, and for a GPU queue (``laned``) at
    least ``gpu_lanes``, each with its own lane: with one, a request's copies wait for the last one's compute."""
    return max(threads_per_queue, gpu_lanes) if laned(queue_name) else threads_per_queue


def gpu_lane(queue_name: str, keep_resident: bool = True, cuda_graphs: bool = False) -> Lane | None:
    """A GPU queue's lane when torch sees that GPU; None for CPU queues (never imports torch for them), and None
    when torch is absent or sees no such GPU (ONNX- or TF-only GPU queues take the plain path). ``cuda_graphs``:
    the lane captures and replays its TORCH models' runs (``--cuda-graphs``)."""
    if not is_gpu_queue(queue_name):
        return None
    try:
        from backends.torch_backend import open_lane
    except ImportError:
        return None
    return open_lane(parse_device_lenient(queue_name.encode()), keep_resident, cuda_graphs)


def open_on_thread(lanes: LaneFactory, queue_name: str) -> Lane | None:
    """The calling worker thread's lane, bound to it; None if there is none or it could not be opened (logged:
    the worker then takes the plain path rather than dying)."""
    try:
        lane = lanes(queue_name)
        if lane is not None:
            lane.bind()
        return lane
    except Exception:
        log.exception("could not open a lane on %s; its worker takes the plain path", queue_name)
        return None
