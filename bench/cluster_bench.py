"""The cost of routing over a Redis Cluster: the same AI commands through our server on one store node and on a
3-primary cluster of the same binary (valkey-server), measured in alternating rounds with every server up.

Usage: python -m bench.cluster_bench [--requests N] [--rounds R] [--clients N] [--only NAME ...]
                                     [--server-args '...']

For AI.TENSORSET, AI.TENSORGET and AI.MODELEXECUTE (the 64→128→10 MLP, TORCH; the model, its input and its
output on three different shards of the cluster, then all three in one slot, then the input and output in one
slot and the model on another shard: hash-tagged tensors, one model key), prints requests/s, p50/p99,
our server's CPU µs per request (and the store nodes' together), and the ratio to one node of our CPU per
request. Four servers run at once — in front of one node and of the cluster, each with its default metadata
cache (on a cluster: one tracking connection per primary, server/store/cache.py) and with
``--cache-mb 0`` — and each command is measured on the four back to back, ``--rounds`` times, the order
rotated each round. Why: a shared VM's speed drifts within minutes, so a ratio of two runs minutes apart
moves with it. A ratio of two runs seconds apart, taken each round, is less exposed to the drift; the table gives
its median over the rounds, with the lowest and highest round to show how far one round can be trusted. The
other figures are medians over the rounds. "one, no cache" runs on the same store as "one node": its ratio is
the control, the method's own noise.
``--clients``: redis-benchmark's connections (50; fewer shows where a cluster run's shared sends begin);
``--only``: the rows to measure, by name.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

import numpy as np
import redis

from bench.common import CELL_NAMES, Measured, Target, cpu_seconds, measure, our_server, print_table, target
from server.store.cluster_keys import key_slot
from server.store.process import find_store_binary
from tests import models
from tests.cluster_support import local_cluster
from tests.support import free_port, wait_for_port

CHEAP_COMMAND_FACTOR = 4  # TENSORSET/GET cost ~5x less: more requests for as many CPU clock ticks


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


@dataclass(frozen=True, slots=True)
class Command:
    """One benchmarked command: its row name, its arguments and (TENSORSET) its last argument via stdin."""

    name: str
    args: list[str]
    stdin: bytes | None = None
    factor: int = 1


def _commands() -> list[Command]:
    blob = b"ABCD" * 256  # redis-benchmark -x stops at a NUL byte
    return [
        Command("AI.TENSORSET 1 KiB", ["AI.TENSORSET", "tensor0", "FLOAT", "256", "BLOB"], blob,
                CHEAP_COMMAND_FACTOR),
        Command("AI.TENSORGET META BLOB", ["AI.TENSORGET", "tensor0", "META", "BLOB"], None, CHEAP_COMMAND_FACTOR),
        Command("AI.MODELEXECUTE MLP", ["AI.MODELEXECUTE", "model3", "INPUTS", "1", "in0", "OUTPUTS", "1", "out2"]),
        Command("same, keys in one slot", ["AI.MODELEXECUTE", "{u}m", "INPUTS", "1", "{u}x", "OUTPUTS", "1", "{u}y"]),
        Command("same, tensors in one slot",
                ["AI.MODELEXECUTE", "model3", "INPUTS", "1", "{u}x", "OUTPUTS", "1", "{u}y"]),
    ]


@dataclass(slots=True)
class Contender:
    """One of our servers in front of one store, and what each round measured of it."""

    label: str
    where: Target
    store_pids: list[int]
    rounds: list[tuple[Measured, float]] = field(default_factory=list)

    def run(self, command: Command, requests: int, clients: int) -> tuple[Measured, float]:
        """One measurement: redis-benchmark's figures, then the store nodes' CPU µs per request."""
        before = sum(cpu_seconds(pid) for pid in self.store_pids)
        measured = measure(self.where, command.args, requests, clients, stdin=command.stdin)
        return measured, (sum(cpu_seconds(pid) for pid in self.store_pids) - before) * 1e6 / requests

    def median(self) -> tuple[Measured, float]:
        """Each figure's median over the rounds."""
        columns = list(zip(*((m.rps, m.p50_ms, m.p99_ms, m.cpu_us, store) for m, store in self.rounds), strict=True))
        rps, p50, p99, cpu, store = (statistics.median(column) for column in columns)
        return Measured(rps, p50, p99, cpu), store


def _prepare(port: int) -> None:
    """The models and inputs every command reads, stored through the server at ``port``."""
    x = np.random.default_rng(0).standard_normal((1, 64), dtype=np.float32)
    conn = redis.Redis(port=port)
    for model, tensor in (("model3", "in0"), ("{u}m", "{u}x")):
        conn.execute_command("AI.MODELSTORE", model, "TORCH", "CPU", "BLOB", models.torch_mlp())
        conn.execute_command("AI.TENSORSET", tensor, "FLOAT", 1, 64, "BLOB", x.tobytes())
    conn.close()


def _rounds(contenders: Sequence[Contender], command: Command, requests: int, rounds: int, clients: int) -> None:
    """Warm every server, then measure each on ``command`` once a round, the order rotated each round."""
    count = requests * command.factor
    for contender in contenders:
        contender.rounds.clear()
        contender.run(command, max(count // 5, clients), clients)
    for number in range(rounds):
        shift = number % len(contenders)
        for contender in [*contenders[shift:], *contenders[:shift]]:
            contender.rounds.append(contender.run(command, count, clients))


def _ratio_cell(contender: Contender, one: Contender) -> str:
    """The median of the rounds' CPU ratios to one node, with the lowest and highest round."""
    ratios = sorted(mine.cpu_us / theirs.cpu_us
                    for (mine, _), (theirs, _) in zip(contender.rounds, one.rounds, strict=True) if theirs.cpu_us)
    if not ratios:
        return "-"
    return f"{statistics.median(ratios):.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})"


def _rows(command: Command, contenders: Sequence[Contender]) -> list[list[str]]:
    rows = []
    for contender in contenders:
        measured, store_us = contender.median()
        ratio = _ratio_cell(contender, contenders[0]) if contender is not contenders[0] else ""
        rows.append([command.name if contender is contenders[0] else "", contender.label, *measured.cells(),
                     f"{store_us:.1f}", ratio])
    return rows


def _contenders(stack: ExitStack, extra: Sequence[str]) -> tuple[list[Contender], int]:
    """Our four servers: one node and the cluster, each with its cache and with ``--cache-mb 0``; and over how
    many shards the cluster spreads the first MODELEXECUTE's model, input and output."""
    url, single_pids = stack.enter_context(one_node())
    cluster = stack.enter_context(local_cluster(primaries=3, replicas=0))
    cluster_pids = [node.proc.pid for node in cluster.nodes]
    spread = len({cluster.node_of_slot(key_slot(key)).port for key in (b"model3", b"in0", b"out2")})
    contenders = []
    for label, store_url, pids, options in (("one node", url, single_pids, ()),
                                            ("one, no cache", url, single_pids, ("--cache-mb", "0")),
                                            ("cluster", cluster.seed_url, cluster_pids, ()),
                                            ("cluster, no cache", cluster.seed_url, cluster_pids, ("--cache-mb", "0"))):
        port = stack.enter_context(our_server("--redis-url", store_url, *options, *extra))
        contenders.append(Contender(label, target("ours", port), pids))
    _prepare(contenders[0].where.port)
    _prepare(contenders[2].where.port)
    return contenders, spread


def run(requests: int, rounds: int, clients: int, only: Sequence[str], extra: list[str]) -> None:
    assert len({key_slot(k) for k in (b"model3", b"in0", b"out2")}) == 3
    table = []
    with ExitStack() as stack:
        contenders, spread = _contenders(stack, extra)
        for command in _commands():
            if not only or command.name in only:
                _rounds(contenders, command, requests, rounds, clients)
                table.extend(_rows(command, contenders))
    print_table(f"Routing over a 3-primary cluster (model, input and output on {spread} shards), {clients} clients, "
                f"{rounds} alternating rounds of {requests:,} requests ({requests * CHEAP_COMMAND_FACTOR:,} for "
                "TENSORSET/GET); medians; CPU: our server, then the store nodes together; ratio: the rounds' median "
                "(lowest-highest)",
                ["command", "store", *CELL_NAMES, "store CPU us/req", "ours cluster/one"], table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2500, help="MODELEXECUTE requests per server per round")
    parser.add_argument("--rounds", type=int, default=12, help="rounds; each measures every server once")
    parser.add_argument("--clients", type=int, default=50, help="redis-benchmark's connections")
    parser.add_argument("--only", action="append", default=[], help="only this row (repeatable), e.g. "
                        "'AI.MODELEXECUTE MLP'")
    parser.add_argument("--server-args", default="", help="more options for every server, e.g. '--inline-op-us 0'")
    args = parser.parse_args()
    run(args.requests, args.rounds, args.clients, args.only, args.server_args.split())


if __name__ == "__main__":
    main()
