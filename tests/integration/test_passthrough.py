"""Every command that is not ours reaches the store verbatim, and its reply (errors included) comes back."""

from __future__ import annotations

import pytest
import redis

from tests.support import RunningServer


def test_strings_hashes_lists_sets_zsets(client: redis.Redis) -> None:
    assert client.set("s", "v") is True
    assert client.get("s") == b"v"
    assert client.incrby("n", 5) == 5
    assert client.hset("h", mapping={"a": "1", "b": "2"}) == 2
    assert client.hgetall("h") == {b"a": b"1", b"b": b"2"}
    assert client.rpush("l", "x", "y", "z") == 3
    assert client.lrange("l", 0, -1) == [b"x", b"y", b"z"]
    assert client.sadd("set", "m1", "m2") == 2
    assert client.smembers("set") == {b"m1", b"m2"}
    assert client.zadd("z", {"a": 1.5, "b": 2}) == 2
    assert client.zrange("z", 0, -1, withscores=True) == [(b"a", 1.5), (b"b", 2.0)]


def test_streams_expiry_keys_scan_flush(client: redis.Redis) -> None:
    entry = client.xadd("st", {"f": "v"})
    assert client.xrange("st") == [(entry, {b"f": b"v"})]
    client.set("e", "1")
    assert client.expire("e", 100) is True
    assert 0 < client.ttl("e") <= 100
    assert sorted(client.keys("*")) == [b"e", b"st"]
    _cursor, keys = client.scan(0, match="e*")
    assert keys == [b"e"]
    assert client.flushall() is True
    assert client.keys("*") == []


def test_store_errors_come_back_verbatim(server: RunningServer) -> None:
    raw = server.raw()
    raw.send(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n")
    assert raw.read_exactly(b"+OK\r\n") == b"+OK\r\n"
    expected = b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
    assert raw.call(b"*3\r\n$5\r\nLPUSH\r\n$1\r\nk\r\n$1\r\nx\r\n", expected) == expected
    raw.send(b"*2\r\n$6\r\nNOSUCH\r\n$3\r\narg\r\n")
    expected = b"-ERR unknown command 'NOSUCH', with args beginning with: 'arg' \r\n"
    assert raw.read_exactly(expected) == expected
    raw.close()


def test_multi_exec_discard_watch(server: RunningServer) -> None:
    first, second = server.client(), server.client()
    pipe = first.pipeline(transaction=True)
    pipe.set("a", "1").incr("a").ping()
    assert pipe.execute() == [True, 2, True]
    with first.pipeline() as watched:
        watched.watch("a")
        second.set("a", "changed")
        watched.multi()
        watched.set("a", "mine")
        with pytest.raises(redis.WatchError):
            watched.execute()
    assert first.get("a") == b"changed"
    raw = server.raw()
    expected = b"+OK\r\n+QUEUED\r\n+OK\r\n$7\r\nchanged\r\n"
    assert raw.call(b"MULTI\r\nSET a x\r\nDISCARD\r\nGET a\r\n", expected) == expected


def test_select_holds_per_connection(server: RunningServer) -> None:
    db3, db0 = server.client(db=3), server.client()
    db3.set("only-in-3", "yes")
    assert db0.get("only-in-3") is None
    assert db3.get("only-in-3") == b"yes"
    raw = server.raw()
    assert raw.call(b"SELECT 3\r\nGET only-in-3\r\n", b"+OK\r\n$3\r\nyes\r\n") == b"+OK\r\n$3\r\nyes\r\n"
    assert raw.call(b"SELECT 99\r\n", b"-ERR DB index is out of range\r\n") == b"-ERR DB index is out of range\r\n"


def test_resp3_replies(server: RunningServer) -> None:
    conn = server.client(protocol=3)
    conn.hset("h", "f", "v")
    assert conn.hgetall("h") == {b"f": b"v"}
    conn.zadd("z", {"m": 1.5})
    assert conn.zscore("z", "m") == 1.5
    raw = server.raw()
    raw.send(b"HELLO 3\r\n")
    hello = raw.read_exactly(b"%8\r\n")
    assert hello.startswith(b"%")
    assert raw.call(b"HSET h2 f v\r\nHGETALL h2\r\n", b":1\r\n%1\r\n$1\r\nf\r\n$1\r\nv\r\n") == (
        b":1\r\n%1\r\n$1\r\nf\r\n$1\r\nv\r\n"
    )


def test_written_keys_are_in_the_real_redis(real_redis_url: str) -> None:
    from server.config import Config
    from tests.support import running_server

    direct = redis.Redis.from_url(real_redis_url)
    direct.flushall()
    with running_server(Config(port=0, redis_url=real_redis_url)) as running:
        ours = running.client()
        ours.set("through-us", "value")
        ours.hset("hash-through-us", "f", "v")
        assert direct.get("through-us") == b"value"
        assert direct.hgetall("hash-through-us") == {b"f": b"v"}
        direct.set("written-directly", "seen")
        assert ours.get("written-directly") == b"seen"


def test_pipelining_keeps_order_across_local_and_relayed(server: RunningServer) -> None:
    conn = server.client()
    pipe = conn.pipeline(transaction=False)
    for i in range(200):
        pipe.set(f"k{i}", i)
        pipe.echo(f"e{i}")
        pipe.get(f"k{i}")
        pipe.ping()
    results = pipe.execute()
    for i in range(200):
        assert results[4 * i : 4 * i + 4] == [True, f"e{i}".encode(), str(i).encode(), True]


def test_pipelined_info_waits_for_earlier_writes(server: RunningServer) -> None:
    conn = server.client()
    pipe = conn.pipeline(transaction=False)
    for i in range(50):
        pipe.set(f"key{i}", i)
    pipe.info("keyspace")
    results = pipe.execute()
    assert results[-1]["db0"]["keys"] == 50


def test_type_names_ai_values_as_redisai_does(client: redis.Redis) -> None:
    from tests import models
    from tests.scripts import SCRIPT

    client.execute_command("AI.TENSORSET", "t", "FLOAT", 1, "VALUES", 1)
    client.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", models.torch_add())
    client.execute_command("AI.SCRIPTSTORE", "s", "CPU", "ENTRY_POINTS", 1, "bar", "SOURCE", SCRIPT)
    client.set("plain", "x")
    client.hset("h", "f", "v")
    client.rpush("l", "x")
    assert [client.type(key) for key in ("t", "m", "s", "plain", "h", "l", "missing")] == [
        b"AI_TENSOR", b"AI__MODEL", b"AI_SCRIPT", b"string", b"hash", b"list", b"none"]
