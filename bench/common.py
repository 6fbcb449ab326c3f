"""Shared benchmark plumbing: start servers side by side on free loopback ports, run redis-benchmark, print.

Every measurement reports requests/s, p50/p99 latency and the **server CPU per request**: the user+system
time of each server process (all its threads) from /proc/PID/stat over the run, divided by the request
count. CPU per request is stable where requests/s is noisy on a busy 2-core machine. For our server on the
embedded store, the store child's CPU is reported apart from ours.
"""

from __future__ import annotations

import csv
import io
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import redis

from tests.support import free_port, redis_server_process, wait_for_port

RUN_TIMEOUT_S = 300.0
_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


@contextmanager
def redis_server() -> Iterator[int]:
    """A throw-away redis-server (tests/support.py); yields its port; stopped by its pid."""
    with redis_server_process() as url:
        yield int(url.rsplit(":", 1)[1])


@contextmanager
def our_server(*args: str, env: dict[str, str] | None = None, tree: str | None = None) -> Iterator[int]:
    """Our server as its own process (the same command line as `make run`); yields its port.

    ``env``: variables added to this process's environment (REDISAI_PURE_PYTHON=1: bench.compiled_bench);
    ``tree``: another checkout to run it from (this virtualenv's Python; bench.store_instructions).
    """
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "server", "--port", str(port), "--log-level", "warning", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})},
                            cwd=tree)
    try:
        wait_for_port(port, timeout=30)
        yield port
    finally:
        proc.terminate()
        proc.wait(20)


@dataclass(frozen=True, slots=True)
class Target:
    """A server under test: its port, its process id and (our embedded store) the store child's."""

    name: str
    port: int
    pid: int
    store_pid: int = 0


def target(name: str, port: int) -> Target:
    """Find the process ids through INFO server (process_id; ours adds embedded_store_pid)."""
    conn = redis.Redis(port=port)
    info = conn.info("server")
    conn.close()
    return Target(name, port, int(info["process_id"]), int(info.get("embedded_store_pid", 0)))


def cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of every thread of ``pid`` so far (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_SECOND  # utime, stime (fields 14, 15 of stat)


@dataclass(frozen=True, slots=True)
class Measured:
    """One redis-benchmark run: throughput, latency and CPU per request of the server (and its store child)."""

    rps: float
    p50_ms: float
    p99_ms: float
    cpu_us: float
    store_cpu_us: float = 0.0

    def cells(self) -> list[str]:
        store = f"+{self.store_cpu_us:.0f}" if self.store_cpu_us else ""
        return [f"{self.rps:,.0f}", f"{self.p50_ms:.3f}", f"{self.p99_ms:.3f}", f"{self.cpu_us:.1f}{store}"]


CELL_NAMES = ("req/s", "p50 ms", "p99 ms", "CPU us/req")


def measure(where: Target, args: Sequence[str], requests: int, clients: int = 50, stdin: bytes | None = None,
            pipeline: int = 1) -> Measured:
    """Run redis-benchmark (``args``: ``-t tests`` or a command; ``stdin``: the last argument, via ``-x``)."""
    command = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(where.port), "-c", str(clients), "-n", str(requests),
               "-P", str(pipeline), "--csv", *(["-x"] if stdin is not None else []), *args]
    before = cpu_seconds(where.pid), cpu_seconds(where.store_pid) if where.store_pid else 0.0
    out = subprocess.run(command, input=stdin, capture_output=True, timeout=RUN_TIMEOUT_S, check=True).stdout
    after = cpu_seconds(where.pid), cpu_seconds(where.store_pid) if where.store_pid else 0.0
    row = list(csv.reader(io.StringIO(out.decode())))[-1]
    per_request = [(b - a) * 1e6 / requests for a, b in zip(before, after, strict=True)]
    return Measured(float(row[1]), float(row[4]), float(row[6]), per_request[0], per_request[1])


def redis_benchmark(port: int, args: Sequence[str], timeout: float = RUN_TIMEOUT_S) -> dict[str, float]:
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


def median_ms(action: Callable[[], object], calls: int) -> float:
    """The median wall time of ``calls`` calls of ``action``, in ms."""
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def store_two_device_models(conn: redis.Redis, blob: bytes) -> None:
    """The two-device comparison's models (s0 on CPU:0, s1 on CPU:1; c0 and c1 both on CPU) and its input."""
    for key, device in (("s0", "CPU:0"), ("s1", "CPU:1"), ("c0", "CPU"), ("c1", "CPU")):
        conn.execute_command("AI.MODELSTORE", key, "TORCH", device, "BLOB", blob)
    conn.execute_command("AI.TENSORSET", "img", "FLOAT", 256, 256, "BLOB", bytes(256 * 256 * 4))


def stack() -> ExitStack:
    return ExitStack()


def now() -> float:
    return time.perf_counter()
