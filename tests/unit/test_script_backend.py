"""The script backend without a server: compiling, both calling conventions, output flattening, reply
conversion, and the host's guards against a blocked or closed event loop."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from backends.device import Device
from backends.errors import AIError
from backends.script_backend import compile_script, script_value
from backends.tensor import Tensor
from dag.script_work import ScriptWork
from server.ai.script_host import LoopScriptHost, refused
from server.ai.state import AIState
from server.config import Config
from server.protocol.reply import Status
from server.store.cluster_link import OneNode, RedisLink
from server.store.keyspace import Keyspace
from server.store.upstream import StoreAddress

CPU = Device("CPU", "CPU", None)
SOURCE = """
def entry(tensors: List[Tensor], keys: List[str], args: List[str]):
    return tensors[0] * float(args[0]), torch.tensor(len(keys[0]))

def positional(a, rest: List[Tensor]):
    return [a + r for r in rest]

def not_tensors(tensors: List[Tensor], keys: List[str], args: List[str]):
    return 1

def in_place(tensors: List[Tensor], keys: List[str], args: List[str]):
    return tensors[0].add_(1)

def talk(tensors: List[Tensor], keys: List[str], args: List[str]):
    redis.execute("ECHO", "hello")
"""


def _tensor(*values: float) -> Tensor:
    array = np.array(values, dtype=np.float32)
    array.flags.writeable = False  # as decoded from the store
    return Tensor("FLOAT", array.shape, array)


def test_both_calling_conventions_and_flattening() -> None:
    script = compile_script(SOURCE.encode(), CPU, ["entry", "not_tensors", "in_place", "talk"])
    scaled, length = ScriptWork(script, "entry", entry_point=True, n_outputs=2, keys=[b"ab\0cd"], args=[b"2"])(
        [_tensor(1, 2)])
    assert scaled.to_numpy().tolist() == [2.0, 4.0] and length.to_numpy().tolist() == 2  # a C string: "ab"
    sums = script.run("positional", [_tensor(1), _tensor(2), _tensor(3)], entry_point=False, n_outputs=2)
    assert [t.to_numpy().tolist() for t in sums] == [[3.0], [4.0]]
    assert script.run("not_tensors", [], entry_point=True, n_outputs=0) == []  # no OUTPUTS: result ignored
    stored = _tensor(1, 2)
    (changed,) = script.run("in_place", [stored], entry_point=True, n_outputs=1)
    assert changed.to_numpy().tolist() == [2.0, 3.0] and stored.to_numpy().tolist() == [1.0, 2.0]  # store intact
    for function, inputs, outputs, error in (
        ("not_tensors", [], 1, "Function returned non-tensor valuesnot_tensors"),
        ("positional", [_tensor(1), _tensor(2)], 2, "Function returned unexpected number of outputs - positional"),
        ("positional", [_tensor(1)], 1, "Wrong number of inputs provided to function: positional"),
        ("missing", [], 1, "Function does not exist: missing"),
    ):
        with pytest.raises(AIError) as info:
            script.run(function, inputs, entry_point=function == "not_tensors", n_outputs=outputs)
        assert info.value.message == error
    with pytest.raises(AIError, match=r"^ERR redis.execute and redisAI.model_execute only work inside a script run"):
        script.run("talk", [], entry_point=True, n_outputs=0)  # no host bound


def test_store_replies_as_script_values() -> None:
    assert script_value(None) is None and script_value(7) == 7 and script_value(b"v\xc3\xb6") == "v\u00f6"
    assert script_value(Status("OK")) == "OK" and script_value(b"OK") == "OK"
    assert script_value([b"a", [1, None], []]) == ("a", (1, None), ())  # arrays: tuples, for redis.asList
    for message, text in (
        ("WRONGTYPE Operation against a key holding the wrong kind of value",
         "Redis command returned an error: WRONGTYPE Operation against a key holding the wrong kind of value"),
        ("ERR wrong number of arguments for 'set' command", "Redis command returned an error: Invalid argument"),
        ("ERR unknown command 'nope', with args beginning with: ",
         "Redis command returned an error: No such file or directory"),
    ):
        with pytest.raises(RuntimeError, match=f"^{text}$"):
            script_value(AIError(message))


def test_commands_a_script_may_not_send() -> None:
    assert refused([b"multi"]) and refused([b"BLPOP", b"q", b"0"]) and refused([b"XREAD", b"block", b"0"])
    assert not refused([b"XREAD", b"STREAMS", b"s", b"0"]) and not refused([b"SET", b"k", b"v"])


class OkLink:
    """A store link that answers +OK to everything and keeps what it was sent: the host's thread guards are
    under test, not the store."""

    def __init__(self) -> None:
        self.router = OneNode(RedisLink(StoreAddress(), 0))  # (never connected: this link answers itself)
        self.sent: list[list[bytes]] = []

    async def pipeline(self, commands: list[list[bytes]]) -> list[object]:
        self.sent.extend(commands)
        return [b"OK" for _ in commands]


def test_host_guards_against_the_loop_thread_a_stopped_loop_and_a_closed_one() -> None:
    ai = AIState.from_config(Config(port=0))
    loop = asyncio.new_event_loop()
    link = OkLink()
    host = LoopScriptHost(loop, Keyspace(link, 0), ai.models, timeout_s=0.05)

    async def from_the_loop() -> object:
        return host.call([b"PING"])

    async def from_a_worker() -> object:
        return await asyncio.to_thread(host.call, [b"SET", b"k", b"v"])

    with pytest.raises(AIError, match=r"^ERR a script cannot call the store from the event-loop thread$"):
        loop.run_until_complete(from_the_loop())
    assert loop.run_until_complete(from_a_worker()) is not None
    with pytest.raises(AIError, match=r"^ERR timed out waiting for the store$"):  # the loop is not running
        host.call([b"GET", b"k"])
    assert link.sent == [[b"SET", b"k", b"v"]]
    loop.run_until_complete(asyncio.sleep(0))  # the stalled loop goes on: the call given up must not run late
    assert link.sent == [[b"SET", b"k", b"v"]]
    loop.close()
    with pytest.raises(AIError, match=r"^ERR the server is shutting down$"):
        host.call([b"GET", b"k"])
