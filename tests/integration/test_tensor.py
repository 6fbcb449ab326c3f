"""AI.TENSORSET / AI.TENSORGET through the server, on the embedded store and on a real redis-server."""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import redis

from server.config import Config
from tests.support import RunningServer, running_server

RUNS_ON_CLUSTER = True  # also run against a 3-primary Redis Cluster (tests/conftest.py)

NUMERIC_DTYPES = ["FLOAT", "DOUBLE", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "BOOL"]
WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


def pack(*args: Any) -> bytes:
    """One RESP request, arguments sent byte for byte."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


def stored(dtype_code: int, shape: tuple[int, ...], data: bytes) -> bytes:
    """A stored tensor, built by hand from docs/tensor-format.md."""
    return b"\x89RAI" + bytes([1, dtype_code]) + struct.pack("<H", len(shape)) + struct.pack(
        f"<{len(shape)}q", *shape) + data


def _unstamped(value: Any) -> bytes:
    """A version-2 value as the version-1 encoding of the same tensor: checks that the written header is version
    2 with a stamp, and drops the stamp (docs/tensor-format.md)."""
    assert isinstance(value, bytes) and value[4] == 2 and value[8:16] != bytes(8)
    return value[:4] + b"\x01" + value[5:8] + value[16:]


def _error(client: redis.Redis, *args: Any) -> str:
    with pytest.raises(redis.ResponseError) as info:
        client.execute_command(*args)
    return str(info.value)


def test_every_dtype_values_and_blob_round_trip(client: redis.Redis) -> None:
    for dtype in NUMERIC_DTYPES:
        assert client.execute_command("AI.TENSORSET", f"v_{dtype}", dtype, 2, "VALUES", 1, 1) == b"OK"
        _, got_dtype, _, shape, _, blob = client.execute_command("AI.TENSORGET", f"v_{dtype}", "META", "BLOB")
        assert (got_dtype, shape) == (dtype.encode(), [2])
        assert client.execute_command("AI.TENSORSET", f"b_{dtype}", dtype, 2, "BLOB", blob) == b"OK"
        for fmt in ("META", "VALUES", "BLOB"):
            from_values = client.execute_command("AI.TENSORGET", f"v_{dtype}", fmt)
            assert from_values == client.execute_command("AI.TENSORGET", f"b_{dtype}", fmt)
        expected = [b"1", b"1"] if dtype in ("FLOAT", "DOUBLE") else [1, 1]
        assert client.execute_command("AI.TENSORGET", f"v_{dtype}", "META", "VALUES") == [
            b"dtype", dtype.encode(), b"shape", [2], b"values", expected]
        assert client.execute_command("AI.TENSORGET", f"v_{dtype}") == client.execute_command(
            "AI.TENSORGET", f"v_{dtype}", "META", "BLOB")


def test_extreme_values_and_blob_bytes(client: redis.Redis) -> None:
    cases = {
        "FLOAT": np.array([[0.1, -2.5], [np.inf, 1e20]], dtype="<f4"),
        "DOUBLE": np.array([0.1, -1e300, 5e-324], dtype="<f8"),
        "INT8": np.array([-128, 127], dtype="<i1"),
        "INT16": np.array([-32768, 32767], dtype="<i2"),
        "INT32": np.array([-(2**31), 2**31 - 1], dtype="<i4"),
        "INT64": np.array([-(2**63), 2**63 - 1], dtype="<i8"),
        "UINT8": np.array([0, 255], dtype="<u1"),
        "UINT16": np.array([0, 65535], dtype="<u2"),
        "BOOL": np.array([True, False, True]),
    }
    for dtype, array in cases.items():
        shape = list(array.shape)
        assert client.execute_command("AI.TENSORSET", dtype, dtype, *shape, "BLOB", array.tobytes()) == b"OK"
        assert client.execute_command("AI.TENSORGET", dtype, "BLOB") == array.tobytes()
        values = client.execute_command("AI.TENSORGET", dtype, "VALUES")
        if dtype in ("FLOAT", "DOUBLE"):
            assert [float(v) for v in values] == array.reshape(-1).tolist()
        else:
            assert values == array.reshape(-1).astype(np.int64).tolist()
    assert client.execute_command("AI.TENSORGET", "FLOAT", "VALUES") == [
        b"0.10000000149011612", b"-2.5", b"inf", b"1.0000000200408773e+20"]


def test_zero_d_and_zero_filled_tensors(client: redis.Redis) -> None:
    assert client.execute_command("AI.TENSORSET", "s", "FLOAT", "VALUES", "3.5") == b"OK"
    assert client.execute_command("AI.TENSORGET", "s", "META", "VALUES") == [
        b"dtype", b"FLOAT", b"shape", [], b"values", [b"3.5"]]
    assert client.execute_command("AI.TENSORSET", "i", "int64", "BLOB", struct.pack("<q", -7)) == b"OK"
    assert client.execute_command("AI.TENSORGET", "i", "meta", "values") == [
        b"dtype", b"INT64", b"shape", [], b"values", [-7]]
    assert client.execute_command("AI.TENSORSET", "z", "UINT16", 2, 3) == b"OK"
    assert client.execute_command("AI.TENSORGET", "z", "VALUES") == [0] * 6
    assert client.execute_command("AI.TENSORGET", "z", "BLOB") == bytes(12)


def test_string_and_bool_tensors(client: redis.Redis) -> None:
    assert client.execute_command("AI.TENSORSET", "s", "STRING", 2, "VALUES", "str_val1", b"str_val2\0") == b"OK"
    assert client.execute_command("AI.TENSORGET", "s", "VALUES") == [b"str_val1", b"str_val2"]
    assert client.execute_command("AI.TENSORGET", "s", "BLOB") == b"str_val1\0str_val2\0"
    assert client.execute_command("AI.TENSORSET", "e", "STRING", 2) == b"OK"
    assert client.execute_command("AI.TENSORGET", "e", "META", "VALUES") == [
        b"dtype", b"STRING", b"shape", [2], b"values", [b"", b""]]
    assert client.execute_command("AI.TENSORGET", "e", "BLOB") == b"\0\0"
    blob = b"str11\0str12\0str21\0str22\0"
    assert client.execute_command("AI.TENSORSET", "x", "STRING", 2, 2, "BLOB", blob) == b"OK"
    assert client.execute_command("AI.TENSORGET", "x", "META", "VALUES") == [
        b"dtype", b"STRING", b"shape", [2, 2], b"values", [b"str11", b"str12", b"str21", b"str22"]]
    utf8 = "wörld ✓".encode()
    assert client.execute_command("AI.TENSORSET", "u", "STRING", 1, "VALUES", utf8) == b"OK"
    assert client.execute_command("AI.TENSORGET", "u", "VALUES") == [utf8]
    assert client.execute_command("AI.TENSORSET", "b", "BOOL", 2, "VALUES", 1, 0) == b"OK"
    assert client.execute_command("AI.TENSORGET", "b", "META") == [b"dtype", b"BOOL", b"shape", [2]]
    assert client.execute_command("AI.TENSORSET", "q", "BOOL", 2, "BLOB", b"\x01\x02") == b"OK"  # RedisAI leaves the last byte unchecked
    assert client.execute_command("AI.TENSORGET", "q", "VALUES") == [1, 2]
    assert client.execute_command("AI.TENSORGET", "q", "BLOB") == b"\x01\x02"


def test_golden_pairs_as_raw_resp(server: RunningServer) -> None:
    raw = server.raw()
    assert raw.call(pack("AI.TENSORSET", "t", "FLOAT", 2, 2, "VALUES", 1, 2, 3, 4), b"+OK\r\n") == b"+OK\r\n"
    expected = (b"*6\r\n$5\r\ndtype\r\n$5\r\nFLOAT\r\n$5\r\nshape\r\n*2\r\n:2\r\n:2\r\n$6\r\nvalues\r\n"
                b"*4\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n$1\r\n4\r\n")
    assert raw.call(pack("AI.TENSORGET", "t", "META", "VALUES"), expected) == expected
    expected = b"$16\r\n\x00\x00\x80?\x00\x00\x00@\x00\x00@@\x00\x00\x80@\r\n"
    assert raw.call(pack("AI.TENSORGET", "t", "BLOB"), expected) == expected
    pairs = [
        (pack("AI.TENSORSET", "tensor_INT8", "INT8", 2, "VALUES", 1, 1), b"+OK\r\n"),
        (pack("AI.TENSORGET", "tensor_INT8", "META", "VALUES"),
         b"*6\r\n$5\r\ndtype\r\n$4\r\nINT8\r\n$5\r\nshape\r\n*1\r\n:2\r\n$6\r\nvalues\r\n*2\r\n:1\r\n:1\r\n"),
        (pack("AI.TENSORSET", "s", "STRING", 2, "VALUES", "str_val1", b"str_val2\0"), b"+OK\r\n"),
        (pack("AI.TENSORGET", "s", "VALUES"), b"*2\r\n$8\r\nstr_val1\r\n$8\r\nstr_val2\r\n"),
        (pack("AI.TENSORGET", "s", "BLOB"), b"$18\r\nstr_val1\x00str_val2\x00\r\n"),
        (pack("AI.TENSORSET", "e", "STRING", 2), b"+OK\r\n"),
        (pack("AI.TENSORGET", "e", "META", "VALUES"),
         b"*6\r\n$5\r\ndtype\r\n$6\r\nSTRING\r\n$5\r\nshape\r\n*1\r\n:2\r\n$6\r\nvalues\r\n*2\r\n$0\r\n\r\n$0\r\n\r\n"),
        (pack("AI.TENSORSET", "y", "INT64", "VALUES", 1), b"+OK\r\n"),
        (pack("AI.TENSORGET", "y", "meta", "VALUES"),
         b"*6\r\n$5\r\ndtype\r\n$5\r\nINT64\r\n$5\r\nshape\r\n*0\r\n$6\r\nvalues\r\n*1\r\n:1\r\n"),
    ]
    raw.send(b"".join(request for request, _ in pairs))  # pipelined: replies come back in order
    expected = b"".join(reply for _, reply in pairs)
    assert raw.read_exactly(expected) == expected
    raw.close()


def test_resp3_sends_floats_as_doubles(server: RunningServer) -> None:
    raw = server.raw()
    hello = raw.call(b"HELLO 3\r\n", b"%")
    assert hello.startswith(b"%")
    raw.send(pack("AI.TENSORSET", "f", "FLOAT", 3, "VALUES", "1", "0.1", "-inf"))
    raw.send(pack("AI.TENSORGET", "f", "META", "VALUES"))
    expected = (b"+OK\r\n*6\r\n$5\r\ndtype\r\n$5\r\nFLOAT\r\n$5\r\nshape\r\n*1\r\n:3\r\n$6\r\nvalues\r\n"
                b"*3\r\n,1\r\n,0.10000000149011612\r\n,-inf\r\n")
    data = b""
    while not data.endswith(b",-inf\r\n") and len(data) < 4096:
        chunk = raw.sock.recv(65536)
        if not chunk:
            break
        data += chunk
    assert data.split(b"+OK\r\n", 1)[-1] == expected[len(b"+OK\r\n"):]
    raw.close()
    conn = server.client(protocol=3)
    assert conn.execute_command("AI.TENSORGET", "f", "VALUES") == [1.0, pytest.approx(0.1), float("-inf")]
    assert conn.execute_command("AI.TENSORSET", "i", "INT8", 1, "VALUES", 5) == b"OK"
    assert conn.execute_command("AI.TENSORGET", "i", "VALUES") == [5]
    conn.close()


def test_wrongtype_on_other_keys_leaves_them_alone(client: redis.Redis) -> None:
    client.hset("hash", "f", "v")
    client.set("plain", "value")
    client.set("empty", "")
    client.rpush("list", "a")
    for key in ("hash", "plain", "empty", "list"):
        assert _error(client, "AI.TENSORSET", key, "INT32", 2, "unsupported", 2, 3) == WRONGTYPE
        assert _error(client, "AI.TENSORSET", key, "FLOAT", 1, "VALUES", 1) == WRONGTYPE
        assert _error(client, "AI.TENSORGET", key, "unsupported") == WRONGTYPE
        assert _error(client, "AI.TENSORGET", key) == WRONGTYPE
        assert _error(client, "AI.TENSORGET", key, "META") == WRONGTYPE
    assert client.hgetall("hash") == {b"f": b"v"}
    assert client.get("plain") == b"value" and client.get("empty") == b""
    client.set("truncated", stored(1, (4,), bytes(12)))
    assert _error(client, "AI.TENSORGET", "truncated", "META") == WRONGTYPE
    assert _error(client, "AI.TENSORGET", "truncated", "VALUES") == WRONGTYPE


def test_a_tensorset_replaces_a_tensor_or_nothing_and_refuses_a_lookalike(client: redis.Redis) -> None:
    """The write script's own check (server/store/atomic.py): a value with our magic but a dtype code no tensor
    has, or more dimensions than a tensor may have, is not a tensor and stays; a tensor written by hand is."""
    lookalikes = {"code0": stored(0, (1,), bytes(4)), "code14": stored(14, (1,), bytes(4)),
                  "code255": stored(255, (1,), bytes(4)), "dims": stored(1, (1,) * 65, bytes(4)),
                  "version": b"\x89RAI" + bytes([3, 1]) + struct.pack("<H", 1) + struct.pack("<q", 1) + bytes(4)}
    for key, value in lookalikes.items():
        client.set(key, value)
        assert _error(client, "AI.TENSORSET", key, "FLOAT", 1, "VALUES", 1) == WRONGTYPE
        assert client.get(key) == value
    client.set("by_hand", stored(1, (64,) * 1, bytes(4 * 64)))
    client.set("most_dims", stored(1, (1,) * 64, bytes(4)))
    for key in ("by_hand", "most_dims", "missing_before"):
        assert client.execute_command("AI.TENSORSET", key, "INT8", 2, "VALUES", 1, 2) == b"OK"
        assert client.execute_command("AI.TENSORGET", key, "VALUES") == [1, 2]


def test_missing_key(client: redis.Redis) -> None:
    for args in (("missing",), ("missing", "META"), ("missing", "BLOB"), ("missing", "unsupported")):
        assert _error(client, "AI.TENSORGET", *args) == "tensor key is empty or in a different shard"


def test_overwrite_replaces_and_drops_ttl(client: redis.Redis) -> None:
    assert client.execute_command("AI.TENSORSET", "t", "FLOAT", 2, "VALUES", 1, 2) == b"OK"
    client.expire("t", 100)
    assert client.execute_command("AI.TENSORSET", "t", "INT8", 1, 3, "VALUES", 1, 2, 3) == b"OK"
    assert client.ttl("t") == -1
    assert client.execute_command("AI.TENSORGET", "t", "META", "VALUES") == [
        b"dtype", b"INT8", b"shape", [1, 3], b"values", [1, 2, 3]]
    assert client.exists("t") == 1 and client.delete("t") == 1
    assert _error(client, "AI.TENSORSET", "t", "FLOAT", 2, "VALUES", 1) == (
        "wrong number of values was given in 'AI.TENSORSET' command")
    assert client.exists("t") == 0  # a failed TENSORSET writes nothing


BIG_ELEMENTS = 64 * 1024 // 4 + 1
"""A FLOAT tensor of this many elements is over 64 KiB: written by MULTI, a check script and SET … NX
(server/store/atomic.py ``big_tensor_write``), where a small one is written by a single script."""


def _big_blob(first: float) -> bytes:
    return np.arange(first, first + BIG_ELEMENTS, dtype=np.float32).tobytes()


def test_a_big_tensorset_refuses_other_keys_and_replaces_a_tensor_dropping_its_ttl(client: redis.Redis) -> None:
    client.hset("hash", "f", "v")
    client.set("plain", "value")
    client.set("empty", "")
    client.rpush("list", "a")
    client.set("code255", stored(255, (1,), bytes(4)))
    for key in ("hash", "plain", "empty", "list", "code255"):
        assert _error(client, "AI.TENSORSET", key, "FLOAT", BIG_ELEMENTS, "BLOB", _big_blob(0)) == WRONGTYPE
    assert client.hgetall("hash") == {b"f": b"v"} and client.lrange("list", 0, -1) == [b"a"]
    assert client.get("plain") == b"value" and client.get("empty") == b""
    assert client.get("code255") == stored(255, (1,), bytes(4))
    assert client.execute_command("AI.TENSORSET", "t", "FLOAT", 2, "VALUES", 1, 2) == b"OK"
    client.expire("t", 100)
    for first in (1.0, 2.0):  # a small tensor replaced by a big one, then a big one by a big one
        assert client.execute_command("AI.TENSORSET", "t", "FLOAT", BIG_ELEMENTS, "BLOB", _big_blob(first)) == b"OK"
        assert client.ttl("t") == -1
        assert client.execute_command("AI.TENSORGET", "t", "BLOB") == _big_blob(first)
    assert client.execute_command("AI.TENSORSET", "new", "FLOAT", BIG_ELEMENTS, "BLOB", _big_blob(3)) == b"OK"
    assert client.execute_command("AI.TENSORGET", "new", "BLOB") == _big_blob(3)
    written = client.get("new")  # its header and data, sent apart, are one value in the store
    assert written[:8] == b"\x89RAI\x02\x01\x01\x00" and written[16:] == struct.pack("<q", BIG_ELEMENTS) + _big_blob(3)


def test_a_big_tensorset_after_the_store_lost_its_scripts_checks_the_key_all_the_same(client: redis.Redis) -> None:
    """SCRIPT FLUSH reaches the store: its check script is gone. A missing key is written at once (SET … NX
    writes only a missing key); a tensor is replaced once the script is sent again; another key stays as it is."""
    client.set("plain", "value")
    assert client.execute_command("AI.TENSORSET", "t", "FLOAT", 2, "VALUES", 1, 2) == b"OK"
    for key, answer in (("missing", b"OK"), ("t", b"OK"), ("plain", WRONGTYPE)):
        assert client.script_flush() is True
        args = ("AI.TENSORSET", key, "FLOAT", BIG_ELEMENTS, "BLOB", _big_blob(5))
        assert (client.execute_command(*args) if answer == b"OK" else _error(client, *args)) == answer
    assert client.execute_command("AI.TENSORGET", "missing", "BLOB") == _big_blob(5)
    assert client.execute_command("AI.TENSORGET", "t", "BLOB") == _big_blob(5)
    assert client.get("plain") == b"value"


def test_big_blob_replies_leave_whole_and_in_order_among_others(server: RunningServer) -> None:
    """A big BLOB's data is written as its own buffer, not joined into its reply (server/protocol/reply.py
    ``vectored``): pipelined between small replies, in RESP2 and RESP3, every reply arrives whole and in order,
    and a suppressed one (CLIENT REPLY SKIP) is not written at all."""
    blob = _big_blob(7)
    conn = server.client()
    assert conn.execute_command("AI.TENSORSET", "t", "FLOAT", BIG_ELEMENTS, "BLOB", blob) == b"OK"
    conn.set("plain", "v")
    bulk = b"$%d\r\n%s\r\n" % (len(blob), blob)
    meta_blob = (b"*6\r\n$5\r\ndtype\r\n$5\r\nFLOAT\r\n$5\r\nshape\r\n*1\r\n:%d\r\n$4\r\nblob\r\n" % BIG_ELEMENTS
                 + bulk)
    raw = server.raw()
    for resp3 in (False, True):
        if resp3:
            raw.switch_to_resp3()
        raw.send(b"PING\r\nAI.TENSORGET t BLOB\r\nGET plain\r\nAI.TENSORGET t META BLOB\r\n"
                 b"AI.TENSORGET t BLOB\r\nCLIENT REPLY SKIP\r\nAI.TENSORGET t BLOB\r\nPING\r\n")
        expected = b"+PONG\r\n" + bulk + b"$1\r\nv\r\n" + meta_blob + bulk + b"+PONG\r\n"
        assert raw.read_exactly(expected) == expected
    raw.close()


def test_plain_set_of_a_valid_encoding_is_a_tensor(client: redis.Redis) -> None:
    data = np.array([[1.5, 2.5, 3.5]], dtype="<f8").tobytes()
    client.set("hand", stored(2, (1, 3), data))
    assert client.execute_command("AI.TENSORGET", "hand", "META", "VALUES") == [
        b"dtype", b"DOUBLE", b"shape", [1, 3], b"values", [b"1.5", b"2.5", b"3.5"]]
    assert client.execute_command("AI.TENSORGET", "hand", "META") == [b"dtype", b"DOUBLE", b"shape", [1, 3]]
    client.set("strings", stored(10, (2,), b"ab\0\0"))
    assert client.execute_command("AI.TENSORGET", "strings", "VALUES") == [b"ab", b""]
    assert client.execute_command("AI.TENSORSET", "hand", "UINT8", 1, "VALUES", 9) == b"OK"  # a tensor: overwritable
    written = client.get("hand")  # written in format version 2: the stamp (8 bytes) before the dims
    assert written[:8] == b"\x89RAI\x02\x07\x01\x00" and written[16:] == struct.pack("<q", 1) + b"\x09"
    client.set("half", stored(11, (2,), np.array([1, 2], dtype="<f2").tobytes()))  # a dtype RedisAI cannot name
    assert client.execute_command("AI.TENSORGET", "half", "BLOB") == np.array([1, 2], dtype="<f2").tobytes()
    assert _error(client, "AI.TENSORGET", "half", "META") == "unsupported dtype"
    assert _error(client, "AI.TENSORGET", "half", "VALUES") == "cannot get values for this data type"


def test_large_tensor_round_trip(client: redis.Redis) -> None:
    array = np.arange(4 * 1024 * 1024, dtype=np.float32).reshape(1024, 4096)  # 16 MiB
    assert client.execute_command("AI.TENSORSET", "big", "FLOAT", 1024, 4096, "BLOB", array.tobytes()) == b"OK"
    assert client.execute_command("AI.TENSORGET", "big", "META") == [b"dtype", b"FLOAT", b"shape", [1024, 4096]]
    reply = client.execute_command("AI.TENSORGET", "big")
    assert reply[:4] == [b"dtype", b"FLOAT", b"shape", [1024, 4096]]
    assert np.array_equal(np.frombuffer(reply[5], dtype="<f4").reshape(1024, 4096), array)


def _one_key_spec(flags: bytes) -> bytes:
    """Redis 7's key spec of a command whose one key is its first argument (RESP2)."""
    return (b"*1\r\n*6\r\n$5\r\nflags\r\n" + flags + b"$12\r\nbegin_search\r\n*4\r\n$4\r\ntype\r\n$5\r\nindex\r\n"
            b"$4\r\nspec\r\n*2\r\n$5\r\nindex\r\n:1\r\n$9\r\nfind_keys\r\n*4\r\n$4\r\ntype\r\n$5\r\nrange\r\n"
            b"$4\r\nspec\r\n*6\r\n$7\r\nlastkey\r\n:0\r\n$7\r\nkeystep\r\n:1\r\n$5\r\nlimit\r\n:0\r\n")


def test_command_table_entries(server: RunningServer) -> None:
    raw = server.raw()
    expected = (b"*2\r\n*10\r\n$12\r\nai.tensorset\r\n:-1\r\n*2\r\n+write\r\n+denyoom\r\n:1\r\n:1\r\n:1\r\n"
                b"*1\r\n+@ai\r\n*0\r\n" + _one_key_spec(b"*2\r\n+OW\r\n+update\r\n") + b"*0\r\n"
                b"*10\r\n$12\r\nai.tensorget\r\n:-1\r\n*1\r\n+readonly\r\n:1\r\n:1\r\n:1\r\n*1\r\n+@ai\r\n*0\r\n"
                + _one_key_spec(b"*2\r\n+RO\r\n+access\r\n") + b"*0\r\n")
    assert raw.call(pack("COMMAND", "INFO", "AI.TENSORSET", "AI.TENSORGET"), expected) == expected
    expected = b"*1\r\n$1\r\nk\r\n"
    assert raw.call(pack("COMMAND", "GETKEYS", "AI.TENSORSET", "k", "FLOAT", 1), expected) == expected
    raw.close()


@pytest.fixture
def server_on_real_redis(real_redis_url: str) -> Iterator[tuple[RunningServer, redis.Redis]]:
    direct = redis.Redis.from_url(real_redis_url)
    direct.flushall()
    with running_server(Config(port=0, redis_url=real_redis_url, shutdown_timeout=2.0)) as running:
        yield running, direct
    direct.close()


def test_stored_bytes_read_directly_from_redis(server_on_real_redis: tuple[RunningServer, redis.Redis]) -> None:
    running, direct = server_on_real_redis
    conn = running.client()
    conn.execute_command("AI.TENSORSET", "t", "FLOAT", 2, 2, "VALUES", 1, 2, 3, 4)
    assert _unstamped(direct.get("t")) == stored(1, (2, 2), np.array([1, 2, 3, 4], dtype="<f4").tobytes())
    conn.execute_command("AI.TENSORSET", "s", "STRING", 3, "VALUES", "a", "", "ccc")
    assert _unstamped(direct.get("s")) == stored(10, (3,), b"a\0\0ccc\0")
    conn.execute_command("AI.TENSORSET", "z", "BOOL", "VALUES", 1)
    assert _unstamped(direct.get("z")) == stored(9, (), b"\x01")
    raw = direct.get("t")
    assert isinstance(raw, bytes)
    ndim = struct.unpack_from("<H", raw, 6)[0]  # the docs/tensor-format.md reader, by hand (version 2)
    shape = struct.unpack_from(f"<{ndim}q", raw, 16)
    assert np.frombuffer(raw, dtype="<f4", offset=16 + 8 * ndim).reshape(shape).tolist() == [[1, 2], [3, 4]]
    direct.set("by_hand", stored(5, (3,), np.array([-1, 0, 7], dtype="<i4").tobytes()))
    assert conn.execute_command("AI.TENSORGET", "by_hand", "VALUES") == [-1, 0, 7]
    conn.close()


@pytest.mark.slow
def test_a_100_mb_tensor_round_trips_and_one_over_the_stores_bulk_limit_is_refused(client: redis.Redis) -> None:
    array = np.arange(25 * 1024 * 1024, dtype=np.float32)  # 100 MiB
    assert client.execute_command("AI.TENSORSET", "huge", "FLOAT", array.size, "BLOB", array.tobytes()) == b"OK"
    got = client.execute_command("AI.TENSORGET", "huge", "BLOB")
    assert np.array_equal(np.frombuffer(got, np.float32), array)
    assert client.execute_command("AI.TENSORGET", "huge", "META") == [b"dtype", b"FLOAT", b"shape", [array.size]]
    limit = str(client.config_get("proto-max-bulk-len")["proto-max-bulk-len"])
    client.config_set("proto-max-bulk-len", str(1024 * 1024))
    try:
        for _ in range(2):  # the first finds the lowered limit (it closed the connection), the second knows it
            with pytest.raises(redis.ResponseError, match="invalid bulk length: the stored tensor would be 2400024 "
                               "bytes, over the store's proto-max-bulk-len of 1048576"):
                client.execute_command("AI.TENSORSET", "over", "FLOAT", 600_000, "BLOB", bytes(2_400_000))
    finally:
        client.config_set("proto-max-bulk-len", limit)
    assert client.exists("over") == 0
    assert client.execute_command("AI.TENSORSET", "after", "FLOAT", 2, "VALUES", 1, 2) == b"OK"
    assert client.execute_command("AI.TENSORGET", "after", "VALUES") == [b"1", b"2"]


def test_values_of_a_tensor_over_the_limit_is_refused_and_blob_answered(store_url: str) -> None:
    """--tensorget-values-max: a big VALUES reply would stall every client on the event loop; BLOB is answered."""
    with running_server(Config(port=0, redis_url=store_url, tensorget_values_max=4)) as server:
        conn = server.client()
        conn.execute_command("AI.TENSORSET", "{t}four", "FLOAT", 2, 2, "VALUES", 1, 2, 3, 4)
        conn.execute_command("AI.TENSORSET", "{t}five", "INT8", 5, "VALUES", 1, 2, 3, 4, 5)
        assert conn.execute_command("AI.TENSORGET", "{t}four", "VALUES") == [b"1", b"2", b"3", b"4"]
        refused = "tensor has 5 elements, over --tensorget-values-max (4) for VALUES; ask for BLOB"
        for flags in (("VALUES",), ("META", "VALUES")):
            with pytest.raises(redis.ResponseError, match=re.escape(refused)):
                conn.execute_command("AI.TENSORGET", "{t}five", *flags)
        assert conn.execute_command("AI.TENSORGET", "{t}five", "BLOB") == bytes([1, 2, 3, 4, 5])
        assert conn.execute_command("AI.TENSORGET", "{t}five", "META") == [b"dtype", b"INT8", b"shape", [5]]
        dag = conn.execute_command("AI.DAGEXECUTE", "LOAD", 2, "{t}four", "{t}five", "|>", "AI.TENSORGET", "{t}five", "VALUES",
                                   "|>", "AI.TENSORGET", "{t}four", "VALUES")
        assert isinstance(dag[0], redis.ResponseError) and str(dag[0]) == refused
        assert dag[1] == [b"1", b"2", b"3", b"4"]
        pipe = conn.pipeline(transaction=True)
        pipe.execute_command("AI.TENSORGET", "{t}five", "VALUES")
        pipe.execute_command("AI.TENSORGET", "{t}four", "VALUES")
        inside = pipe.execute(raise_on_error=False)
        assert isinstance(inside[0], redis.ResponseError) and str(inside[0]) == refused
        assert inside[1] == [b"1", b"2", b"3", b"4"]
