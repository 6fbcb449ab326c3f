"""AI.TENSORSET / AI.TENSORGET on our server vs SET / GET of the same bytes on redis-server, side by side.

Usage: python -m bench.tensor_bench [--small-requests N] [--large-requests N] [--clients C]

Starts a redis-server and our server (embedded store) on free loopback ports, then runs redis-benchmark
(50 clients, no pipelining) for a 1 KiB and a 1 MiB FLOAT tensor:

* ours:  ``AI.TENSORSET t FLOAT <n> BLOB <data>`` and ``AI.TENSORGET t META BLOB``
* redis: ``SET k <data>`` and ``GET k``

and prints requests/s, p50/p99 latency, server CPU µs per request (ours +the embedded store child's) and
the ratios ours / redis-server. A 1 MiB argument does not fit on a command line
(Linux caps one argument at 128 KiB), so the blob goes through redis-benchmark's ``-x`` (last argument from
stdin); it has no NUL bytes (``ABCD`` repeated: float32 780.0…), as redis-benchmark's argument handling wants.
Every run is bounded by its request count and a timeout; only the servers started here are stopped.
"""

from __future__ import annotations

import argparse

from bench.common import CELL_NAMES, measure, our_server, print_table, redis_server, stack, target

SIZES = {"1 KiB": 1024, "1 MiB": 1024 * 1024}


def run(small_requests: int, large_requests: int, clients: int) -> None:
    rows: list[list[object]] = []
    with stack() as servers:
        redis = target("redis-server", servers.enter_context(redis_server()))
        ours = target("ours (embedded)", servers.enter_context(our_server()))
        for label, size in SIZES.items():
            requests = small_requests if size <= 64 * 1024 else large_requests
            blob = b"ABCD" * (size // 4)
            pairs = [
                ("TENSORSET / SET", ["AI.TENSORSET", "t", "FLOAT", str(size // 4), "BLOB"], ["SET", "k"], blob),
                ("TENSORGET META BLOB / GET", ["AI.TENSORGET", "t", "META", "BLOB"], ["GET", "k"], None),
            ]
            for test, our_command, redis_command, stdin in pairs:
                mine = measure(ours, our_command, requests, clients, stdin)
                theirs = measure(redis, redis_command, requests, clients, stdin)
                rows.append([test, label, requests, *mine.cells(), *theirs.cells(), f"{mine.rps / theirs.rps:.2f}",
                             f"{mine.cpu_us / theirs.cpu_us:.1f}"])
    header = ["test", "size", "requests", *(f"ours {c}" for c in CELL_NAMES), *(f"redis {c}" for c in CELL_NAMES),
              "rps ratio", "CPU ratio"]
    print_table(f"redis-benchmark, {clients} clients, no pipelining (CPU: our process +the embedded store; "
                "ratios: ours / redis-server)", header, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small-requests", type=int, default=20_000, help="requests per 1 KiB test")
    parser.add_argument("--large-requests", type=int, default=1_000, help="requests per 1 MiB test")
    parser.add_argument("--clients", type=int, default=50, help="parallel redis-benchmark connections")
    args = parser.parse_args()
    run(args.small_requests, args.large_requests, args.clients)


if __name__ == "__main__":
    main()
