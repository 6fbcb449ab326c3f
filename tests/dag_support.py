"""Helpers for tests that drive the DAG engine's queues directly (no server)."""

from __future__ import annotations

import threading

from dag.manager import QueueManager
from dag.runinfo import RunInfo


def submit_and_wait(manager: QueueManager, runs: list[RunInfo], seconds: float = 120) -> None:
    """Submit every run at once and wait until all are done (a hang guard, never a time a pass depends on)."""
    left, lock, done = [len(runs)], threading.Lock(), threading.Event()

    def on_done(_run: RunInfo) -> None:
        with lock:
            left[0] -= 1
            if left[0] == 0:
                done.set()

    for run in runs:
        run.on_done = on_done
        manager.submit(run)
    assert done.wait(seconds), "the runs never finished"
