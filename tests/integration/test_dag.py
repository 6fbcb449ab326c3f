"""AI.DAGEXECUTE(_RO) and AI.DAGRUN(_RO) end to end, on both stores, with real models."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import redis

from server.config import Config
from tests import models
from tests.support import RunningServer, assert_overlapped, running_server

RUNS_ON_CLUSTER = True  # also run against a 3-primary Redis Cluster (tests/conftest.py)

SET_A = ("AI.TENSORSET", "a", "FLOAT", 2, "VALUES", 1, 2)


def dag(conn: redis.Redis, *args: object) -> list[object]:
    return list(conn.execute_command("AI.DAGEXECUTE", *args))


def _store(conn: redis.Redis, key: str, blob: bytes, device: str = "CPU") -> None:
    conn.execute_command("AI.MODELSTORE", key, "TORCH", device, "BLOB", blob)


def test_name_reuse_and_persist(client: redis.Redis) -> None:
    reply = dag(client, "PERSIST", 1, "t{1}", "|>", "AI.TENSORSET", "t{1}", "FLOAT", 1, 2, "VALUES", 5, 10,
                "|>", "AI.TENSORGET", "t{1}", "META", "VALUES",
                "|>", "AI.TENSORSET", "t{1}", "FLOAT", 1, 4, "VALUES", 20, 40, 60, 80,
                "|>", "AI.TENSORGET", "t{1}", "META", "VALUES")
    assert reply == [b"OK", [b"dtype", b"FLOAT", b"shape", [1, 2], b"values", [b"5", b"10"]], b"OK",
                     [b"dtype", b"FLOAT", b"shape", [1, 4], b"values", [b"20", b"40", b"60", b"80"]]]
    assert client.execute_command("AI.TENSORGET", "t{1}", "VALUES") == [b"20", b"40", b"60", b"80"]


def test_local_names_stay_local_and_load_reads(client: redis.Redis) -> None:
    assert dag(client, "ROUTING", "{1}", "|>", "AI.TENSORSET", "v1", "FLOAT", 1, 2, "VALUES", 5, 10) == [b"OK"]
    assert client.exists("v1") == 0
    client.execute_command("AI.TENSORSET", "p{1}", "FLOAT", 2, "VALUES", 5, 10)
    assert dag(client, "LOAD", 1, "p{1}", "|>", "AI.TENSORGET", "p{1}", "VALUES") == [[b"5", b"10"]]


def test_chain_across_devices_with_an_op_reading_and_writing_one_name(client: redis.Redis) -> None:
    _store(client, "add", models.torch_add(), "CPU:0")
    _store(client, "double", models.torch_double(), "CPU:1")
    reply = dag(client, "PERSIST", 1, "x", "|>", *SET_A,
                "|>", "AI.MODELEXECUTE", "add", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "x",
                "|>", "AI.MODELEXECUTE", "double", "INPUTS", 1, "x", "OUTPUTS", 1, "x",
                "|>", "AI.TENSORGET", "x", "VALUES")
    assert reply == [b"OK", b"OK", b"OK", [b"4", b"8"]]
    assert client.execute_command("AI.TENSORGET", "x", "VALUES") == [b"4", b"8"]


def test_failing_op_gives_error_element_na_and_persists_nothing(client: redis.Redis) -> None:
    _store(client, "mm", models.torch_matmul())
    reply = dag(client, "PERSIST", 1, "y", "|>", "AI.TENSORSET", "x", "FLOAT", 2, 3, "VALUES", 1, 2, 3, 4, 5, 6,
                "|>", "AI.MODELEXECUTE", "mm", "INPUTS", 2, "x", "x", "OUTPUTS", 1, "y",
                "|>", "AI.TENSORGET", "y", "VALUES")
    assert reply[0] == b"OK" and isinstance(reply[1], redis.ResponseError) and reply[2] == b"NA"
    assert client.exists("y") == 0


def test_read_only_and_deprecated_forms(client: redis.Redis) -> None:
    _store(client, "add", models.torch_add())
    with pytest.raises(redis.ResponseError, match=r"^PERSIST cannot be specified in a read-only DAG$"):
        client.execute_command("AI.DAGEXECUTE_RO", "PERSIST", 1, "a", "|>", *SET_A)
    reply = client.execute_command("AI.DAGEXECUTE_RO", "ROUTING", "r", "|>", *SET_A, "|>", "AI.MODELEXECUTE", "add",
                                   "INPUTS", 2, "a", "a", "OUTPUTS", 1, "b", "|>", "AI.TENSORGET", "b", "VALUES")
    assert reply == [b"OK", b"OK", [b"2", b"4"]]
    reply = client.execute_command("AI.DAGRUN", "|>", *SET_A, "|>", "AI.MODELRUN", "add", "INPUTS", "a", "a",
                                   "OUTPUTS", "b", "|>", "AI.TENSORGET", "b", "VALUES")
    assert reply == [b"OK", b"OK", [b"2", b"4"]]
    assert client.execute_command("AI.DAGRUN_RO", "|>", *SET_A, "|>", "AI.TENSORGET", "a", "VALUES") == [
        b"OK", [b"1", b"2"]]
    with pytest.raises(redis.ResponseError, match=r"^AI.MODELEXECUTE cannot be used in a deprecated AI.DAGRUN command$"):
        client.execute_command("AI.DAGRUN", "|>", "AI.MODELEXECUTE", "add", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "b")
    with pytest.raises(redis.ResponseError, match=r"^Deprecated AI.MODELRUN cannot be used in AI.DAGEXECUTE command$"):
        dag(client, "ROUTING", "r", "|>", "AI.MODELRUN", "add", "INPUTS", "a", "a", "OUTPUTS", "b")
    with pytest.raises(redis.ResponseError, match=r"^TIMEOUT not allowed within a DAG command$"):
        dag(client, "ROUTING", "r", "|>", *SET_A, "|>", "AI.MODELEXECUTE", "add", "INPUTS", 2, "a", "a",
            "OUTPUTS", 1, "b", "TIMEOUT", 5)


def test_parse_errors_write_nothing_and_have_exact_text(server: RunningServer) -> None:
    conn = server.client()
    raw = server.raw()
    cases = [
        (b"AI.DAGEXECUTE ROUTING r |> AI.TENSORSET a FLOAT 1 VALUES 1 |> AI.NOCOMMAND x\r\n",
         b"-Unsupported command within DAG\r\n"),
        (b"AI.DAGEXECUTE PERSIST 1 a |> AI.TENSORSET a FLOAT 1 VALUES 1 |> AI.TENSORGET\r\n",
         b"-wrong number of arguments for 'AI.TENSORGET' command\r\n"),
        (b"AI.DAGEXECUTE PERSIST 1 a |> AI.TENSORSET a FLOAT 1 VALUES 1 |> AI.TENSORGET zz\r\n",
         b"-ERR INPUT key cannot be found in DAG\r\n"),
        (b"AI.DAGEXECUTE PERSIST 1 b |> AI.TENSORSET a FLOAT 1 VALUES 1 |> AI.TENSORGET a\r\n",
         b"-ERR PERSIST key cannot be found in DAG\r\n"),
        (b"AI.DAGEXECUTE LOAD 1 missing |> AI.TENSORGET missing\r\n",
         b"-ERR tensor key is empty or in a different shard\r\n"),
        (b"AI.DAGEXECUTE PERSIST 1 a |> AI.TENSORSET a FLOAT 1 VALUES 1 |> AI.MODELEXECUTE nomodel INPUTS 1 a "
         b"OUTPUTS 1 b\r\n", b"-ERR model key is empty\r\n"),
        (b"AI.DAGEXECUTE PERSIST 1 a BAD |> AI.TENSORSET a FLOAT 1\r\n",
         b"-ERR Invalid DAG command. Unexpected argument:  BAD\r\n"),
    ]
    for request, expected in cases:
        assert raw.call(request, expected) == expected
    assert conn.exists("a") == 0


def test_header_and_op_errors_come_in_redisai_order(server: RunningServer) -> None:
    """As RedisAI 1.2.7 parses: an op's TIMEOUT value is checked before the DAG refuses the clause; a LOAD
    key is read before the keys are counted, a PERSIST name repeated is found before they are; an empty
    ROUTING value is a ROUTING clause. Each answered another error (or refused the DAG) before."""
    _store(server.client(), "add", models.torch_add())
    raw = server.raw()
    op = b"|> AI.TENSORSET a FLOAT 1 VALUES 1 |> AI.MODELEXECUTE add INPUTS 2 a a OUTPUTS 1 b"
    cases = [
        (b"AI.DAGEXECUTE ROUTING r " + op + b" TIMEOUT 0\r\n", b"-ERR Invalid value for TIMEOUT\r\n"),
        (b"AI.DAGEXECUTE ROUTING r " + op + b" TIMEOUT\r\n", b"-ERR No value provided for TIMEOUT\r\n"),
        (b"AI.DAGEXECUTE ROUTING r " + op + b" TIMEOUT 5\r\n", b"-ERR TIMEOUT not allowed within a DAG command\r\n"),
        (b"AI.DAGRUN |> AI.TENSORSET a FLOAT 1 VALUES 1 |> AI.MODELRUN add TIMEOUT 0 INPUTS a a OUTPUTS b\r\n",
         b"-ERR Invalid value for TIMEOUT\r\n"),
        (b"AI.DAGEXECUTE ROUTING r LOAD 3 nokey a\r\n", b"-ERR tensor key is empty or in a different shard\r\n"),
        (b"AI.DAGEXECUTE ROUTING r PERSIST 3 a a\r\n", b"-ERR PERSIST keys must be unique\r\n"),
        (b'AI.DAGEXECUTE ROUTING "" |> AI.TENSORSET x FLOAT 1 VALUES 1\r\n', b"*1\r\n+OK\r\n"),
    ]
    for request, expected in cases:
        assert raw.call(request, expected) == expected


def test_persist_onto_a_non_tensor_is_an_extra_element(client: redis.Redis) -> None:
    client.set("plain", "value")
    reply = dag(client, "PERSIST", 1, "plain", "|>", "AI.TENSORSET", "plain", "FLOAT", 1, "VALUES", 1)
    assert reply[0] == b"OK" and len(reply) == 2 and "WRONGTYPE" in str(reply[1])
    assert client.get("plain") == b"value"


def test_timeout_gives_timedout(server: RunningServer) -> None:
    conn = server.client()
    _store(conn, "slow", models.torch_slow())
    conn.execute_command("AI.TENSORSET", "x", "FLOAT", 256, 256, "BLOB", bytes(256 * 256 * 4))
    reply = conn.execute_command("AI.DAGEXECUTE", "LOAD", 1, "x", "PERSIST", 1, "z", "TIMEOUT", 1,
                                 "|>", "AI.MODELEXECUTE", "slow", "INPUTS", 1, "x", "OUTPUTS", 1, "y",
                                 "|>", "AI.MODELEXECUTE", "slow", "INPUTS", 1, "y", "OUTPUTS", 1, "z")
    assert reply == b"TIMEDOUT"
    assert conn.exists("z") == 0


def test_reply_waits_for_the_running_branch_after_another_fails(server: RunningServer) -> None:
    """The race RedisAI's multi-device PR found: A runs on CPU:0 while B fails on CPU:1.

    B first runs a short op, so that A is surely running when B's second op fails."""
    conn = server.client()
    _store(conn, "slow", models.torch_slow(), "CPU:0")
    _store(conn, "warmup_b", models.torch_slow(), "CPU:1")
    _store(conn, "mm", models.torch_matmul(), "CPU:1")
    conn.execute_command("AI.TENSORSET", "x", "FLOAT", 256, 256, "BLOB", bytes(256 * 256 * 4))
    conn.execute_command("AI.TENSORSET", "small", "FLOAT", 64, 64, "BLOB", bytes(64 * 64 * 4))
    conn.execute_command("AI.TENSORSET", "bad", "FLOAT", 2, 3, "VALUES", 1, 2, 3, 4, 5, 6)
    conn.execute_command("AI.MODELEXECUTE", "warmup_b", "INPUTS", 1, "small", "OUTPUTS", 1, "w")
    conn.execute_command("AI.MODELEXECUTE", "slow", "INPUTS", 1, "x", "OUTPUTS", 1, "warm")
    reply = dag(conn, "LOAD", 3, "x", "small", "bad",
                "|>", "AI.MODELEXECUTE", "slow", "INPUTS", 1, "x", "OUTPUTS", 1, "ya",
                "|>", "AI.MODELEXECUTE", "warmup_b", "INPUTS", 1, "small", "OUTPUTS", 1, "yw",
                "|>", "AI.MODELEXECUTE", "mm", "INPUTS", 2, "bad", "bad", "OUTPUTS", 1, "yb",
                "|>", "AI.TENSORGET", "ya", "META")
    answered = time.perf_counter()
    assert reply[0] == b"OK" and reply[1] == b"OK" and isinstance(reply[2], redis.ResponseError)
    assert reply[3] == [b"dtype", b"FLOAT", b"shape", [256, 256]]  # A finished before the reply was built
    _, a_ended = server.server.ctx.ai.queues.queue("CPU:0").recent[-1]  # A's run, as its device recorded it
    assert a_ended <= answered  # no wall-clock threshold: the order of the two events is the claim
    follow = dag(conn, "ROUTING", "r", "|>", *SET_A, "|>", "AI.TENSORGET", "a", "VALUES")
    assert follow == [b"OK", [b"1", b"2"]]


def test_fifty_concurrent_clients_get_their_own_results(server: RunningServer) -> None:
    setup = server.client()
    _store(setup, "add", models.torch_add(), "CPU:0")
    _store(setup, "double", models.torch_double(), "CPU:1")
    errors: list[str] = []

    def one(value: int) -> None:
        conn = server.client()
        reply = dag(conn, "ROUTING", "r", "|>", "AI.TENSORSET", "v", "INT64", 1, "VALUES", value,
                    "|>", "AI.MODELEXECUTE", "add", "INPUTS", 2, "v", "v", "OUTPUTS", 1, "w",
                    "|>", "AI.MODELEXECUTE", "double", "INPUTS", 1, "w", "OUTPUTS", 1, "w",
                    "|>", "AI.TENSORGET", "w", "VALUES")
        if reply[-1] != [value * 4]:
            errors.append(f"{value}: {reply!r}")

    threads = [threading.Thread(target=one, args=(value,)) for value in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []


def test_disconnecting_mid_dag_costs_only_its_own_work(server: RunningServer) -> None:
    conn = server.client()
    _store(conn, "slow", models.torch_slow())
    conn.execute_command("AI.TENSORSET", "x", "FLOAT", 256, 256, "BLOB", bytes(256 * 256 * 4))
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"AI.DAGEXECUTE LOAD 1 x PERSIST 1 gone |> AI.MODELEXECUTE slow INPUTS 1 x OUTPUTS 1 y "
                 b"|> AI.MODELEXECUTE slow INPUTS 1 y OUTPUTS 1 gone\r\n")
    time.sleep(0.02)
    sock.close()
    assert conn.ping() is True
    time.sleep(0.5)
    assert conn.exists("gone") == 0
    assert dag(conn, "ROUTING", "r", "|>", *SET_A, "|>", "AI.TENSORGET", "a", "VALUES") == [b"OK", [b"1", b"2"]]


@pytest.mark.parametrize("store", ["embedded"])
def test_two_devices_run_branches_at_once(store: str) -> None:
    """Two independent branches on CPU:0 and CPU:1 run at the same time; on one device, one after the other.
    (The speed-up itself is measured by `python -m bench.dag_bench`.)"""
    with running_server(Config(port=0, intra_op_parallelism=1)) as server:
        conn = server.client()
        blob = models.torch_slow()
        for key, device in (("s0", "CPU:0"), ("s1", "CPU:1"), ("c0", "CPU"), ("c1", "CPU")):
            _store(conn, key, blob, device)
        conn.execute_command("AI.TENSORSET", "x", "FLOAT", 256, 256, "BLOB", bytes(256 * 256 * 4))

        def run(first: str, second: str) -> None:
            dag(conn, "LOAD", 1, "x", "|>", "AI.MODELEXECUTE", first, "INPUTS", 1, "x", "OUTPUTS", 1, "y1",
                "|>", "AI.MODELEXECUTE", second, "INPUTS", 1, "x", "OUTPUTS", 1, "y2")

        run("s0", "s1")
        assert_overlapped(server, "CPU:0", "CPU:1")  # the two branches ran at the same time
        run("c0", "c1")
        (_, end_a), (start_b, _) = list(server.server.ctx.ai.queues.queues["CPU"].recent)[-2:]
        assert end_a <= start_b  # on one device (one worker) they ran one after the other


def test_chain_with_a_script(client: redis.Redis) -> None:
    """TENSORSET → SCRIPTEXECUTE → MODELEXECUTE → TENSORGET in one DAG: a script's output feeds a model."""
    from tests.scripts import OLD_SCRIPT, SCRIPT

    client.execute_command("AI.SCRIPTSTORE", "s", "CPU", "ENTRY_POINTS", 2, "bar", "pair", "SOURCE", SCRIPT)
    _store(client, "add", models.torch_add(), "CPU:1")
    reply = dag(client, "PERSIST", 1, "c", "|>", *SET_A,
                "|>", "AI.SCRIPTEXECUTE", "s", "bar", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "b",
                "|>", "AI.MODELEXECUTE", "add", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "c",
                "|>", "AI.SCRIPTEXECUTE", "s", "pair", "INPUTS", 1, "c", "ARGS", 1, "2", "OUTPUTS", 2, "d", "e",
                "|>", "AI.TENSORGET", "d", "VALUES")
    assert reply == [b"OK", b"OK", b"OK", b"OK", [b"6", b"12"]]
    assert client.execute_command("AI.TENSORGET", "c", "VALUES") == [b"3", b"6"]
    reply = dag(client, "ROUTING", "{1}", "|>", *SET_A, "|>", "AI.SCRIPTEXECUTE", "s", "wrong_fn", "INPUTS", 1, "a",
                "OUTPUTS", 1, "t")
    assert reply[0] == b"OK" and str(reply[1]) == "Function does not exist: wrong_fn"
    with pytest.raises(redis.ResponseError, match=r"^AI.SCRIPTEXECUTE command cannot be specified in a read-only DAG$"):
        client.execute_command("AI.DAGEXECUTE_RO", "ROUTING", "r", "|>", *SET_A, "|>", "AI.SCRIPTEXECUTE", "s",
                               "bar", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "b")
    client.execute_command("AI.SCRIPTSET", "old", "CPU", "SOURCE", OLD_SCRIPT)
    for command in ("AI.DAGRUN", "AI.DAGRUN_RO"):  # 1.2.7 lets DAGRUN_RO run SCRIPTRUN
        reply = client.execute_command(command, "|>", *SET_A, "|>", "AI.SCRIPTRUN", "old", "bar", "INPUTS", "a", "a",
                                       "OUTPUTS", "b", "|>", "AI.TENSORGET", "b", "VALUES")
        assert reply == [b"OK", b"OK", [b"2", b"4"]]
    with pytest.raises(redis.ResponseError, match=r"^script key is empty$"):
        dag(client, "ROUTING", "r", "|>", *SET_A, "|>", "AI.SCRIPTEXECUTE", "nope", "bar", "INPUTS", 1, "a")
