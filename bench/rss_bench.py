"""Memory over time: the server's RSS before and after 100k mixed requests (the fast-path target: < 5%).

Usage: python -m bench.rss_bench [--requests N]

Starts our server (embedded store), stores the 64->128->10 MLP and warms up with 20k requests, reads the
server's RSS from /proc/PID/statm, runs N more requests split evenly over AI.TENSORSET, AI.TENSORGET,
AI.MODELEXECUTE and a relayed SET (redis-benchmark, 50 clients), and reads it again.
"""

from __future__ import annotations

import argparse
import subprocess

import numpy as np
import redis

from bench.common import RUN_TIMEOUT_S, our_server, print_table, target
from tests import models

MIXED = (["AI.TENSORSET", "t", "FLOAT", "4", "VALUES", "1", "2", "3", "4"], ["AI.TENSORGET", "t", "VALUES"],
         ["AI.MODELEXECUTE", "m", "INPUTS", "1", "x", "OUTPUTS", "1", "y"], ["SET", "k", "v"])


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as handle:
        return int(handle.read().split()[1]) * 4096


def load(port: int, requests: int) -> None:
    for command in MIXED:
        subprocess.run(["redis-benchmark", "-p", str(port), "-c", "50", "-n", str(requests // len(MIXED)), "-q",
                        *command], capture_output=True, timeout=RUN_TIMEOUT_S, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=100_000, help="mixed requests after the warm-up")
    requests = parser.parse_args().requests
    with our_server() as port:
        conn = redis.Redis(port=port)
        conn.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", models.torch_mlp())
        conn.execute_command("AI.TENSORSET", "x", "FLOAT", 1, 64, "BLOB", np.zeros((1, 64), np.float32).tobytes())
        pid = target("ours", port).pid
        load(port, 20_000)
        before = rss_bytes(pid)
        load(port, requests)
        after = rss_bytes(pid)
    print_table(f"server RSS, {requests:,} mixed requests after a 20k warm-up",
                ["before MiB", "after MiB", "growth"],
                [[f"{before / 1048576:.1f}", f"{after / 1048576:.1f}", f"{100 * (after - before) / before:+.2f}%"]])


if __name__ == "__main__":
    main()
