"""AI.TENSORSET / AI.TENSORGET on our server vs SET / GET of the same bytes on redis-server, side by side.

Usage: python -m bench.tensor_bench [--small-requests N] [--large-requests N] [--clients C]

Starts a redis-server and our server (embedded store) on free loopback ports, then runs redis-benchmark
(50 clients, no pipelining) for a 1 KiB and a 1 MiB FLOAT tensor:

* ours:  ``AI.TENSORSET t FLOAT <n> BLOB <data>`` and ``AI.TENSORGET t META BLOB``
* redis: ``SET k <data>`` and ``GET k``

and prints requests/s and the ratio ours / redis-server. A 1 MiB argument does not fit on a command line
(Linux caps one argument at 128 KiB), so the blob goes through redis-benchmark's ``-x`` (last argument from
stdin); it has no NUL bytes (``ABCD`` repeated: float32 780.0…), as redis-benchmark's argument handling wants.
Every run is bounded by its request count and a timeout; only the servers started here are stopped.
"""

from __future__ import annotations

import argparse
import csv
import io
import subprocess
from collections.abc import Sequence

from bench.common import our_server, print_table, redis_server, stack

SIZES = {"1 KiB": 1024, "1 MiB": 1024 * 1024}
RUN_TIMEOUT_S = 300.0


def benchmark(port: int, command: Sequence[str], requests: int, clients: int, stdin: bytes | None = None) -> float:
    """requests/s of one redis-benchmark run of ``command`` (``stdin``: its last argument, through ``-x``)."""
    args = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(clients), "-n", str(requests), "--csv"]
    if stdin is not None:
        args.append("-x")
    result = subprocess.run([*args, *command], input=stdin, capture_output=True, timeout=RUN_TIMEOUT_S, check=True)
    rows = list(csv.reader(io.StringIO(result.stdout.decode())))
    return float(rows[-1][1])


def run(small_requests: int, large_requests: int, clients: int) -> None:
    rows: list[list[object]] = []
    with stack() as servers:
        redis_port = servers.enter_context(redis_server())
        ours_port = servers.enter_context(our_server())
        for label, size in SIZES.items():
            requests = small_requests if size <= 64 * 1024 else large_requests
            blob = b"ABCD" * (size // 4)
            tensorset = ["AI.TENSORSET", "t", "FLOAT", str(size // 4), "BLOB"]
            pairs = [
                ("TENSORSET / SET", benchmark(ours_port, tensorset, requests, clients, blob),
                 benchmark(redis_port, ["SET", "k"], requests, clients, blob)),
                ("TENSORGET META BLOB / GET", benchmark(ours_port, ["AI.TENSORGET", "t", "META", "BLOB"], requests,
                                                        clients),
                 benchmark(redis_port, ["GET", "k"], requests, clients)),
            ]
            for test, ours, redis in pairs:
                rows.append([test, label, requests, f"{ours:,.0f}", f"{redis:,.0f}", f"{ours / redis:.2f}"])
    print_table(f"redis-benchmark, {clients} clients, no pipelining (requests/s; ratio = ours / redis-server)",
                ["test", "size", "requests", "ours (embedded)", "redis-server", "ratio"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small-requests", type=int, default=20_000, help="requests per 1 KiB test")
    parser.add_argument("--large-requests", type=int, default=1_000, help="requests per 1 MiB test")
    parser.add_argument("--clients", type=int, default=50, help="parallel redis-benchmark connections")
    args = parser.parse_args()
    run(args.small_requests, args.large_requests, args.clients)


if __name__ == "__main__":
    main()
