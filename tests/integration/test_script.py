"""Script commands end to end with real TorchScript sources, on both stores, as RedisAI 1.2.7 answers them."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from server.config import Config
from tests import models
from tests.scripts import A_B, OLD_SCRIPT, REDIS_SCRIPT, SCRIPT, store_script, tensor_values
from tests.support import RunningServer, running_server

RUNS_ON_CLUSTER = True  # also run against a 3-primary Redis Cluster (tests/conftest.py)


def test_store_get_delete_scan(client: redis.Redis) -> None:
    assert client.execute_command("AI.SCRIPTSTORE", "my_script", "CPU", "TAG", "my_tag", "ENTRY_POINTS", 2, "bar",
                                  "bar_variadic", "SOURCE", SCRIPT) == b"OK"
    meta = [b"device", b"CPU", b"tag", b"my_tag", b"Entry Points", [b"bar", b"bar_variadic"]]
    assert client.execute_command("AI.SCRIPTGET", "my_script") == [*meta, b"source", SCRIPT.encode()]
    assert client.execute_command("AI.SCRIPTGET", "my_script", "META") == meta
    assert client.execute_command("AI.SCRIPTGET", "my_script", "SOURCE") == SCRIPT.encode()
    assert client.execute_command("AI.SCRIPTSET", "ket", "cpu", "SOURCE", OLD_SCRIPT) == b"OK"
    assert client.execute_command("AI.SCRIPTGET", "ket", "META", "SOURCE") == [
        b"device", b"cpu", b"tag", b"", b"Entry Points", [], b"source", OLD_SCRIPT.encode()]
    assert sorted(client.execute_command("AI._SCRIPTSCAN")) == [[b"ket", b""], [b"my_script", b"my_tag"]]
    assert client.type("my_script") == b"AI_SCRIPT" and client.hget("my_script", "__redisai__") == b"script"
    assert client.execute_command("AI.SCRIPTDEL", "ket") == b"OK"
    assert client.exists("ket") == 0 and client.execute_command("AI._SCRIPTSCAN") == [[b"my_script", b"my_tag"]]
    for command in ("AI.SCRIPTGET", "AI.SCRIPTDEL"):
        with pytest.raises(redis.ResponseError, match=r"^script key is empty$"):
            client.execute_command(command, "ket")


def test_entry_points_variadic_keys_args_and_outputs(client: redis.Redis) -> None:
    store_script(client, "s", SCRIPT, "bar", "bar_variadic", "pair", "many", "nothing")
    client.execute_command("AI.TENSORSET", "a", *A_B)
    client.execute_command("AI.TENSORSET", "b", *A_B)
    for fn in ("bar", "bar_variadic"):
        assert client.execute_command("AI.SCRIPTEXECUTE", "s", fn, "KEYS", 1, "{1}", "INPUTS", 2, "a", "b",
                                      "OUTPUTS", 1, f"c_{fn}") == b"OK"
        assert tensor_values(client, f"c_{fn}") == [b"4", b"6", b"4", b"6"]
    assert client.execute_command("AI.SCRIPTEXECUTE", "s", "pair", "INPUTS", 1, "a", "KEYS", 2, "k1", "k2",
                                  "ARGS", 1, "0.5", "OUTPUTS", 2, "half", "counts", "TIMEOUT", 60000) == b"OK"
    assert tensor_values(client, "half") == [b"1", b"1.5", b"1", b"1.5"]
    assert client.execute_command("AI.TENSORGET", "counts", "META", "VALUES") == [
        b"dtype", b"INT64", b"shape", [3], b"values", [2, 1, 1]]
    assert client.execute_command("AI.SCRIPTEXECUTE", "s", "many", "INPUTS", 3, "a", "b", "a",
                                  "OUTPUTS", 3, "x", "y", "z") == b"OK"
    assert tensor_values(client, "z") == [b"4", b"6", b"4", b"6"]
    assert client.execute_command("AI.SCRIPTEXECUTE", "s", "nothing", "KEYS", 1, "{$}") == b"OK"
    assert client.execute_command("AI.SCRIPTEXECUTE", "s", "bar", "INPUTS", 2, "a", "b") == b"OK"  # result dropped
    # A helper that is not an entry point is called positionally; KEYS and ARGS are ignored then.
    assert client.execute_command("AI.SCRIPTEXECUTE", "s", "helper", "INPUTS", 3, "a", "b", "a", "ARGS", 1, "x",
                                  "OUTPUTS", 1, "zero") == b"OK"
    assert tensor_values(client, "zero") == [b"0", b"0", b"0", b"0"]


def test_deprecated_scriptset_and_scriptrun(client: redis.Redis) -> None:
    assert client.execute_command("AI.SCRIPTSET", "old", "CPU", "TAG", "asdf", "SOURCE", OLD_SCRIPT) == b"OK"
    client.execute_command("AI.TENSORSET", "a", *A_B)
    client.execute_command("AI.TENSORSET", "b", *A_B)
    assert client.execute_command("AI.SCRIPTRUN", "old", "bar", "INPUTS", "a", "b", "OUTPUTS", "c") == b"OK"
    assert tensor_values(client, "c") == [b"4", b"6", b"4", b"6"]
    assert client.execute_command("AI.SCRIPTRUN", "old", "bar_variadic", "TIMEOUT", 5000, "INPUTS", "a", "$",
                                  "b", "b", "OUTPUTS", "d") == b"OK"
    assert tensor_values(client, "d") == [b"4", b"6", b"4", b"6"]
    # SCRIPTEXECUTE on a SCRIPTSET script: every function uses the positional convention.
    assert client.execute_command("AI.SCRIPTEXECUTE", "old", "bar", "INPUTS", 3, "a", "b", "a",
                                  "OUTPUTS", 1, "e") == b"OK"
    for args, error in (
        (("bar", "INPUTS", "a", "OUTPUTS", "c"), r"^Wrong number of inputs provided to function: bar$"),
        (("takes_int", "INPUTS", "a", "OUTPUTS", "c"), r"^Unsupported input type in function definition: takes_int$"),
        (("wrong_fn", "INPUTS", "a", "OUTPUTS", "c"), r"^Function does not exist: wrong_fn$"),
        (("bar", "INPUTS", "a", "b", "OUTPUTS", "c", "c2"), r"^Function returned unexpected number of outputs - bar$"),
    ):
        with pytest.raises(redis.ResponseError, match=error):
            client.execute_command("AI.SCRIPTRUN", "old", *args)


def test_redis_execute_from_scripts(client: redis.Redis) -> None:
    store_script(client, "r", REDIS_SCRIPT, "set_get", "incr", "float_get", "int_list", "hash_set", "delete", "call")
    run = ("AI.SCRIPTEXECUTE", "r")
    assert client.execute_command(*run, "set_get", "KEYS", 1, "x", "ARGS", 1, "1", "OUTPUTS", 2, "y", "ok") == b"OK"
    assert client.execute_command("AI.TENSORGET", "y", "META", "VALUES") == [
        b"dtype", b"INT64", b"shape", [], b"values", [1]]
    assert tensor_values(client, "ok") == [1] and client.get("x") == b"1"  # visible through the server afterwards
    client.execute_command(*run, "incr", "KEYS", 1, "n", "ARGS", 1, "41", "OUTPUTS", 1, "y")
    assert tensor_values(client, "y") == [42] and client.get("n") == b"42"
    client.execute_command(*run, "float_get", "KEYS", 1, "f", "ARGS", 1, "2.5", "OUTPUTS", 1, "y")
    assert client.execute_command("AI.TENSORGET", "y", "META", "VALUES")[:2] == [b"dtype", b"FLOAT"]
    client.execute_command(*run, "int_list", "KEYS", 1, "l", "ARGS", 3, "1", "2", "3", "OUTPUTS", 1, "y")
    assert client.execute_command("AI.TENSORGET", "y", "META", "VALUES") == [
        b"dtype", b"INT64", b"shape", [3, 1], b"values", [1, 2, 3]]
    assert client.exists("l") == 0
    client.execute_command(*run, "hash_set", "KEYS", 1, "h", "ARGS", 4, "f1", "1", "f2", "2", "OUTPUTS", 1, "y")
    assert client.hgetall("h") == {b"f1": b"1", b"f2": b"2"} and tensor_values(client, "y") == [2]
    client.execute_command(*run, "delete", "KEYS", 1, "h")
    assert client.exists("h") == 0
    for args, error in (
        (("SET", "k"), r"Redis command returned an error: Invalid argument"),
        (("NOSUCHCOMMAND", "k"), r"Redis command returned an error: No such file or directory"),
        (("RPUSH", "x", "v"), r"Redis command returned an error: WRONGTYPE Operation against a key holding the "
                              r"wrong kind of value"),
        (("BLPOP", "q", "0"), r"Redis command returned an error: ERR This Redis command is not allowed from script"),
        (("SELECT", "1"), r"not allowed from script"),
    ):
        with pytest.raises(redis.ResponseError, match=error):
            client.execute_command(*run, "call", "KEYS", 1, "k", "ARGS", len(args), *args)
    assert client.execute_command(*run, "set_get", "KEYS", 1, "x", "ARGS", 1, "7") == b"OK"  # the worker lives on


@pytest.mark.single_node
def test_scripts_reach_database_zero(server: RunningServer) -> None:
    conn = server.client(db=3)
    store_script(conn, "r", REDIS_SCRIPT, "set_get")
    conn.execute_command("AI.SCRIPTEXECUTE", "r", "set_get", "KEYS", 1, "x", "ARGS", 1, "5", "OUTPUTS", 2, "y", "o")
    assert conn.exists("x") == 0 and conn.exists("y") == 1  # outputs: the client's database
    assert server.client(db=0).get("x") == b"5"  # redis.execute reaches database 0, as in RedisAI


def test_model_execute_from_scripts(client: redis.Redis) -> None:
    store_script(client, "r", REDIS_SCRIPT, "run_model", "run_model_n")
    client.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", models.torch_add())
    client.execute_command("AI.TENSORSET", "a", *A_B)
    client.execute_command("AI.TENSORSET", "v", "FLOAT", 3, "VALUES", 1, 2, 3)
    run = ("AI.SCRIPTEXECUTE", "r", "run_model")
    assert client.execute_command(*run, "KEYS", 1, "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c") == b"OK"
    assert tensor_values(client, "c") == [b"4", b"6", b"4", b"6"]
    client.set("plain", "v")
    for key, error in (("nomodel", r"^model key is empty$"), ("plain", r"^WRONGTYPE"), ("r", r"^WRONGTYPE")):
        with pytest.raises(redis.ResponseError, match=error):
            client.execute_command(*run, "KEYS", 1, key, "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c")
    with pytest.raises(redis.ResponseError, match=r"Model did not generate the expected number of outputs"):
        client.execute_command("AI.SCRIPTEXECUTE", "r", "run_model_n", "KEYS", 1, "m", "INPUTS", 2, "a", "a",
                               "ARGS", 1, 2, "OUTPUTS", 2, "c", "d")
    with pytest.raises(redis.ResponseError, match=r"size of tensor a \(2\) must match"):  # the model's error
        client.execute_command("AI.SCRIPTEXECUTE", "r", "run_model_n", "KEYS", 1, "m", "INPUTS", 2, "a", "v",
                               "ARGS", 1, 1, "OUTPUTS", 1, "c")


@pytest.mark.parametrize("store", ["embedded"])
def test_timeout_covers_the_wait_in_the_queue(store: str) -> None:
    """A running script is never interrupted; a second call that waits longer than its TIMEOUT is TIMEDOUT."""
    source = ("def spin(tensors: List[Tensor], keys: List[str], args: List[str]):\n"
              "    redis.execute(\"SET\", keys[0], \"running\")\n"
              "    total = 0\n    for i in range(int(args[0])):\n        total += i % 7\n    return torch.tensor(total)\n")
    with running_server(Config(port=0, threads_per_queue=1)) as server:
        conn = server.client()
        store_script(conn, "slow", source, "spin", device="CPU:7")

        def spin(key: str, count: int, *timeout: object) -> object:
            return server.client().execute_command("AI.SCRIPTEXECUTE", "slow", "spin", "KEYS", 1, key,
                                                   "ARGS", 1, count, *timeout)

        for _ in range(3):  # TorchScript profiles the first runs, then optimizes
            spin("warm", 1000)
        started = time.perf_counter()
        spin("warm", 1_000_000)
        count = int(1_000_000 * 0.4 / max(time.perf_counter() - started, 1e-3))  # about 0.4 s of spinning
        replies: list[object] = []
        busy = threading.Thread(target=lambda: replies.append(spin("flag", count)))
        busy.start()
        deadline = time.monotonic() + 10
        while conn.get("flag") != b"running" and time.monotonic() < deadline:  # the long run holds the worker
            time.sleep(0.005)
        assert spin("other", 1, "TIMEOUT", 1) == b"TIMEDOUT"
        busy.join()
        assert replies == [b"OK"] and conn.get("other") is None  # the timed-out call never ran
