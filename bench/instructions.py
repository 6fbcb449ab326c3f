"""Instructions per request of our server at one client, counted by valgrind (callgrind): the one figure of
this VM that does not move with the hour.

Usage: python -m bench.instructions [--requests N] [--clients N] [--tree DIR ...] [--only NAME ...] [--cluster]
       python -m bench.instructions --floor [--requests N] [--clients N]

CPU time per request is the benchmarks' figure to compare, but on a shared VM single rounds of one command
spread by half within a morning, and a change worth 5% cannot be told from that. The number of instructions
the server runs for one request is the same run after run. So each command is
sent ``requests`` times by one redis-py client to our server running under ``valgrind --tool=callgrind``
(instrumentation switched on only around those requests, after 200 to warm up; every command through one
server start per tree, each dumped on its own), and the table gives the instructions of the server process
per request. ``--tree`` (repeatable) measures other checkouts of the
project side by side (each must be compiled: ``make compile`` there), with this tree's virtualenv.

What it does not say: how fast those instructions run (cache misses, the syscalls' cost, the store's own
work, and what 50 clients share per loop iteration), so it complements ``make bench``'s CPU figures rather
than replacing them. Under valgrind everything runs ~50 times slower, so the server runs with
``--inline-op-us 100000``: model runs stay on the loop thread as they do at full speed (the inline policy's
budget would otherwise send them to the workers). Needs valgrind (Debian package ``valgrind``).

``--clients N`` (N > 1): the requests come from redis-benchmark's N connections instead, as in ``make bench``:
what the server shares between clients (one store write per loop iteration, gathered batches) is then in the
count. Under valgrind every request of a loop iteration is ready at once, so the sharing is at its most.

``--cluster``: what routing over a Redis Cluster adds, the deterministic way: bench.cluster_bench's commands
(the MLP's model, input and output on three shards, then all in one slot, then the tensors in one slot and the
model on another shard) through our server in front of one valkey node and in front of a 3-primary cluster of
the same binary, and the ratio.

``--floor``: the same count for bench/model_floor.py (a server that only reads the MLP's MODELEXECUTE, runs the
model and writes its output to a store) instead, sent by redis-benchmark even at one client: the instructions
under the MLP rows that any server in Python runs.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import redis

from bench import model_floor
from bench.cluster_bench import one_node
from bench.common import print_table
from bench.compiled_bench import MLP_INPUT, ONE_KIB
from bench.datapath_bench import SHAPE, image, pool_linear_blob
from bench.graph_bench import chain_ops, piped
from server.store.cluster_keys import key_slot
from tests import models
from tests.cluster_support import local_cluster
from tests.support import free_port, wait_for_port

START_TIMEOUT_S = 600.0  # torch and onnxruntime imported under valgrind
IMAGE = image()
IMAGE_DIMS = tuple(str(dim) for dim in SHAPE)
Command = tuple[str | bytes, ...]
Commands = list[Command]
COMMANDS: tuple[tuple[str, Command], ...] = (
    ("PING", ("PING",)),
    ("SET 1 KiB", ("SET", "k", ONE_KIB)),
    ("AI.TENSORSET 1 KiB", ("AI.TENSORSET", "t", "FLOAT", "256", "BLOB", ONE_KIB)),
    ("AI.TENSORGET META BLOB", ("AI.TENSORGET", "t", "META", "BLOB")),
    ("AI.MODELEXECUTE TORCH", ("AI.MODELEXECUTE", "mt", "INPUTS", "1", "x", "OUTPUTS", "1", "yt")),
    ("AI.MODELEXECUTE ONNX", ("AI.MODELEXECUTE", "mo", "INPUTS", "1", "x", "OUTPUTS", "1", "yo")),
    ("TORCH BATCHSIZE 32", ("AI.MODELEXECUTE", "mb", "INPUTS", "1", "x", "OUTPUTS", "1", "yb")),
    ("3-op DAG", ("AI.DAGEXECUTE", "LOAD", "1", "x", "|>", "AI.MODELEXECUTE", "mt", "INPUTS", "1", "x",
                  "OUTPUTS", "1", "y", "|>", "AI.TENSORGET", "y", "META", "BLOB")),
    ("SET 602 KB", ("SET", "k602", IMAGE)),  # bench.datapath_bench's rows, at one client
    ("AI.TENSORSET 602 KB", ("AI.TENSORSET", "t602", "FLOAT", *IMAGE_DIMS, "BLOB", IMAGE)),
    ("AI.TENSORGET 602 KB BLOB", ("AI.TENSORGET", "img", "BLOB")),
    ("AI.MODELEXECUTE stored 602 KB", ("AI.MODELEXECUTE", "pool", "INPUTS", "1", "img", "OUTPUTS", "1", "pout")),
    ("GRAPHEXECUTE chain10 COMPILED", ("AI.GRAPHEXECUTE", "chain10", "INPUTS", "1", "in", "OUTPUTS", "1", "out")),
    ("GRAPHEXECUTE chain10 INTERPRETED", ("AI.GRAPHEXECUTE", "chain10", "INPUTS", "1", "in", "OUTPUTS", "1", "out",
                                          "MODE", "INTERPRETED")),  # bench.graph_bench's 10-op chain
)
CLUSTER_COMMANDS: tuple[tuple[str, Command], ...] = (  # bench.cluster_bench's
    ("AI.TENSORSET 1 KiB", ("AI.TENSORSET", "tensor0", "FLOAT", "256", "BLOB", ONE_KIB)),
    ("AI.TENSORGET META BLOB", ("AI.TENSORGET", "tensor0", "META", "BLOB")),
    ("AI.MODELEXECUTE, 3 shards", ("AI.MODELEXECUTE", "model3", "INPUTS", "1", "in0", "OUTPUTS", "1", "out2")),
    ("same, keys in one slot", ("AI.MODELEXECUTE", "{u}m", "INPUTS", "1", "{u}x", "OUTPUTS", "1", "{u}y")),
    ("same, tensors in one slot", ("AI.MODELEXECUTE", "model3", "INPUTS", "1", "{u}x", "OUTPUTS", "1", "{u}y")),
)


def callgrind_prefix(out: Path) -> list[str]:
    """The command line a counted process runs under: callgrind, instrumentation off until asked, dumping to
    ``out``."""
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]


@contextmanager
def counted_server(tree: Path, out: Path, options: tuple[str, ...]) -> Iterator[tuple[int, int]]:
    """Our server from ``tree`` under callgrind, instrumentation off; yields (port, valgrind's pid)."""
    port = free_port()
    command = [*callgrind_prefix(out), sys.executable, "-m", "server", "--port", str(port), "--log-level", "warning",
               "--inline-op-us", "100000", *options]
    proc = subprocess.Popen(command, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, timeout=START_TIMEOUT_S)
        yield port, proc.pid
    finally:
        proc.terminate()
        proc.wait(120)


def prepare(conn: redis.Redis) -> None:
    """The keys ``COMMANDS`` read, and those of ``CLUSTER_COMMANDS``."""
    conn.set("k", ONE_KIB)
    for tensor in ("t", "tensor0"):
        conn.execute_command("AI.TENSORSET", tensor, "FLOAT", 256, "BLOB", ONE_KIB)
    for model, backend, blob in (("mt", "TORCH", models.torch_mlp()), ("mo", "ONNX", models.onnx_mlp()),
                                 ("model3", "TORCH", models.torch_mlp()), ("{u}m", "TORCH", models.torch_mlp())):
        conn.execute_command("AI.MODELSTORE", model, backend, "CPU", "BLOB", blob)
    conn.execute_command("AI.MODELSTORE", "mb", "TORCH", "CPU", "BATCHSIZE", 32, "BLOB", models.torch_mlp())
    conn.execute_command("AI.MODELSTORE", "pool", "TORCH", "CPU", "BLOB", pool_linear_blob())
    conn.execute_command("AI.TENSORSET", "img", "FLOAT", *IMAGE_DIMS, "BLOB", IMAGE)
    conn.execute_command("AI.MODELSTORE", "dbl", "TORCH", "CPU", "BLOB", models.torch_double())
    conn.execute_command("AI.TENSORSET", "in", "FLOAT", 1, 4, "VALUES", 1, 2, 3, 4)
    conn.execute_command("AI.GRAPHSTORE", "chain10", "INPUTS", 1, "x", "OUTPUTS", 1, "y", *piped(chain_ops()))
    for tensor in ("x", "in0", "{u}x"):
        conn.execute_command("AI.TENSORSET", tensor, "FLOAT", 1, 64, "BLOB", MLP_INPUT)


def instructions(tree: Path, commands: Commands, requests: int, options: tuple[str, ...] = (),
                 clients: int = 1) -> list[float]:
    """The server's instructions per request of each of ``commands`` (its whole process: every thread), sent
    by one redis-py connection or by redis-benchmark's ``clients``, all through one server start (under
    valgrind a start costs minutes)."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "callgrind.out"
        with counted_server(tree, out, options) as (port, pid):
            conn = redis.Redis(port=port, socket_timeout=300)
            prepare(conn)
            counted = [count_requests(conn, port, pid, out, command, requests, clients) for command in commands]
            conn.close()
        return counted


def count_requests(conn: redis.Redis | None, port: int, pid: int, out: Path, command: Command, requests: int,
                   clients: int) -> float:
    """Instructions per request of the process ``pid`` runs under callgrind (dumping to ``out``): 200 requests
    to warm up, then ``requests`` with its instrumentation on, dumped on their own (a dump zeroes the counts;
    the dumps of earlier commands are left out)."""
    earlier = set(glob.glob(f"{out}*"))
    send_requests(conn, port, command, 200, clients)
    callgrind_control(pid, "-i", "on")
    send_requests(conn, port, command, requests, clients)
    callgrind_control(pid, "-i", "off")
    callgrind_control(pid, "-d")
    dumps = set(glob.glob(f"{out}*")) - earlier
    return sum(dump_total(Path(name)) for name in dumps) / requests


def send_requests(conn: redis.Redis | None, port: int, command: Command, requests: int, clients: int) -> None:
    """``requests`` of ``command``: one after another on ``conn``, or from redis-benchmark's ``clients`` (a
    bytes argument, the last, goes through its stdin; also at one client when there is no ``conn``)."""
    if clients == 1 and conn is not None:
        for _ in range(requests):
            conn.execute_command(*command)
        return
    *words, last = command
    blob = last if isinstance(last, bytes) else None
    args = [str(word) for word in (words if blob is not None else command)]
    subprocess.run(["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(clients), "-n", str(requests),
                    *(["-x"] if blob is not None else []), *args],
                   input=blob, capture_output=True, timeout=START_TIMEOUT_S * 2, check=True)


def callgrind_control(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True, timeout=120)


def dump_total(dump: Path) -> int:
    """The instruction count of one callgrind dump (its ``totals:`` line)."""
    with dump.open() as lines:
        for line in lines:
            if line.startswith("totals:"):
                return int(line.split()[1])
    return 0


class Counter(Protocol):
    def __call__(self, tree: Path, commands: Commands, requests: int, clients: int) -> list[float]: ...


def our_instructions(tree: Path, commands: Commands, requests: int, clients: int) -> list[float]:
    """``instructions`` with no server options: a ``Counter``."""
    return instructions(tree, commands, requests, clients=clients)


def trees_side_by_side(trees: list[Path], commands: tuple[tuple[str, Command], ...], requests: int,
                       clients: int, count: Counter = our_instructions, whose: str = "our server") -> None:
    """``count`` of each command in each tree, and each other tree's ratio to the first."""
    per_tree = [count(tree, [command for _name, command in commands], requests, clients) for tree in trees]
    rows = []
    for row, (name, _command) in enumerate(commands):
        counts = [tree_counts[row] for tree_counts in per_tree]
        rows.append([name, *(f"{n:,.0f}" for n in counts), *(f"{n / counts[0]:.2f}" for n in counts[1:])])
    who = "one client" if clients == 1 else f"{clients} redis-benchmark clients"
    print_table(f"Instructions per request, {who}, {whose} under callgrind ({requests} requests)",
                ["command", *(str(tree) for tree in trees), *(f"{tree.name} / this tree" for tree in trees[1:])],
                rows)


def arguments(description: str, cluster: bool) -> argparse.Namespace:
    """The command line of this module (``cluster``: with ``--cluster``) and of bench.store_instructions."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300, help="requests counted per command")
    parser.add_argument("--clients", type=int, default=1, help="redis-benchmark connections (1: one redis-py)")
    parser.add_argument("--tree", action="append", default=[], help="another compiled checkout to measure too")
    parser.add_argument("--only", action="append", default=[], help="only the commands named so (repeatable)")
    if cluster:
        parser.add_argument("--cluster", action="store_true", help="one store node against a 3-primary cluster")
        parser.add_argument("--floor", action="store_true",
                            help="only bench/model_floor.py's count for the MLP's MODELEXECUTE instead")
    return parser.parse_args()


def valgrind_missing(program: str) -> bool:
    """Whether valgrind is missing (then said, and the benchmark skipped)."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print(f"{program}: valgrind is not installed (Debian: apt-get install valgrind); skipped")
        return True
    return False


def node_and_cluster(tree: Path, commands: tuple[tuple[str, Command], ...], requests: int, clients: int) -> None:
    """``commands`` through our server on one valkey node, then on a 3-primary cluster, and the ratio."""
    assert len({key_slot(key) for key in (b"model3", b"in0", b"out2")}) == 3
    slow = ("--cluster-node-timeout-ms", "600000")  # a node is not hung because valgrind makes us slow
    with one_node() as (url, _pids):
        single = instructions(tree, [command for _name, command in commands], requests, ("--redis-url", url), clients)
    with local_cluster(primaries=3, replicas=0) as cluster:
        spread = instructions(tree, [command for _name, command in commands], requests,
                              ("--redis-url", cluster.seed_url, *slow), clients)
    rows = [[name, f"{one:,.0f}", f"{many:,.0f}", f"{many / one:.2f}"]
            for (name, _command), one, many in zip(commands, single, spread, strict=True)]
    who = "one client" if clients == 1 else f"{clients} redis-benchmark clients"
    print_table(f"Instructions per request, {who}, our server under callgrind ({requests} requests): "
                "in front of one valkey node, and of a 3-primary cluster",
                ["command", "one node", "cluster", "cluster / one node"], rows)


def floor_instructions(requests: int, clients: int) -> float:
    """bench/model_floor.py's instructions per request (its whole process) for the MLP's MODELEXECUTE."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "callgrind.out"
        with model_floor.running(callgrind_prefix(out), START_TIMEOUT_S) as floor:
            return count_requests(None, floor.port, floor.pid, out, model_floor.COMMAND, requests, clients)


def main() -> None:
    args = arguments(__doc__ or "", cluster=True)
    if valgrind_missing("bench.instructions"):
        return
    if args.floor:
        who = "one client" if args.clients == 1 else f"{args.clients} redis-benchmark clients"
        print(f"bench/model_floor.py, the MLP's AI.MODELEXECUTE, {who}: "
              f"{floor_instructions(args.requests, args.clients):,.0f} instructions per request")
        return
    here = Path(os.getcwd())
    table = CLUSTER_COMMANDS if args.cluster else COMMANDS
    chosen = tuple(row for row in table if not args.only or row[0] in args.only)
    if args.cluster:
        node_and_cluster(here, chosen, args.requests, args.clients)
    else:
        trees_side_by_side([here, *(Path(tree).resolve() for tree in args.tree)], chosen, args.requests, args.clients)


if __name__ == "__main__":
    main()
