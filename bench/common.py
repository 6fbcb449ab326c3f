"""Shared benchmark plumbing: start servers side by side on free loopback ports, run redis-benchmark, print."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

from tests.support import free_port, redis_server_process, wait_for_port


@contextmanager
def redis_server() -> Iterator[int]:
    """A throw-away redis-server (tests/support.py); yields its port; stopped by its pid."""
    with redis_server_process() as url:
        yield int(url.rsplit(":", 1)[1])


@contextmanager
def our_server(*args: str) -> Iterator[int]:
    """Our server as its own process (the same command line as `make run`); yields its port."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "server", "--port", str(port), "--log-level", "warning", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ))
    try:
        wait_for_port(port, timeout=30)
        yield port
    finally:
        proc.terminate()
        proc.wait(20)


def redis_benchmark(port: int, args: Sequence[str], timeout: float = 300.0) -> dict[str, float]:
    """Run redis-benchmark --csv and return {test name: requests per second}."""
    out = subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "--csv", *args],
                         capture_output=True, text=True, timeout=timeout, check=True).stdout
    rows = list(csv.reader(io.StringIO(out)))
    return {row[0]: float(row[1]) for row in rows[1:] if len(row) >= 2}


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    print(f"\n{title}")
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    for line in (header, *rows):
        print("  ".join(str(cell).rjust(width) for cell, width in zip(line, widths, strict=False)))


def stack() -> ExitStack:
    return ExitStack()


def now() -> float:
    return time.perf_counter()
