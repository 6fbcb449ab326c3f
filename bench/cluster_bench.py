"""The cost of routing over a Redis Cluster: the same AI commands through our server on one store node and on a
3-primary cluster of the same binary (valkey-server), side by side in one run.

Usage: python -m bench.cluster_bench [--requests N]

For AI.TENSORSET, AI.TENSORGET and AI.MODELEXECUTE (the 64→128→10 MLP, TORCH; the model, its input and its
output on three different shards of the cluster, then all three in one slot, then the input and output in one
slot and the model on another shard: hash-tagged tensors, one model key), prints requests/s, p50/p99,
our server's CPU µs per request (and the store nodes' together), and the ratio to one node of our CPU per
request. Each store is measured with its default metadata cache (on a cluster: one tracking connection per
primary, server/store/cluster_cache.py) and with ``--cache-mb 0``; the ratios are to one node with its cache.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import redis

from bench.common import CELL_NAMES, Measured, cpu_seconds, measure, our_server, print_table, target
from server.store.cluster_keys import key_slot
from server.store.process import find_store_binary
from tests import models
from tests.cluster_support import local_cluster
from tests.support import free_port, wait_for_port


@contextmanager
def one_node() -> Iterator[tuple[str, list[int]]]:
    """A standalone valkey-server (the cluster's binary); yields its URL and its pid."""
    port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
        proc = subprocess.Popen([find_store_binary(""), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", workdir],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for_port(port)
            yield f"redis://127.0.0.1:{port}", [proc.pid]
        finally:
            proc.terminate()
            proc.wait(10)


def _commands(x: bytes) -> list[tuple[str, list[str]]]:
    return [
        ("AI.TENSORSET 1 KiB", ["AI.TENSORSET", "tensor0", "FLOAT", "256", "BLOB", x.decode("latin-1")]),
        ("AI.TENSORGET META BLOB", ["AI.TENSORGET", "tensor0", "META", "BLOB"]),
        ("AI.MODELEXECUTE MLP", ["AI.MODELEXECUTE", "model3", "INPUTS", "1", "in0", "OUTPUTS", "1", "out2"]),
        ("same, keys in one slot", ["AI.MODELEXECUTE", "{u}m", "INPUTS", "1", "{u}x", "OUTPUTS", "1", "{u}y"]),
        ("same, tensors in one slot", ["AI.MODELEXECUTE", "model3", "INPUTS", "1", "{u}x", "OUTPUTS", "1", "{u}y"]),
    ]


def _measure_all(url: str, store_pids: list[int], requests: int,
                 *options: str) -> list[tuple[str, Measured, float]]:
    rows = []
    x = np.random.default_rng(0).standard_normal((1, 64), dtype=np.float32)
    with our_server("--redis-url", url, *options) as port:
        conn = redis.Redis(port=port)
        conn.execute_command("AI.MODELSTORE", "model3", "TORCH", "CPU", "BLOB", models.torch_mlp())
        conn.execute_command("AI.TENSORSET", "in0", "FLOAT", 1, 64, "BLOB", x.tobytes())
        conn.execute_command("AI.MODELSTORE", "{u}m", "TORCH", "CPU", "BLOB", models.torch_mlp())
        conn.execute_command("AI.TENSORSET", "{u}x", "FLOAT", 1, 64, "BLOB", x.tobytes())
        where = target("ours", port)
        blob = b"ABCD" * 256  # redis-benchmark -x stops at a NUL byte
        for name, args in _commands(blob):
            stdin = None
            if name.startswith("AI.TENSORSET"):
                args, stdin = args[:-1], blob
            measure(where, args, requests // 5, stdin=stdin)  # warm-up
            before = sum(cpu_seconds(pid) for pid in store_pids)
            result = measure(where, args, requests, stdin=stdin)
            stores = (sum(cpu_seconds(pid) for pid in store_pids) - before) * 1e6 / requests
            rows.append((name, result, stores))
        conn.close()
    return rows


def run(requests: int, extra: list[str]) -> None:
    assert len({key_slot(k) for k in (b"model3", b"in0", b"out2")}) == 3
    with one_node() as (url, pids):
        single = _measure_all(url, pids, requests, *extra)
        uncached = _measure_all(url, pids, requests, "--cache-mb", "0", *extra)
    with local_cluster(primaries=3, replicas=0) as cluster:
        spread = {cluster.node_of_slot(key_slot(k)).port for k in (b"model3", b"in0", b"out2")}
        pids = [n.proc.pid for n in cluster.nodes]
        clustered = _measure_all(cluster.seed_url, pids, requests, *extra)
        clustered_bare = _measure_all(cluster.seed_url, pids, requests, "--cache-mb", "0", *extra)
    table = []
    for rows in zip(single, uncached, clustered, clustered_bare, strict=True):
        name, one, _ = rows[0]
        for label, (_, measured, store_us) in zip(("one node", "one, no cache", "cluster", "cluster, no cache"),
                                                  rows, strict=True):
            ratio = f"{measured.cpu_us / one.cpu_us:.2f}x" if label != "one node" else ""
            table.append([name if label == "one node" else "", label, *measured.cells(), f"{store_us:.1f}", ratio])
    print_table(f"Routing over a 3-primary cluster (model, input and output on {len(spread)} shards), 50 clients; "
                "CPU: our server, then the store nodes together",
                ["command", "store", *CELL_NAMES, "store CPU us/req", "ours cluster/one"], table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=20000, help="requests per measurement")
    parser.add_argument("--server-args", default="", help="more options for every server, e.g. '--inline-op-us 0'")
    args = parser.parse_args()
    run(args.requests, args.server_args.split())


if __name__ == "__main__":
    main()
