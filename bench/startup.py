"""Start to first PONG: how long `redisai-server` takes from exec to answering PING, embedded store included.

Usage: python -m bench.startup [--runs N]

Each run starts ``python -m server --port <free>`` (which starts its valkey-server child and waits for it),
sends PING every millisecond until +PONG comes back, then stops the server with SIGTERM. Prints the median
and the slowest of the runs, with and without ``--dir`` (an empty data directory).
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from bench.common import print_table
from tests.support import free_port

START_LIMIT_S = 30.0


def first_pong(extra: list[str]) -> float:
    """Seconds from exec to the first +PONG of one server start."""
    port = free_port()
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "server", "--port", str(port), "--log-level", "warning", *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while time.perf_counter() - started < START_LIMIT_S:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return time.perf_counter() - started
            except OSError:
                time.sleep(0.001)
        raise TimeoutError(f"no PONG within {START_LIMIT_S}s")
    finally:
        proc.terminate()
        proc.wait(20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="starts per configuration")
    runs = parser.parse_args().runs
    rows = []
    for label in ("in memory", "--dir (empty)"):
        samples = []
        for _ in range(runs):
            with tempfile.TemporaryDirectory() as data:
                samples.append(first_pong(["--dir", data] if label != "in memory" else []))
        rows.append([label, runs, f"{statistics.median(samples) * 1000:.0f}", f"{max(samples) * 1000:.0f}"])
    print_table("start to first PONG (ms)", ["store", "runs", "median", "max"], rows)


if __name__ == "__main__":
    main()
