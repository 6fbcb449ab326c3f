"""AI commands inside MULTI/EXEC, as RedisAI runs them: queued, run at EXEC, answered in their own reply formats
(the ``redisai`` client's default ``pipeline()`` is a transaction). Every key of a transaction shares the hash
tag ``{t}``, so the module runs on a Redis Cluster too; a transaction over several slots answers CROSSSLOT."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis

from server.config import Config
from server.protocol.framer import ReplyFramer
from server.store.cluster_keys import key_slot
from tests.cluster_support import LocalCluster
from tests.models import torch_add
from tests.scripts import SCRIPT
from tests.support import RawClient, RunningServer, run_client_script, running_server

RUNS_ON_CLUSTER = True


def _transaction(client: redis.Redis, *commands: tuple[Any, ...]) -> list[Any]:
    pipe = client.pipeline(transaction=True)
    for command in commands:
        pipe.execute_command(*command)
    return pipe.execute(raise_on_error=False)


def _error(reply: Any) -> str:
    assert isinstance(reply, redis.ResponseError), reply
    return str(reply)


def test_tensors_are_set_and_got_in_a_transaction(client: redis.Redis) -> None:
    got = _transaction(
        client,
        ("AI.TENSORSET", "{t}a", "FLOAT", 2, 2, "VALUES", 1, 2, 3, 4),
        ("AI.TENSORGET", "{t}a", "META", "VALUES"),
        ("AI.TENSORGET", "{t}a", "META"),
        ("AI.TENSORGET", "{t}a", "VALUES"),
        ("AI.TENSORGET", "{t}a", "META", "BLOB"),
        ("AI.TENSORGET", "{t}a", "BLOB"),
        ("AI.TENSORGET", "{t}a"),
        ("AI.TENSORSET", "{t}s", "STRING", 2, "VALUES", "x", "yz"),
        ("AI.TENSORGET", "{t}s", "VALUES"),
        ("SET", "{t}plain", "v"),
        ("AI.TENSORGET", "{t}missing", "META"),
        ("AI.TENSORGET", "{t}plain", "VALUES"),
        ("AI.TENSORGET", "{t}a", "BOGUS"),
        ("AI.TENSORSET", "{t}plain", "FLOAT", 1, "VALUES", 1),
        ("AI.TENSORSET", "{t}bad", "FLOAT", 2, "VALUES", 1),
        ("AI.TENSORGET", "{t}a", "META", "VALUES", "BLOB", "EXTRA"),
    )
    blob = np.array([1, 2, 3, 4], dtype=np.float32).tobytes()
    meta = [b"dtype", b"FLOAT", b"shape", [2, 2]]
    assert got[:10] == [b"OK", [*meta, b"values", [b"1", b"2", b"3", b"4"]], meta, [b"1", b"2", b"3", b"4"],
                        [*meta, b"blob", blob], blob, [*meta, b"blob", blob], b"OK", [b"x", b"yz"], True]
    assert _error(got[10]) == "tensor key is empty or in a different shard"
    assert _error(got[11]).startswith("WRONGTYPE")
    assert _error(got[12]) == "unsupported data format"
    assert _error(got[13]).startswith("WRONGTYPE")  # checked at EXEC, nothing written
    assert _error(got[14]) == "wrong number of values was given in 'AI.TENSORSET' command"
    assert _error(got[15]) == "wrong number of arguments for 'AI.TENSORGET' command"
    assert client.get("{t}plain") == b"v" and client.exists("{t}bad") == 0


def _frames(raw: RawClient, request: bytes, count: int) -> list[bytes]:
    """Send ``request``; the first ``count`` reply frames, each as its raw bytes."""
    raw.send(request)
    framer, frames = ReplyFramer(), list[bytes]()
    while len(frames) < count:
        chunk = raw.sock.recv(65536)
        assert chunk, frames
        framer.feed(chunk)
        while (frame := framer.next_frame()) is not None:
            frames.append(frame)
    return frames


IN_ONE_TRANSACTION = (b"AI.TENSORSET {t}a INT32 2 VALUES 7 8", b"AI.TENSORGET {t}a META VALUES",
                      b"AI.TENSORGET {t}a META BLOB", b"AI.TENSORGET {t}a META", b"AI.TENSORGET {t}nope",
                      b"AI.MODELSTORE {t}m TORCH CPU TAG t BLOB @", b"AI.MODELGET {t}m META", b"AI.INFO {t}m",
                      b"AI.INFO {t}m RESETSTAT", b"AI.MODELDEL {t}nope", b"AI.TENSORGET {t}m",
                      b"AI.SCRIPTGET {t}m", b"AI.CONFIG GET MODEL_CHUNK_SIZE",
                      b"AI.TENSORSET {t}big FLOAT 20000 BLOB %", b"AI.TENSORGET {t}big META BLOB",
                      b"AI.TENSORGET {t}big BLOB")  # (% : 80 KB, a blob its reply does not join)


@pytest.mark.parametrize("proto", [2, 3])
def test_each_answer_at_exec_is_the_commands_own_reply_byte_for_byte(server: RunningServer, proto: int) -> None:
    raw = server.raw()
    if proto == 3:
        raw.switch_to_resp3()
    commands = [_request(*line.split(b" ")) for line in IN_ONE_TRANSACTION]
    alone = _frames(raw, b"".join(commands), len(commands))
    server.client().flushall()
    queued = _frames(raw, b"MULTI\r\n" + b"".join(commands) + b"EXEC\r\n", len(commands) + 2)
    assert queued[: len(commands) + 1] == [b"+OK\r\n"] + [b"+QUEUED\r\n"] * len(commands)
    assert queued[-1] == b"*%d\r\n" % len(commands) + b"".join(alone)
    execute = b"MULTI\r\nAI.MODELEXECUTE {t}m INPUTS 1 {t}a OUTPUTS 1 {t}b\r\nEXEC\r\n"
    in_transaction = b"*1\r\n-ERR Cannot run RedisAI command within a transaction or a LUA script\r\n"
    assert _frames(raw, execute, 3)[2] == in_transaction


def _request(*parts: bytes) -> bytes:
    big = np.arange(20_000, dtype=np.float32).tobytes()
    args = [torch_add() if part == b"@" else big if part == b"%" else part for part in parts]
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def test_models_and_scripts_are_stored_read_and_deleted_in_a_transaction(client: redis.Redis) -> None:
    got = _transaction(
        client,
        ("AI.MODELSTORE", "{t}m", "TORCH", "CPU", "TAG", "v1", "BLOB", torch_add()),
        ("AI.MODELGET", "{t}m", "META"),
        ("AI.INFO", "{t}m"),
        ("AI.SCRIPTSTORE", "{t}s", "CPU", "TAG", "s1", "ENTRY_POINTS", 1, "bar", "SOURCE", SCRIPT),
        ("AI.SCRIPTGET", "{t}s", "META"),
        ("AI.SCRIPTGET", "{t}s", "SOURCE"),
        ("AI.INFO", "{t}s", "RESETSTAT"),
        ("AI.MODELGET", "{t}missing"),
        ("AI.SCRIPTGET", "{t}m"),
        ("AI.MODELSTORE", "{t}broken", "TORCH", "CPU", "BLOB", b"garbage"),
        ("AI.SCRIPTSTORE", "{t}x", "CPU", "ENTRY_POINTS", 1, "nope", "SOURCE", SCRIPT),
        ("AI.INFO", "{t}missing"),
    )
    assert got[0] == b"OK"
    assert got[1][:6] == [b"backend", b"TORCH", b"device", b"CPU", b"tag", b"v1"]
    assert got[2][:10] == [b"key", b"{t}m", b"type", b"MODEL", b"backend", b"TORCH", b"device", b"CPU",
                           b"tag", b"v1"]
    assert got[3] == b"OK"
    assert got[4] == [b"device", b"CPU", b"tag", b"s1", b"Entry Points", [b"bar"]]
    assert got[5] == SCRIPT.encode() and got[6] == b"OK"
    assert _error(got[7]) == "model key is empty"
    assert _error(got[8]).startswith("WRONGTYPE")
    assert _error(got[9])  # the backend's own text, as outside MULTI
    assert _error(got[10]) == "Function nope does not exist in the given script."
    assert _error(got[11]) == "cannot find run info for key"
    assert client.exists("{t}broken", "{t}x") == 0
    client.execute_command("AI.TENSORSET", "{t}a", "FLOAT", 2, "VALUES", 1, 2)
    assert client.execute_command("AI.MODELEXECUTE", "{t}m", "INPUTS", 2, "{t}a", "{t}a", "OUTPUTS", 1, "{t}c") == b"OK"
    assert client.execute_command("AI.TENSORGET", "{t}c", "VALUES") == [b"2", b"4"]
    blob = client.execute_command("AI.MODELGET", "{t}m", "BLOB")
    got = _transaction(client, ("AI.MODELGET", "{t}m", "BLOB"), ("AI.INFO", "{t}m"), ("AI.MODELDEL", "{t}m"),
                       ("AI.SCRIPTDEL", "{t}s"), ("AI.MODELDEL", "{t}m"), ("AI.SCRIPTDEL", "{t}a"),
                       ("AI.INFO", "{t}m"), ("AI.MODELDEL", "{t}m", "extra"))
    assert got[0] == blob and got[1][14:16] == [b"calls", 1]
    assert got[2:4] == [b"OK", b"OK"]
    assert _error(got[4]) == "model key is empty"
    assert _error(got[5]).startswith("WRONGTYPE")
    assert _error(got[6]) == "cannot find run info for key"
    assert _error(got[7]) == "wrong number of arguments for 'AI.MODELDEL' command"
    assert client.exists("{t}m", "{t}s") == 0 and client.exists("{t}a") == 1


def test_config_is_applied_at_exec_and_not_after_discard(client: redis.Redis) -> None:
    client.execute_command("AI.MODELSTORE", "{t}m", "TORCH", "CPU", "BLOB", torch_add())
    blob = client.execute_command("AI.MODELGET", "{t}m", "BLOB")
    pipe = client.pipeline(transaction=True)
    pipe.execute_command("AI.CONFIG", "MODEL_CHUNK_SIZE", 1000)
    pipe.reset()  # DISCARD: nothing applied
    assert client.execute_command("AI.CONFIG", "GET", "MODEL_CHUNK_SIZE") != 1000
    got = _transaction(client, ("AI.CONFIG", "GET", "MODEL_CHUNK_SIZE"), ("AI.CONFIG", "MODEL_CHUNK_SIZE", 1000),
                       ("AI.CONFIG", "GET", "MODEL_CHUNK_SIZE"), ("AI.MODELGET", "{t}m", "BLOB"),
                       ("AI.CONFIG", "LOADBACKEND", "TORCH", "x"), ("AI.CONFIG", "NOPE"))
    assert got[0] > 1000 and got[1:3] == [b"OK", 1000]
    assert len(got[3]) == len(blob) // 1000 + 1 and b"".join(got[3]) == blob  # chunked as the setting is at EXEC
    assert _error(got[4]) == "AI.CONFIG LOADBACKEND cannot be queued in MULTI by this server"
    assert _error(got[5]) == "unsupported subcommand"


def test_an_aborted_transaction_writes_nothing(server: RunningServer, client: redis.Redis) -> None:
    client.set("{t}w", 1)
    with client.pipeline(transaction=True) as pipe:
        pipe.watch("{t}w")
        pipe.multi()
        pipe.execute_command("AI.MODELSTORE", "{t}m", "TORCH", "CPU", "BLOB", torch_add())
        pipe.execute_command("AI.TENSORSET", "{t}a", "FLOAT", 1, "VALUES", 1)
        pipe.execute_command("AI.TENSORGET", "{t}a", "VALUES")
        server.client().set("{t}w", 2)
        with pytest.raises(redis.WatchError):
            pipe.execute()
    assert client.exists("{t}m", "{t}a") == 0
    with pytest.raises(redis.ResponseError, match="cannot find run info"):
        client.execute_command("AI.INFO", "{t}m")


def test_the_redisai_clients_default_pipeline_is_a_transaction(redisai_python: Path, server: RunningServer) -> None:
    run_client_script(redisai_python, REDISAI_PIPELINE, server.port, expect="pipeline ok")


REDISAI_PIPELINE = r'''
import sys
import numpy as np
import redisai

con = redisai.Client(host="127.0.0.1", port=int(sys.argv[1]))
arr = np.array([[1.5, 2.0], [3.0, 4.5]], dtype=np.float32)
got = con.pipeline().tensorset("{t}a", arr).tensorget("{t}a").execute()
assert got[0] == b"OK" and np.array_equal(got[1], arr) and got[1].dtype == np.float32, got
pipe = con.pipeline()
pipe.set("{t}native", 1).tensorset("{t}b", [1, 2, 3], dtype="int64")
pipe.tensorget("{t}b", as_numpy=False).tensorget("{t}a", meta_only=True).tensorget("{t}b")
got = pipe.execute()
assert got[:2] == [True, b"OK"], got
assert got[2] == {"dtype": "INT64", "shape": [3], "values": [1, 2, 3]}, got
assert got[3] == {"dtype": "FLOAT", "shape": [2, 2]}, got
assert got[4].tolist() == [1, 2, 3], got
print("redisai client: pipeline ok")
'''


def test_a_transaction_over_several_slots_answers_crossslot(redis_cluster: LocalCluster) -> None:
    """As Redis Cluster answers: a queued command whose keys are on another node than the transaction's gets
    CROSSSLOT at once and EXEC fails; keys of two slots on one node fail EXEC itself with CROSSSLOT."""
    redis_cluster.flush()
    first = "{t}a"
    elsewhere = next(f"k{i}" for i in range(1000)
                     if redis_cluster.node_of_slot(key_slot(f"k{i}".encode())).port
                     != redis_cluster.node_of_slot(key_slot(first.encode())).port)
    same_node = next(f"k{i}" for i in range(1000) if key_slot(f"k{i}".encode()) != key_slot(first.encode())
                     and redis_cluster.node_of_slot(key_slot(f"k{i}".encode())).port
                     == redis_cluster.node_of_slot(key_slot(first.encode())).port)
    crossslot = b"-CROSSSLOT Keys in request don't hash to the same slot\r\n"
    with running_server(Config(port=0, redis_url=redis_cluster.seed_url, shutdown_timeout=2.0)) as server:
        raw = server.raw()
        request = (f"MULTI\r\nAI.TENSORSET {first} FLOAT 1 VALUES 1\r\nAI.TENSORGET {elsewhere} VALUES\r\n"
                   "EXEC\r\n").encode()
        expected = (b"+OK\r\n+QUEUED\r\n" + crossslot
                    + b"-EXECABORT Transaction discarded because of previous errors.\r\n")
        assert raw.call(request, expected) == expected
        request = (f"MULTI\r\nAI.TENSORSET {first} FLOAT 1 VALUES 1\r\nAI.MODELGET {same_node}\r\n"
                   "EXEC\r\n").encode()
        expected = b"+OK\r\n+QUEUED\r\n+QUEUED\r\n" + crossslot
        assert raw.call(request, expected) == expected
        assert server.client().exists(first) == 0
