"""RedisAI 1.2.7's exact error replies for AI.TENSORSET / AI.TENSORGET, byte for byte on the wire.

The texts and which check wins when several fail are RedisAI's; the triggers are those of RedisAI's own
tests where they have one.
"""

from __future__ import annotations

import struct
from typing import Any

from tests.integration.test_tensor import pack
from tests.support import RunningServer

WT = "WRONGTYPE Operation against a key holding the wrong kind of value"

TENSORSET_ERRORS: list[tuple[tuple[Any, ...], str]] = [
    (("AI.TENSORSET",), "ERR wrong number of arguments for 'AI.TENSORSET' command"),
    (("AI.TENSORSET", "z"), "ERR wrong number of arguments for 'AI.TENSORSET' command"),
    (("ai.tensorset", "z", "FLOAT"), "ERR wrong number of arguments for 'ai.tensorset' command"),
    (("AI.TENSORSET", "non-tensor", "INT32", 2, "unsupported", 2, 3), WT),
    (("AI.TENSORSET", "hash", "FLOAT", 1), WT),
    (("AI.TENSORSET", "z", "INT128", 2, "VALUES", 2, 3), "ERR invalid data type"),
    (("AI.TENSORSET", "z", "INT32", -1, "VALUES", 2, 3), "ERR invalid or negative value found in tensor shape"),
    (("AI.TENSORSET", "z", "INT32", 2, "not_a_number", "VALUES", 2, 3),
     "ERR invalid or negative value found in tensor shape"),
    (("AI.TENSORSET", "z", "FLOAT", 2, "VALUES", 2, "A"), "ERR invalid value"),
    (("AI.TENSORSET", "z", "INT32", 2, "VALUES", 2, "1.87"), "ERR invalid value"),
    (("AI.TENSORSET", "z", "BOOL", 2, "VALUES", 1, 2), "ERR invalid value"),
    (("AI.TENSORSET", "z", "INT8", 2, "VALUES", -1, -128), "ERR invalid value"),
    (("AI.TENSORSET", "z", "STRING", 2, "VALUES", "valid C-string", b"invalid\0C-string"),
     "ERR C-string value contains null character"),
    (("AI.TENSORSET", "z", "FLOAT", 2, "VALUES", 1), "ERR wrong number of values was given in 'AI.TENSORSET' command"),
    (("AI.TENSORSET", "z", "FLOAT", 2, "VALUES", 1, 2, 3),
     "ERR wrong number of values was given in 'AI.TENSORSET' command"),
    (("AI.TENSORSET", "z", "FLOAT", 2, "BLOB", b"\x00", "extra-argument"),
     "ERR a single binary string should come after the BLOB argument in 'AI.TENSORSET' command"),
    (("AI.TENSORSET", "z", "FLOAT", 2, "BLOB"),
     "ERR a single binary string should come after the BLOB argument in 'AI.TENSORSET' command"),
    (("AI.TENSORSET", "z", "FLOAT", 1, 1, 28, 280, "BLOB", bytes(28 * 28 * 4)),
     "ERR data length does not match tensor shape and type"),
    (("AI.TENSORSET", "z", "STRING", 2, "BLOB", b"single c-string\0"),
     "ERR Number of string elements in data blob does not match tensor length"),
    (("AI.TENSORSET", "z", "STRING", 2, "BLOB", b"one\0two\0three\0"),
     "ERR Number of string elements in data blob does not match tensor length"),
    (("AI.TENSORSET", "z", "STRING", 2, "BLOB", b"C-string\0followed by a non C-string"),
     "ERR Number of string elements in data blob does not match tensor length"),
    (("AI.TENSORSET", "z", "BOOL", 2, "BLOB", b"\x02\x01"), "ERR BOOL tensor elements must be 0 or 1"),
    (("AI.TENSORSET", "z", "INT64", 2**20, 2**20, 2**20), "ERR could not save tensor"),  # beyond a Redis string
]

TENSORGET_ERRORS: list[tuple[tuple[Any, ...], str]] = [
    (("AI.TENSORGET",), "ERR wrong number of arguments for 'AI.TENSORGET' command"),
    (("Ai.TensorGet", "t", "META", "VALUES", "extra-arg"), "ERR wrong number of arguments for 'Ai.TensorGet' command"),
    (("AI.TENSORGET", "empty"), "ERR tensor key is empty or in a different shard"),
    (("AI.TENSORGET", "empty", "unsupported"), "ERR tensor key is empty or in a different shard"),
    (("AI.TENSORGET", "non-tensor", "unsupported"), WT),
    (("AI.TENSORGET", "hash", "META"), WT),
    (("AI.TENSORGET", "t", "unsupported_format"), "ERR unsupported data format"),
    (("AI.TENSORGET", "t", "BLOB", "VALUES"), "ERR both BLOB and VALUES specified"),
    (("AI.TENSORGET", "half"), "ERR unsupported dtype"),
    (("AI.TENSORGET", "half", "META"), "ERR unsupported dtype"),
    (("AI.TENSORGET", "half", "VALUES"), "ERR cannot get values for this data type"),
]


def _check(server: RunningServer, cases: list[tuple[tuple[Any, ...], str]]) -> None:
    raw = server.raw()
    raw.send(b"".join(pack(*args) for args, _ in cases))
    expected = b"".join(b"-" + text.encode() + b"\r\n" for _, text in cases)
    assert raw.read_exactly(expected) == expected
    raw.close()


def _prepare(server: RunningServer) -> None:
    conn = server.client()
    conn.set("non-tensor", "value")
    conn.hset("hash", "f", "v")
    conn.execute_command("AI.TENSORSET", "t", "FLOAT", 2, "VALUES", 1, 1)
    half = b"\x89RAI\x01\x0b\x01\x00" + struct.pack("<q", 2) + b"\x00\x3c\x00\x40"  # FLOAT16 [1, 2]
    conn.set("half", half)
    conn.close()


def test_tensorset_error_replies(server: RunningServer) -> None:
    _prepare(server)
    _check(server, TENSORSET_ERRORS)
    conn = server.client()
    assert conn.exists("z") == 0 and conn.get("non-tensor") == b"value"
    conn.close()


def test_tensorget_error_replies(server: RunningServer) -> None:
    _prepare(server)
    _check(server, TENSORGET_ERRORS)
