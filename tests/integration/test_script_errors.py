"""Script errors end to end: compile and run-time failures, wrong types, exact bytes on the wire (both stores)."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from tests import models
from tests.scripts import A_B, SCRIPT, store_script
from tests.support import RunningServer


def test_compile_and_run_time_errors(client: redis.Redis) -> None:
    store = ("AI.SCRIPTSTORE", "bad", "CPU", "ENTRY_POINTS")
    for args, error in (
        ((1, "f", "SOURCE", "return 1"), r"^expected def but found 'return' here"),
        ((1, "f", "SOURCE", "def f(a):\n  return b\n"), r"^undefined value b"),
        ((1, "nope", "SOURCE", SCRIPT), r"^Function nope does not exist in the given script\.$"),
        ((1, "helper", "SOURCE", SCRIPT), r"^Wrong number of inputs in function helper\. Expected 3 but was 2$"),
        ((1, "f", "SOURCE", "def f(a: List[Tensor], b: List[str], c: List[int]):\n  return a[0]\n"),
         r"^Wrong inputs type in function f\. Expected signature similar to: "
         r"def f\(tensors: List\[Tensor\], keys: List\[str\], args: List\[str\]\)$"),
    ):
        with pytest.raises(redis.ResponseError, match=error):
            client.execute_command(*store, *args)
    with pytest.raises(redis.ResponseError, match=r"^GPU requested but Torch couldn't find CUDA$"):
        client.execute_command("AI.SCRIPTSTORE", "bad", "GPU:0", "ENTRY_POINTS", 1, "bar", "SOURCE", SCRIPT)
    with pytest.raises(redis.ResponseError, match=r"^unsupported device$"):
        client.execute_command("AI.SCRIPTSTORE", "bad", "TPU", "ENTRY_POINTS", 1, "bar", "SOURCE", SCRIPT)
    assert client.exists("bad") == 0
    store_script(client, "s", SCRIPT + "\ndef tup(t: List[Tensor], k: List[str], a: List[str]):\n  return t[0], 1\n",
           "bar", "tup")
    client.execute_command("AI.TENSORSET", "a", *A_B)
    with pytest.raises(redis.ResponseError, match=r"list index out of range"):
        client.execute_command("AI.SCRIPTEXECUTE", "s", "bar", "INPUTS", 1, "a", "OUTPUTS", 1, "c")
    with pytest.raises(redis.ResponseError, match=r"^Function returned non-tensor valuestup$"):
        client.execute_command("AI.SCRIPTEXECUTE", "s", "tup", "INPUTS", 1, "a", "OUTPUTS", 1, "c")
    assert client.exists("c") == 0
    assert client.execute_command("AI.SCRIPTEXECUTE", "s", "bar", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c") == b"OK"


def test_wrong_types(client: redis.Redis) -> None:
    store_script(client, "s", SCRIPT, "bar")
    client.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", models.torch_add())
    client.set("plain", "value")
    client.hset("userhash", "f", "v")
    client.execute_command("AI.TENSORSET", "t", *A_B)
    for key in ("m", "plain", "userhash", "t"):
        with pytest.raises(redis.ResponseError, match=r"^WRONGTYPE"):
            client.execute_command("AI.SCRIPTSTORE", key, "CPU", "ENTRY_POINTS", 1, "bar", "SOURCE", SCRIPT)
        commands: list[tuple[Any, ...]] = [("AI.SCRIPTGET", key), ("AI.SCRIPTDEL", key),
                                           ("AI.SCRIPTEXECUTE", key, "bar", "INPUTS", 1, "t"), ("AI.SCRIPTRUN", key, "bar")]
        for command in commands:
            with pytest.raises(redis.ResponseError, match=r"^WRONGTYPE"):
                client.execute_command(*command)
    commands = [("AI.MODELSTORE", "s", "TORCH", "CPU", "BLOB", models.torch_add()), ("AI.MODELGET", "s"),
                ("AI.TENSORGET", "s"), ("AI.MODELEXECUTE", "s", "INPUTS", 1, "t", "OUTPUTS", 1, "x")]
    for command in commands:
        with pytest.raises(redis.ResponseError, match=r"^WRONGTYPE"):
            client.execute_command(*command)
    with pytest.raises(redis.ResponseError, match=r"^tensor key is empty or in a different shard$"):
        client.execute_command("AI.SCRIPTEXECUTE", "s", "bar", "INPUTS", 2, "t", "missing", "OUTPUTS", 1, "x")
    with pytest.raises(redis.ResponseError, match=r"^WRONGTYPE"):
        client.execute_command("AI.SCRIPTEXECUTE", "s", "bar", "INPUTS", 2, "t", "plain", "OUTPUTS", 1, "x")
    for target in ("plain", "m"):
        with pytest.raises(redis.ResponseError, match=r"^WRONGTYPE"):
            client.execute_command("AI.SCRIPTEXECUTE", "s", "bar", "INPUTS", 2, "t", "t", "OUTPUTS", 1, target)
    assert client.get("plain") == b"value" and client.hgetall("userhash") == {b"f": b"v"}
    with pytest.raises(redis.ResponseError, match=r"^script key is empty$"):  # the lookup comes first
        client.execute_command("AI.SCRIPTEXECUTE", "nos", "bar", "OUTPUTS", 1, "x")


def test_error_replies_on_the_wire(server: RunningServer) -> None:
    raw = server.raw()
    for request, expected in (
        (b"AI.SCRIPTEXECUTE nope bar INPUTS 1 a\r\n", b"-ERR script key is empty\r\n"),
        (b"ai.scriptexecute nope\r\n", b"-ERR wrong number of arguments for 'AI.SCRIPTEXECUTE' command\r\n"),
        (b"ai.scriptstore nope\r\n", b"-ERR wrong number of arguments for 'ai.scriptstore' command\r\n"),
        (b"AI.SCRIPTSET s CPU SOURCE \"def bar(a, b):\\n  return a + b\\n\"\r\n", b"+OK\r\n"),
        (b"AI.SCRIPTEXECUTE s wrong_fn INPUTS 0\r\n", b"-Function does not exist: wrong_fn\r\n"),
        (b"AI.SCRIPTEXECUTE s bar OUTPUTS 1 x\r\n",
         b"-ERR KEYS or INPUTS scope must be provided first for AI.SCRIPTEXECUTE command\r\n"),
        (b"MULTI\r\nAI.SCRIPTEXECUTE s bar INPUTS 0\r\nAI.SCRIPTRUN s bar\r\nAI.SCRIPTSTORE s\r\nEXEC\r\n",
         b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*3\r\n"
         b"-ERR Cannot run RedisAI command within a transaction or a LUA script\r\n"
         b"-ERR Cannot run RedisAI command within a transaction or a LUA script\r\n"
         b"-ERR wrong number of arguments for 'AI.SCRIPTSTORE' command\r\n"),  # its own error, at EXEC
    ):
        assert raw.call(request, expected) == expected


def test_compile_errors_are_torchscripts_text_byte_for_byte(server: RunningServer) -> None:
    """Every newline of TorchScript's message becomes a space, the last one too (``<--- HERE ``), as RedisAI's."""
    raw = server.raw()
    expected = b"-expected def but found 'return' here:   File \"<string>\", line 1 return 1 ~~~~~~ <--- HERE \r\n"
    assert raw.call(b"AI.SCRIPTSTORE bad CPU ENTRY_POINTS 1 f SOURCE \"return 1\"\r\n", expected) == expected


def test_empty_function_names_do_not_exist(server: RunningServer) -> None:
    raw, client = server.raw(), server.client()
    empty_entry_point = ("AI.SCRIPTSTORE", "s", "CPU", "ENTRY_POINTS", 1, "", "SOURCE", SCRIPT)
    with pytest.raises(redis.ResponseError) as missing:
        client.execute_command(*empty_entry_point)
    assert str(missing.value) == "Function  does not exist in the given script."
    assert client.exists("s") == 0
    store_script(client, "s", SCRIPT, "bar")
    client.execute_command("AI.TENSORSET", "t", *A_B)
    for request in (b'AI.SCRIPTEXECUTE s "" INPUTS 1 t OUTPUTS 1 o\r\n', b'AI.SCRIPTRUN s "" INPUTS t OUTPUTS o\r\n'):
        assert raw.call(request, b"-Function does not exist: \r\n") == b"-Function does not exist: \r\n"
    expected = b"*1\r\n-Function does not exist: \r\n"
    dag = b'AI.DAGEXECUTE LOAD 1 t |> AI.SCRIPTEXECUTE s "" INPUTS 1 t OUTPUTS 1 o\r\n'
    assert raw.call(dag, expected) == expected
    assert client.exists("o") == 0
