"""Plain Redis traffic through our server vs redis-server itself, side by side in one run.

Usage: python -m bench.resp_passthrough [--requests N]

redis-benchmark (50 clients) runs PING_INLINE, SET and GET with 1 KiB values, one test at a time, without
pipelining and with pipeline 16, against: redis-server; our server on its embedded store; our server in
front of a second redis-server. Prints requests/s, p50/p99 latency and server CPU µs per request (ours, then
+ the store process behind us), with our / redis-server ratios of throughput and of CPU.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from bench.common import CELL_NAMES, measure, our_server, print_table, redis_server, stack, target

TESTS = ("ping_inline", "set", "get")


def run(requests: int) -> None:
    with stack() as servers:
        redis_port = servers.enter_context(redis_server())
        backing_port = servers.enter_context(redis_server())
        embedded_port = servers.enter_context(our_server())
        fronted_port = servers.enter_context(our_server("--redis-url", f"redis://127.0.0.1:{backing_port}"))
        targets = [target("redis-server", redis_port), target("ours (embedded)", embedded_port),
                   replace(target("ours (-> redis)", fronted_port), store_pid=target("", backing_port).pid)]
        rows = []
        for pipeline in (1, 16):
            count = requests * (4 if pipeline > 1 else 1)
            for test in TESTS:
                args = ["-t", test, "-d", "1024"]
                results = [measure(where, args, count, pipeline=pipeline) for where in targets]
                base = results[0]
                for where, result in zip(targets, results, strict=True):
                    ratios = ["", ""] if where is targets[0] else [f"{result.rps / base.rps:.2f}",
                                                                   f"{result.cpu_us / base.cpu_us:.1f}"]
                    rows.append([test.upper(), pipeline, where.name, *result.cells(), *ratios])
        print_table("redis-benchmark, 50 clients, 1 KiB values (CPU: our process +the store behind it; "
                    "ratios: ours / redis-server)", ["test", "P", "server", *CELL_NAMES, "rps ratio", "CPU ratio"],
                    rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=50_000, help="requests per test without pipelining")
    run(parser.parse_args().requests)


if __name__ == "__main__":
    main()
