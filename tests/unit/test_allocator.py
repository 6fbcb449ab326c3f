"""``keep_big_buffers_in_heap``: 600 KB buffers made and freed again and again stop faulting in fresh pages."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_MAKE_AND_FREE = """
import resource, sys
from server.ops.allocator import keep_big_buffers_in_heap
if sys.argv[1] == "tuned":
    assert keep_big_buffers_in_heap()
for _ in range(20):  # warm up: the heap grows once
    held = [bytes(600_000) for _ in range(4)]  # a request's argument, value and reply alive at once
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    held = [bytes(600_000) for _ in range(4)]
    del held
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str, env: dict[str, str]) -> int:
    done = subprocess.run([sys.executable, "-c", _MAKE_AND_FREE, mode], env=env, capture_output=True, text=True,
                          timeout=60, check=True)
    return int(done.stdout.strip())


def _env_without_malloc_settings() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}


@pytest.mark.skipif(not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
                    reason="glibc's mallopt: Linux with glibc only")
def test_freed_big_buffers_are_reused_instead_of_mapped_again() -> None:
    env = _env_without_malloc_settings()
    assert _faults("tuned", env) < 50  # 200 buffers of 147 pages each: a few faults at most, not one a page
    assert _faults("default", env) > 200  # glibc's own thresholds: the freed heap top is trimmed, then regrown


def test_an_operators_own_malloc_setting_wins() -> None:
    env = {**_env_without_malloc_settings(), "MALLOC_MMAP_THRESHOLD_": "131072"}
    code = "from server.ops.allocator import keep_big_buffers_in_heap; print(keep_big_buffers_in_heap())"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "False"
