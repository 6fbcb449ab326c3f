"""Runs of a model whose slot holds none of their outputs share its check (server/store/shared_checks.py): the
runs of one loop iteration send one digest check (with their AI.INFO counters summed) to the model's shard,
not one each — and still each is counted, answered, and done again when the model changed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from server.config import Config
from tests.cluster_support import LocalCluster, keys_on_three_shards, lose_pushes, owner
from tests.integration.test_cluster_cache import ONE_TWO, THREE_FOUR
from tests.models import torch_add, torch_mul
from tests.support import RunningServer, loop_held, running_server

CONNECTIONS = 8
RUNS_EACH = 6  # pipelined on each connection: 48 runs arrive together
RUNS = CONNECTIONS * RUNS_EACH
# the 8 connections' first runs are read in one loop iteration (the loop held while they were sent) and run
# there (inline): the first two send their check with their write (Keyspace's JOIN_WHEN_WAITING), the other 6
# join one; later runs may share or not
MOST_CHECKS = RUNS - (CONNECTIONS - 3)


@pytest.fixture
def two_servers(cluster: LocalCluster) -> Iterator[tuple[RunningServer, RunningServer]]:
    """Ours, whose model runs all stay on its loop thread (so runs read together run together), and theirs."""
    with (running_server(Config(port=0, redis_url=cluster.seed_url, shutdown_timeout=2.0, inline_op_us=10**6)) as ours,
          running_server(Config(port=0, redis_url=cluster.seed_url, shutdown_timeout=2.0)) as theirs):
        yield ours, theirs




@pytest.fixture
def model_apart(cluster: LocalCluster) -> tuple[str, str, str, str]:
    """The two inputs and the outputs hash-tagged into one slot, the model on another shard."""
    model = next(k for k in keys_on_three_shards(cluster, "sc") if owner(cluster, k).port != owner(cluster, "{sc}a").port)
    return model, "{sc}a", "{sc}b", "{sc}out"


def _command(*args: str | int) -> bytes:
    parts = [str(arg).encode() for arg in args]
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(part), part) for part in parts)


def _runs_together(server: RunningServer, model: str, a: str, b: str, out: str) -> None:
    """``CONNECTIONS`` connections each send ``RUNS_EACH`` pipelined runs (each its own output), all sent while
    the server's loop is held; every run must answer OK."""
    clients = [server.raw() for _ in range(CONNECTIONS)]
    try:
        with loop_held(server):
            for n, client in enumerate(clients):
                client.send(b"".join(_command("AI.MODELEXECUTE", model, "INPUTS", 2, a, b, "OUTPUTS", 1,
                                              f"{out}{n}.{i}") for i in range(RUNS_EACH)))
        for client in clients:
            assert client.read_exactly(b"+OK\r\n" * RUNS_EACH) == b"+OK\r\n" * RUNS_EACH
    finally:
        for client in clients:
            client.close()


def _outputs(conn: redis.Redis, out: str) -> list[list[float]]:
    return [[float(v) for v in conn.execute_command("AI.TENSORGET", f"{out}{n}.{i}", "VALUES")]
            for n in range(CONNECTIONS) for i in range(RUNS_EACH)]


def _counted(conn: redis.Redis, model: str, field: bytes) -> int:
    info = conn.execute_command("AI.INFO", model)
    return int(info[info.index(field) + 1])


def _stored_and_warmed(conn: redis.Redis, layout: tuple[str, str, str, str]) -> None:
    """The model (adding its two inputs) stored, its inputs set, and two runs made: its metadata is cached, and
    its cost measured on a worker, then on the loop thread (where it stays: ``two_servers``)."""
    model, a, b, out = layout
    conn.execute_command("AI.MODELSTORE", model, "TORCH", "CPU", "BLOB", torch_add())
    conn.execute_command("AI.TENSORSET", a, "FLOAT", 2, "BLOB", ONE_TWO)
    conn.execute_command("AI.TENSORSET", b, "FLOAT", 2, "BLOB", THREE_FOUR)
    for _ in range(2):
        assert conn.execute_command("AI.MODELEXECUTE", model, "INPUTS", 2, a, b, "OUTPUTS", 1, f"{out}warm") == b"OK"


def _checks_sent(node: redis.Redis) -> int:
    return int(node.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def test_runs_arriving_together_share_the_models_check_and_each_is_counted(
        cluster: LocalCluster, two_servers: tuple[RunningServer, RunningServer],
        model_apart: tuple[str, str, str, str]) -> None:
    model, a, b, out = model_apart
    conn = two_servers[0].client()
    _stored_and_warmed(conn, model_apart)
    models_node = owner(cluster, model).client()
    models_node.config_resetstat()
    _runs_together(two_servers[0], model, a, b, out)
    assert _outputs(conn, out) == [[4.0, 6.0]] * RUNS
    assert _counted(conn, model, b"calls") == RUNS + 2  # the two warm-up runs too
    assert _counted(two_servers[1].client(), model, b"samples") == 2 * (RUNS + 2)  # dim 0 of each; any server
    assert 0 < _checks_sent(models_node) <= MOST_CHECKS


def test_runs_sharing_a_stale_check_are_each_done_again_with_the_stored_model(
        cluster: LocalCluster, two_servers: tuple[RunningServer, RunningServer], model_apart: tuple[str, str, str, str]) -> None:
    """Our pushes lost, the model replaced through the other server: the shared check answers STALEMODEL to
    every run that joined it (the model's node answers fewer STALEMODELs than runs were stale), and each is
    done again with the new model before its OK; AI.INFO counts each run once (the re-store zeroed the
    counters; a redo adds nothing)."""
    model, a, b, out = model_apart
    ours, theirs = (server.client() for server in two_servers)
    _stored_and_warmed(ours, model_apart)
    lose_pushes(two_servers[0])
    theirs.execute_command("AI.MODELSTORE", model, "TORCH", "CPU", "BLOB", torch_mul())
    models_node = owner(cluster, model).client()
    models_node.config_resetstat()
    _runs_together(two_servers[0], model, a, b, out)
    assert _outputs(ours, out) == [[3.0, 8.0]] * RUNS
    assert _counted(theirs, model, b"calls") == RUNS
    stale_answers = models_node.info("errorstats")["errorstat_STALEMODEL"]["count"]
    assert stale_answers < CONNECTIONS  # the 8 stale runs read together: 3 checks (two with their writes, 6 joined)


@pytest.fixture
def inputs_apart(cluster: LocalCluster) -> tuple[str, str, str, str]:
    """The model and the outputs in one slot, each input on another shard."""
    out = "{si}out"
    a, b = (k for k in keys_on_three_shards(cluster, "si") if owner(cluster, k).port != owner(cluster, out).port)
    return "{si}m", a, b, out


def test_runs_arriving_together_share_their_inputs_checks_and_each_redoes_a_stale_one(
        cluster: LocalCluster, two_servers: tuple[RunningServer, RunningServer],
        inputs_apart: tuple[str, str, str, str]) -> None:
    """Inputs on other shards than the outputs come from the cache and are checked on their shards, the runs of
    one loop iteration that took the same value sharing one check. Our pushes lost, an input replaced through
    the other server: every run answers OK with the new value's result, the input's node answering fewer
    STALEINPUTs than runs were stale; AI.INFO counts each run once."""
    model, a, b, out = inputs_apart
    ours, theirs = (server.client() for server in two_servers)
    _stored_and_warmed(ours, inputs_apart)
    _runs_together(two_servers[0], model, a, b, out)  # outputs we wrote: no type check, so no read of the inputs
    lose_pushes(two_servers[0])
    theirs.execute_command("AI.TENSORSET", a, "FLOAT", 2, "BLOB", THREE_FOUR)
    inputs_node = owner(cluster, a).client()
    inputs_node.config_resetstat()
    _runs_together(two_servers[0], model, a, b, out)
    assert _outputs(ours, out) == [[6.0, 8.0]] * RUNS
    assert _counted(theirs, model, b"calls") == 2 * RUNS + 2
    stale_answers = inputs_node.info("errorstats")["errorstat_STALEINPUT"]["count"]
    assert 0 < stale_answers < CONNECTIONS  # the 8 stale runs read together: 3 checks (two with their writes)
    assert 0 < _checks_sent(inputs_node) <= MOST_CHECKS  # (12 seen: the input's checks shared too)
