"""Stored graphs end to end (AI.GRAPHSTORE / GRAPHEXECUTE / GRAPHGET / GRAPHDEL / _GRAPHSCAN), on both stores."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

import pytest
import redis

from backends.errors import AIError
from server.config import Config
from tests import models
from tests.scripts import SCRIPT
from tests.support import RunningServer, assert_overlapped, running_server, wait_until

RUNS_ON_CLUSTER = True  # also run against a 3-primary Redis Cluster (tests/conftest.py)

MODES = ("COMPILED", "INTERPRETED")
Clients = tuple[redis.Redis, redis.Redis, redis.Redis]


def _store(conn: redis.Redis, key: str, blob: bytes, device: str = "CPU") -> None:
    conn.execute_command("AI.MODELSTORE", key, "TORCH", device, "BLOB", blob)


def _op(model: str, inputs: list[str], outputs: list[str]) -> list[object]:
    return ["|>", "AI.MODELEXECUTE", model, "INPUTS", len(inputs), *inputs, "OUTPUTS", len(outputs), *outputs]


def _graph(conn: redis.Redis, key: str, inputs: list[str], outputs: list[str], *ops: list[object]) -> Any:
    parts = [part for op in ops for part in op]
    return conn.execute_command("AI.GRAPHSTORE", key, "INPUTS", len(inputs), *inputs, "OUTPUTS", len(outputs),
                                *outputs, *parts)


def _execute(conn: redis.Redis, key: str, inputs: list[str], outputs: list[str], *extra: object) -> Any:
    return conn.execute_command("AI.GRAPHEXECUTE", key, "INPUTS", len(inputs), *inputs, "OUTPUTS", len(outputs),
                                *outputs, *extra)


def tensor_values(conn: redis.Redis, key: str) -> list[float]:
    return [float(value) for value in conn.execute_command("AI.TENSORGET", key, "VALUES")]


def _info(conn: redis.Redis, key: str) -> dict[bytes, Any]:
    reply = conn.execute_command("AI.INFO", key)
    return dict(zip(reply[::2], reply[1::2], strict=True))


def _diamond(conn: redis.Redis) -> None:
    """x, k=[10,20] → s = x + k (CPU) → d = 2s (CPU:1); z = d + s (CPU)."""
    _store(conn, "add", models.torch_add())
    _store(conn, "dbl", models.torch_double(), "CPU:1")
    _graph(conn, "g", ["x"], ["d", "z"], ["|>", "AI.TENSORSET", "k", "FLOAT", 2, "VALUES", 10, 20],
           _op("add", ["x", "k"], ["s"]), _op("dbl", ["s"], ["d"]), _op("add", ["d", "s"], ["z"]))


@pytest.mark.parametrize("mode", MODES)
def test_a_graph_runs_in_both_modes_and_writes_its_outputs(client: redis.Redis, mode: str) -> None:
    _diamond(client)
    client.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "VALUES", 1, 2)
    for _ in range(3):  # the first run binds the graph and measures it; later ones reuse that
        assert _execute(client, "g", ["a"], ["od", "oz"], "MODE", mode) == b"OK"
        assert tensor_values(client, "od") == [22, 44] and tensor_values(client, "oz") == [33, 66]
    assert not any(client.exists(name) for name in ("s", "k", "d", "z"))  # graph-local names stay local
    info = _info(client, "g")
    assert (info[b"type"], info[b"calls"], info[b"errors"], info[b"samples"]) == (b"GRAPH", 3, 0, -1)
    assert info[b"duration"] > 0
    assert _info(client, "add")[b"calls"] == 6 and _info(client, "dbl")[b"calls"] == 3


def test_graphget_graphdel_graphscan_and_type(client: redis.Redis) -> None:
    _diamond(client)
    client.execute_command("AI.GRAPHSTORE", "h", "TAG", "v2", "INPUTS", 1, "x", "OUTPUTS", 1, "y",
                           *_op("later", ["x"], ["y"]))
    meta = client.execute_command("AI.GRAPHGET", "g")
    fields = dict(zip(meta[::2], meta[1::2], strict=True))
    assert fields[b"inputs"] == [b"x"] and fields[b"outputs"] == [b"d", b"z"] and fields[b"ops"] == 4
    assert fields[b"models"] == [b"add", b"dbl"] and fields[b"scripts"] == [] and fields[b"slots"] == 5
    assert fields[b"order"] == [1, 2, 3, 4] and fields[b"deps"] == [0, 0, 1, 2]
    assert fields[b"devices"] == [[b"CPU", [2, 4]], [b"CPU:1", [3]]]
    source = client.execute_command("AI.GRAPHGET", "g", "SOURCE")
    assert source[:4] == [b"INPUTS", b"1", b"x", b"OUTPUTS"] and source.count(b"|>") == 4
    both = client.execute_command("AI.GRAPHGET", "g", "META", "SOURCE")
    assert both[-2:] == [b"source", source]
    assert client.execute_command("AI.GRAPHSTORE", "g2", *source) == b"OK"  # the source stores it again
    assert sorted(client.execute_command("AI._GRAPHSCAN")) == [[b"g", b""], [b"g2", b""], [b"h", b"v2"]]
    assert client.execute_command("TYPE", "g") == b"AI_GRAPH"
    assert client.execute_command("AI.GRAPHDEL", "g") == b"OK"
    with pytest.raises(redis.ResponseError, match=r"^graph key is empty$"):
        client.execute_command("AI.GRAPHDEL", "g")
    with pytest.raises(redis.ResponseError, match=r"^graph key is empty$"):
        client.execute_command("AI.GRAPHGET", "g")
    with pytest.raises(redis.ResponseError, match=r"^graph key is empty$"):
        _execute(client, "g", ["a"], ["b", "c"])
    with pytest.raises(redis.ResponseError, match=r"^cannot find run info for key$"):
        client.execute_command("AI.INFO", "g")


def test_wrong_key_types_both_ways(client: redis.Redis) -> None:
    _diamond(client)
    client.execute_command("AI.TENSORSET", "t", "FLOAT", 2, "VALUES", 1, 2)
    client.set("plain", "v")
    wrong = "^WRONGTYPE Operation against a key holding the wrong kind of value$"
    for command in (("AI.GRAPHEXECUTE", "t", "INPUTS", 1, "t", "OUTPUTS", 2, "o", "p"),
                    ("AI.GRAPHEXECUTE", "add", "INPUTS", 1, "t", "OUTPUTS", 2, "o", "p"),
                    ("AI.GRAPHGET", "plain"), ("AI.GRAPHDEL", "add"), ("AI.GRAPHDEL", "t"),
                    ("AI.GRAPHSTORE", "add", "INPUTS", 1, "x", "OUTPUTS", 1, "y", *_op("add", ["x", "x"], ["y"])),
                    ("AI.GRAPHSTORE", "t", "INPUTS", 1, "x", "OUTPUTS", 1, "y", *_op("add", ["x", "x"], ["y"])),
                    ("AI.MODELGET", "g"), ("AI.MODELDEL", "g"), ("AI.SCRIPTGET", "g"), ("AI.TENSORGET", "g"),
                    ("AI.TENSORSET", "g", "FLOAT", 1, "VALUES", 1), ("AI.MODELEXECUTE", "g", "INPUTS", 1, "t",
                                                                      "OUTPUTS", 1, "o"),
                    ("AI.MODELSTORE", "g", "TORCH", "CPU", "BLOB", models.torch_add()),
                    ("AI.MODELEXECUTE", "add", "INPUTS", 2, "g", "t", "OUTPUTS", 1, "o"),
                    ("AI.GRAPHEXECUTE", "g", "INPUTS", 1, "g", "OUTPUTS", 2, "o", "p"),
                    ("AI.GRAPHEXECUTE", "g", "INPUTS", 1, "t", "OUTPUTS", 2, "plain", "p")):
        with pytest.raises(redis.ResponseError, match=wrong):
            client.execute_command(*command)
    assert client.get("plain") == b"v" and client.execute_command("TYPE", "g") == b"AI_GRAPH"


def test_store_time_errors_name_the_op_and_store_nothing(client: redis.Redis) -> None:
    for ops, message in (
        ([_op("m", ["x"], ["t"]), _op("m", ["q"], ["y"])],
         "ERR graph op 2: 'q' is not defined (neither a graph input nor the output of an op)"),
        ([_op("m", ["x"], ["y"]), ["|>", "AI.TENSORGET", "y"]],
         "ERR graph op 2: AI.TENSORGET is not a graph op (AI.MODELEXECUTE, AI.SCRIPTEXECUTE, AI.TENSORSET)"),
        ([_op("m", ["x", "b"], ["a"]), _op("m", ["a"], ["b"]), _op("m", ["a"], ["y"])],
         "ERR graph op 1: the graph has a cycle through this op"),
        ([_op("m", ["x"], ["t"])], "ERR graph output 'y' is not produced by any op nor a graph input"),
        ([["|>", "AI.MODELEXECUTE", "m", "INPUTS", 1, "x"]],
         "ERR graph op 1: wrong number of arguments for 'AI.MODELEXECUTE' command"),
    ):
        with pytest.raises(redis.ResponseError) as caught:
            _graph(client, "bad", ["x"], ["y"], *ops)
        assert str(caught.value) == message.removeprefix("ERR ")
    assert client.exists("bad") == 0


@pytest.mark.parametrize("mode", MODES)
def test_run_time_errors_match_the_dag_engine(client: redis.Redis, mode: str) -> None:
    _store(client, "mm", models.torch_matmul())
    _graph(client, "g", ["x"], ["y"], _op("later", ["x"], ["y"]))
    client.execute_command("AI.TENSORSET", "a", "FLOAT", 2, 3, "VALUES", 1, 2, 3, 4, 5, 6)
    with pytest.raises(redis.ResponseError, match=r"^model key is empty$"):
        _execute(client, "g", ["a"], ["o"], "MODE", mode)
    with pytest.raises(redis.ResponseError, match=r"^tensor key is empty or in a different shard$"):
        _execute(client, "g", ["missing"], ["o"], "MODE", mode)
    with pytest.raises(redis.ResponseError, match=r"^the graph has 1 inputs, 2 given$"):
        _execute(client, "g", ["a", "a"], ["o"], "MODE", mode)
    _graph(client, "bad", ["x"], ["y"], _op("mm", ["x", "x"], ["y"]))  # 2x3 @ 2x3: the backend refuses
    with pytest.raises(redis.ResponseError) as caught:
        _execute(client, "bad", ["a"], ["o"], "MODE", mode)
    dag = client.execute_command("AI.DAGEXECUTE", "LOAD", 1, "a", "|>", "AI.MODELEXECUTE", "mm", "INPUTS", 2, "a", "a",
                                 "OUTPUTS", 1, "o")
    assert str(caught.value) == str(dag[0])
    assert client.exists("o") == 0 and _info(client, "bad")[b"errors"] == 1


@pytest.mark.parametrize("mode", MODES)
def test_a_replaced_model_is_picked_up_on_the_next_run(client: redis.Redis, mode: str) -> None:
    _store(client, "m", models.torch_double())
    _graph(client, "g", ["x"], ["y"], _op("m", ["x"], ["y"]))
    client.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "VALUES", 1, 2)
    assert _execute(client, "g", ["a"], ["o"], "MODE", mode) == b"OK" and tensor_values(client, "o") == [2, 4]
    client.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", models.torch_sum_rows())
    assert _execute(client, "g", ["a"], ["o"], "MODE", mode) == b"OK" and tensor_values(client, "o") == [3]


def test_a_script_op_and_a_constant(client: redis.Redis) -> None:
    client.execute_command("AI.SCRIPTSTORE", "s", "CPU", "ENTRY_POINTS", 1, "bar", "SOURCE", SCRIPT)
    _store(client, "dbl", models.torch_double())
    client.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "VALUES", 1, 2)
    client.execute_command("AI.GRAPHSTORE", "g", "INPUTS", 1, "x", "OUTPUTS", 1, "y",
                           "|>", "AI.TENSORSET", "k", "FLOAT", 2, "VALUES", 3, 4,
                           "|>", "AI.SCRIPTEXECUTE", "s", "bar", "INPUTS", 2, "x", "k", "OUTPUTS", 1, "t",
                           *_op("dbl", ["t"], ["y"]))
    results = []
    for mode in MODES:
        assert _execute(client, "g", ["a"], ["o"], "MODE", mode) == b"OK"
        results.append(tensor_values(client, "o"))
    assert results[0] == results[1] and results[0] == [8, 12]  # bar adds its two inputs


@pytest.mark.parametrize("mode", MODES)
def test_timeout_gives_timedout_and_writes_nothing(server: RunningServer, mode: str) -> None:
    conn = server.client()
    _store(conn, "slow", models.torch_slow())
    conn.execute_command("AI.TENSORSET", "x", "FLOAT", 256, 256, "BLOB", bytes(256 * 256 * 4))
    _graph(conn, "g", ["x"], ["z"], _op("slow", ["x"], ["y"]), _op("slow", ["y"], ["z"]))
    assert _execute(conn, "g", ["x"], ["z"], "TIMEOUT", 1, "MODE", mode) == b"TIMEDOUT"
    assert conn.exists("z") == 0 and _info(conn, "g")[b"errors"] == 1


@pytest.mark.parametrize("mode", MODES)
def test_an_error_in_one_branch_stops_the_others(server: RunningServer, mode: str) -> None:
    """Branch A (CPU:0): slow then slow; branch B (CPU:1): a failing matmul. B fails while A's first op runs, so
    A's second op never runs; the reply is B's error, sent after A's running op ended, and nothing is written."""
    conn = server.client()
    _store(conn, "slow", models.torch_slow(), "CPU:0")
    _store(conn, "mm", models.torch_matmul(), "CPU:1")
    conn.execute_command("AI.TENSORSET", "x", "FLOAT", 256, 256, "BLOB", bytes(256 * 256 * 4))
    conn.execute_command("AI.TENSORSET", "bad", "FLOAT", 2, 3, "VALUES", 1, 2, 3, 4, 5, 6)
    _graph(conn, "g", ["x", "b"], ["a2", "yb"], _op("slow", ["x"], ["a1"]), _op("slow", ["a1"], ["a2"]),
           _op("mm", ["b", "b"], ["yb"]))
    executed = server.server.ctx.ai.queues.queue("CPU:0").executed
    with pytest.raises(redis.ResponseError, match=r"size mismatch|mat1 and mat2|shapes cannot be multiplied"):
        _execute(conn, "g", ["x", "bad"], ["oa", "ob"], "MODE", mode)
    assert server.server.ctx.ai.queues.queue("CPU:0").executed - executed <= 1  # A's second op never ran
    assert conn.exists("oa") == 0 and conn.exists("ob") == 0


def test_fifty_concurrent_clients_on_one_graph(server: RunningServer) -> None:
    setup = server.client()
    _store(setup, "add", models.torch_add(), "CPU:0")
    _store(setup, "dbl", models.torch_double(), "CPU:1")
    _graph(setup, "g", ["v"], ["y"], _op("add", ["v", "v"], ["w"]), _op("dbl", ["w"], ["y"]))
    errors: list[str] = []

    def one(value: int) -> None:
        conn = server.client()
        conn.execute_command("AI.TENSORSET", f"in{value}", "INT64", 1, "VALUES", value)
        for mode in (*MODES, "COMPILED"):
            reply = _execute(conn, "g", [f"in{value}"], [f"out{value}"], "MODE", mode)
            got = conn.execute_command("AI.TENSORGET", f"out{value}", "VALUES")
            if reply != b"OK" or got != [value * 4]:
                errors.append(f"{value} {mode}: {reply!r} {got!r}")
        conn.close()

    threads = [threading.Thread(target=one, args=(value,)) for value in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == [] and not any(thread.is_alive() for thread in threads)
    assert _info(setup, "g")[b"calls"] == 150


def test_disconnecting_mid_run_writes_nothing_and_the_server_goes_on(server: RunningServer) -> None:
    conn = server.client()
    _store(conn, "slow", models.torch_slow())
    conn.execute_command("AI.TENSORSET", "x", "FLOAT", 256, 256, "BLOB", bytes(256 * 256 * 4))
    _graph(conn, "g", ["x"], ["z"], _op("slow", ["x"], ["y"]), _op("slow", ["y"], ["z"]))
    graphs = server.server.ctx.ai.graphs
    started = graphs.compiled_runs
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"AI.GRAPHEXECUTE g INPUTS 1 x OUTPUTS 1 gone\r\n")
    assert wait_until(lambda: graphs.compiled_runs > started)  # the run is under way
    sock.close()
    assert conn.ping() is True
    assert _execute(conn, "g", ["x"], ["here"]) == b"OK" and conn.exists("here") == 1
    assert conn.exists("gone") == 0
    assert _info(conn, "g")[b"calls"] == 1  # the abandoned run was never answered nor counted


def test_a_graph_stored_through_one_server_runs_on_another(shared_store: Clients) -> None:
    ours, theirs, direct = shared_store
    _diamond(ours)
    theirs.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "VALUES", 1, 2)
    for conn in (theirs, ours):
        for mode in MODES:
            assert _execute(conn, "g", ["a"], ["od", "oz"], "MODE", mode) == b"OK"
            assert tensor_values(conn, "oz") == [33, 66]
    assert _info(ours, "g")[b"calls"] == 4 and [b"g", b""] in theirs.execute_command("AI._GRAPHSCAN")
    _store(theirs, "dbl", models.torch_sum_rows(), "CPU:1")  # replaced through the other server
    assert _execute(ours, "g", ["a"], ["od", "oz"]) == b"OK" and tensor_values(ours, "od") == [33]
    # a layout this server does not know, as a newer server would store it: with its own digest, which every
    # run's write checks (a change of one field alone may race the cache's invalidation push under load)
    direct.hset("g", mapping={"format": "2", "digest": "0123456789abcdef"})
    with pytest.raises(redis.ResponseError, match=r"^the stored graph has format version 2; this server reads"):
        _execute(theirs, "g", ["a"], ["od", "oz"])


def test_a_damaged_or_unknown_compiled_form_is_refused(shared_store: Clients) -> None:
    ours, _theirs, direct = shared_store
    _store(ours, "dbl", models.torch_double())
    _graph(ours, "g", ["x"], ["y"], _op("dbl", ["x"], ["y"]))
    raw: Any = direct.hget("g", "compiled")
    compiled = bytes(raw)
    for value, message in ((compiled.replace(b'"format":1', b'"format":7'), "format version 7"),
                           (b"{}", "damaged"), (b"garbage", "damaged")):
        direct.hset("g", mapping={"compiled": value, "digest": value.hex()[:16]})  # a new digest: not cached
        with pytest.raises(redis.ResponseError, match=message):
            ours.execute_command("AI.GRAPHGET", "g")


@pytest.mark.parametrize("store", ["embedded"])
def test_two_devices_run_branches_at_once(store: str) -> None:
    """A graph's two branches on CPU:0 and CPU:1 run at the same time (the speed-up: `python -m bench.graph_bench`)."""
    with running_server(Config(port=0, intra_op_parallelism=1)) as server:
        conn = server.client()
        blob = models.torch_slow()
        for key, device in (("s0", "CPU:0"), ("s1", "CPU:1")):
            _store(conn, key, blob, device)
        conn.execute_command("AI.TENSORSET", "x", "FLOAT", 256, 256, "BLOB", bytes(256 * 256 * 4))
        _graph(conn, "g", ["x"], ["a", "b"], _op("s0", ["x"], ["a"]), _op("s1", ["x"], ["b"]))
        assert _execute(conn, "g", ["x"], ["oa", "ob"]) == b"OK"
        assert_overlapped(server, "CPU:0", "CPU:1")


def test_model_ops_of_concurrent_runs_are_batched(server: RunningServer) -> None:
    """A model stored with BATCHSIZE 2 MINBATCHSIZE 2 (no timeout) runs only in batches of two: two clients'
    graph runs complete only by being batched together, and each gets its own rows back."""
    setup = server.client()
    setup.execute_command("AI.MODELSTORE", "b", "TORCH", "CPU", "BATCHSIZE", 2, "MINBATCHSIZE", 2,
                          "BLOB", models.torch_double())
    _store(setup, "add", models.torch_add())
    _graph(setup, "g", ["x"], ["y"], _op("add", ["x", "x"], ["s"]), _op("b", ["s"], ["y"]))
    queue = server.server.ctx.ai.queues.queue("CPU")
    batched = queue.batched_requests
    results: dict[int, Any] = {}

    def one(value: int) -> None:
        conn = server.client()
        conn.execute_command("AI.TENSORSET", f"in{value}", "FLOAT", 1, 2, "VALUES", value, value)
        results[value] = (_execute(conn, "g", [f"in{value}"], [f"out{value}"]), tensor_values(conn, f"out{value}"))
        conn.close()

    threads = [threading.Thread(target=one, args=(value,)) for value in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == {1: (b"OK", [4.0, 4.0]), 2: (b"OK", [8.0, 8.0])}
    assert queue.batched_requests - batched == 2


@pytest.mark.single_node  # a cluster checks a digest only where its key shares a slot with an output
def test_the_output_write_checks_every_guarded_digest(server: RunningServer) -> None:
    """What keeps a compiled run on cached metadata honest: the write refuses (STALEMODEL, nothing written)
    when the graph or any object it ran has another digest in the store now."""
    conn = server.client()
    _store(conn, "dbl", models.torch_double())
    _graph(conn, "g", ["x"], ["y"], _op("dbl", ["x"], ["y"]))
    digests = {key: (conn.hget(key, "digest") or b"").decode() for key in ("g", "dbl")}
    keyspace = server.server.ctx.keyspace(0)

    def write(guards: list[tuple[bytes, str]]) -> None:
        coroutine = keyspace.set_tensors([b"out"], [b""], guards=guards)
        asyncio.run_coroutine_threadsafe(coroutine, server.loop).result(10)

    with pytest.raises(AIError, match=r"^STALEMODEL"):
        write([(b"g", digests["g"]), (b"dbl", "0" * 64)])
    assert conn.exists("out") == 0
    write([(b"g", digests["g"]), (b"dbl", digests["dbl"])])
    assert conn.exists("out") == 1
