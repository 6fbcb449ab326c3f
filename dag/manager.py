"""QueueManager: every device queue of one server and the worker threads that serve them.

Apart from dag/queues.py because it starts workers (dag/worker.py), and the worker imports the queue.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial

from dag.lanes import DEFAULT_GPU_LANES, LaneFactory, gpu_lane, is_gpu_queue, worker_threads
from dag.queues import DeviceQueue
from dag.runinfo import DeviceTicket, RunInfo, Step, make_tickets
from dag.watchdog import Watchdog
from dag.worker import Worker


class QueueManager:
    """All device queues of one server and their workers; owned by the ServerContext. ``lanes``: what each
    worker thread opens on its device (dag/lanes.py): by default a GPU queue's threads get a CUDA stream each,
    keep intermediates on the GPU and (``cuda_graphs``) capture and replay their TORCH runs; CPU queues' threads
    get nothing. A GPU queue (``laned``: tests name CPU queues) runs at least ``gpu_lanes`` threads."""

    def __init__(self, threads_per_queue: int, script_limit_ms: int = 0, lanes: LaneFactory | None = None,
                 gpu_lanes: int = DEFAULT_GPU_LANES, cuda_graphs: bool = False,
                 laned: Callable[[str], bool] = is_gpu_queue) -> None:
        self.threads_per_queue = threads_per_queue
        self.gpu_lanes = gpu_lanes
        self.laned = laned
        self.lanes: LaneFactory = lanes if lanes is not None else partial(gpu_lane, cuda_graphs=cuda_graphs)
        self.queues: dict[str, DeviceQueue] = {}
        self.watchdog = Watchdog(self._replace_worker, script_limit_ms)  # steps past their deadline
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._started = 0  # worker threads started since start: each gets its own number

    def queue(self, name: str) -> DeviceQueue:
        """The queue for ``name`` (upper case), started with its workers on first use."""
        existing = self.queues.get(name)
        if existing is not None:
            return existing
        with self._lock:
            if name not in self.queues:
                queue = DeviceQueue(name)
                for _ in range(self.threads_for(name)):
                    self._start_worker(queue)
                self.queues[name] = queue
            return self.queues[name]

    def threads_for(self, name: str) -> int:
        """Worker threads a queue named ``name`` runs (INFO's ``threads=``): ``--gpu-lanes`` on a GPU."""
        return worker_threads(name, self.threads_per_queue, self.gpu_lanes, self.laned)

    def _start_worker(self, queue: DeviceQueue) -> None:
        """(Call with ``_lock`` held.) One more worker thread on ``queue``."""
        worker = Worker(queue, self.watchdog, self.lanes)
        thread = threading.Thread(target=worker.run, name=f"worker-{queue.name}-{self._started}", daemon=True)
        self._started += 1
        thread.start()
        self._threads.append(thread)

    def _replace_worker(self, queue: DeviceQueue) -> None:
        """The watchdog abandoned a worker of ``queue`` to a step that overran: a fresh thread serves the queue.
        Threads that have ended are forgotten here (INFO ai_cpu lists the live ones)."""
        with self._lock:
            self._threads = [thread for thread in self._threads if thread.is_alive()]
            self._start_worker(queue)

    def worker_threads(self) -> int:
        """Worker threads running now, abandoned ones still running their op included (INFO)."""
        return sum(thread.is_alive() for thread in list(self._threads))

    def thread_cpu_seconds(self) -> list[tuple[str, list[float]]]:
        """CPU seconds of each worker thread, by device (INFO ai_cpu); a thread that has ended counts 0."""
        by_device: dict[str, list[float]] = {}
        for thread in list(self._threads):
            device = thread.name.removeprefix("worker-").rsplit("-", 1)[0]
            by_device.setdefault(device, []).append(_thread_cpu(thread))
        return sorted(by_device.items())

    def submit(self, run: RunInfo) -> None:
        """Fan the run out: one ticket per device, appended to the tail of that device's queue."""
        tickets = make_tickets(run, per_step=self.threads_per_queue > 1)
        run.waiters = list({id(q): q for q in (self.queue(ticket.device) for ticket in tickets)}.values())
        for ticket in tickets:
            ticket.enqueued_at = time.monotonic()
            queue = self.queues[ticket.device]
            if run.deadline is not None:
                self.watchdog.watch_queued(ticket, queue)
            queue.push_back(ticket)

    def push_step(self, run: RunInfo, step: Step) -> None:
        """One ready step of a compiled graph as its own ticket at the tail of its device's queue (the caller
        counted it in the run's reference count)."""
        ticket = DeviceTicket(run, step.device, [step.index])
        queue = self.queue(step.device)
        if run.deadline is not None:
            self.watchdog.watch_queued(ticket, queue)
        queue.push_back(ticket)

    def close(self, timeout: float) -> None:
        """Stop the workers once their queues are empty; wait up to ``timeout`` seconds for them (an abandoned
        thread still running its op is not waited for: it may never end)."""
        self.watchdog.close()
        for queue in list(self.queues.values()):
            with queue.cond:
                queue.closed = True
                queue.cond.notify_all()
        deadline = time.monotonic() + timeout
        stuck = self.watchdog.stuck_threads()
        for thread in self._threads:
            if thread not in stuck:
                thread.join(max(deadline - time.monotonic(), 0.0))


def _thread_cpu(thread: threading.Thread) -> float:
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident or 0))
    except (OSError, OverflowError):
        return 0.0
