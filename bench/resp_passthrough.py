"""Plain Redis traffic through our server vs redis-server itself, side by side in one run.

Usage: python -m bench.resp_passthrough [--requests N]

redis-benchmark (50 clients) runs PING_INLINE, SET and GET with 1 KiB values, without pipelining and with
pipeline 16, against: redis-server; our server on its embedded store; our server in front of a second
redis-server. Prints requests/s for each and our/redis ratios.
"""

from __future__ import annotations

import argparse

from bench.common import our_server, print_table, redis_benchmark, redis_server, stack

TESTS = ("PING_INLINE", "SET", "GET")


def run(requests: int) -> None:
    with stack() as servers:
        redis_port = servers.enter_context(redis_server())
        backing_port = servers.enter_context(redis_server())
        embedded_port = servers.enter_context(our_server())
        fronted_port = servers.enter_context(our_server("--redis-url", f"redis://127.0.0.1:{backing_port}"))
        targets = {"redis-server": redis_port, "ours (embedded)": embedded_port, "ours (-> redis)": fronted_port}
        rows = []
        for pipeline in (1, 16):
            count = requests * (4 if pipeline > 1 else 1)
            args = ["-t", "ping_inline,set,get", "-d", "1024", "-c", "50", "-n", str(count), "-P", str(pipeline)]
            results = {name: redis_benchmark(port, args) for name, port in targets.items()}
            for test in TESTS:
                base = results["redis-server"].get(test, 0.0)
                cells: list[object] = [test, pipeline]
                for name in targets:
                    rps = results[name].get(test, 0.0)
                    cells.append(f"{rps:,.0f}")
                    if name != "redis-server":
                        cells.append(f"{rps / base:.2f}" if base else "n/a")
                rows.append(cells)
        print_table("redis-benchmark, 50 clients, 1 KiB values (requests/s; ratio = ours / redis-server)",
                    ["test", "P", "redis", "embedded", "ratio", "->redis", "ratio"], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=50_000, help="requests per test without pipelining")
    run(parser.parse_args().requests)


if __name__ == "__main__":
    main()
