"""torch's intra-op thread count, set where it counts: in each thread that runs a model or a script.

``torch.set_num_threads`` sets OpenMP's team size for the **calling** thread only. Set from the loop or a loader
thread, a device worker would still run with the default team (one thread per core), whose spinning threads fight
the other workers and the event loop for the cores, and throughput collapses. So every run first makes sure its own
thread has the configured count: one attribute read per run, one ``set_num_threads`` per thread.

The same first run also turns autograd off on its thread (``torch.set_grad_enabled(False)``, thread-local in
torch): models never train here, and a ``with torch.inference_mode()`` around every call would run
interpreted context-manager code on every run.
"""

from __future__ import annotations

import threading

import torch

_THIS_THREAD = threading.local()  # .intra_op: the count this OS thread's OpenMP team was set to; .runs: prepared


def use_intra_op_threads(count: int) -> None:
    """Give the calling thread ``count`` intra-op threads (once per thread and count)."""
    if count > 0 and getattr(_THIS_THREAD, "intra_op", 0) != count:
        torch.set_num_threads(count)
        _THIS_THREAD.intra_op = count


def prepare_run_thread(count: int) -> None:
    """Before a model runs on the calling thread: ``count`` intra-op threads, and autograd off (once a thread)."""
    if getattr(_THIS_THREAD, "runs", -1) != count:
        torch.set_grad_enabled(False)
        use_intra_op_threads(count)
        _THIS_THREAD.runs = count
