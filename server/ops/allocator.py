"""Keep big buffers in the C heap instead of a fresh ``mmap`` for each one (glibc only).

glibc serves an allocation over its mmap threshold (128 KiB at first) with its own ``mmap`` and unmaps it when
freed. A 602 KB tensor argument, its stored value and its reply are each such a block, so every request faulted
in fresh pages for each. With the threshold at glibc's maximum (32 MiB) and a large trim threshold, a freed big
block is reused by the next request instead. The cost: memory freed after a peak stays with the process.

An operator's own ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` or ``GLIBC_TUNABLES`` wins: nothing is
changed when one is set. On a C library without ``mallopt`` (musl) nothing is changed either.

    keep_big_buffers_in_heap()   # once per process, at start; True when the thresholds were set
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Final

M_TRIM_THRESHOLD: Final = -1  # glibc's <malloc.h> parameter numbers
M_MMAP_THRESHOLD: Final = -3
MMAP_THRESHOLD_MAX: Final = 32 * 1024 * 1024  # glibc's ceiling on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD: Final = 256 * 1024 * 1024
OPERATOR_SETTINGS: Final = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


def keep_big_buffers_in_heap() -> bool:
    """Raise glibc's mmap and trim thresholds for this process; whether both were set."""
    if any(name in os.environ for name in OPERATOR_SETTINGS):
        return False
    name = ctypes.util.find_library("c")
    mallopt = getattr(ctypes.CDLL(name), "mallopt", None) if name is not None else None
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
