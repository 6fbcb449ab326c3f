"""The notice lines of a device worker that is stuck or replaced (the runaway-script watchdog calls these).

Usage, from whatever watches the workers::

    worker_stuck("CPU", "redisai-CPU-0", key=b"s", running_s=12.5)
    worker_replaced("CPU", "redisai-CPU-0", "redisai-CPU-3", reason="script exceeded its time limit")

Both log at warning (above notice: an operator should see them whatever the level) with the event's fields
(server/ops/logs.py renders them as ``key=value`` or JSON keys).
"""

from __future__ import annotations

import logging

log = logging.getLogger("redisai.worker")


def worker_stuck(device: str, thread: str, key: bytes, running_s: float) -> None:
    """A worker of ``device`` has run one op (of model or script ``key``) for ``running_s`` seconds."""
    log.warning("worker stuck", extra={"fields": {"device": device, "thread": thread, "key": key,
                                                  "running_s": round(running_s, 1)}})


def worker_replaced(device: str, old_thread: str, new_thread: str, reason: str) -> None:
    """The stuck worker ``old_thread`` of ``device`` was given up on and ``new_thread`` serves the queue now."""
    log.warning("worker replaced", extra={"fields": {"device": device, "old_thread": old_thread,
                                                     "new_thread": new_thread, "reason": reason}})
