"""Scripts cannot reach the file system, the network or processes: every op outside the allow-list
(backends/script_ops.py) is refused at store time, naming the op, and nothing it would have done happens."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import torch

from tests.support import RunningServer

HEADER = "def f(tensors: List[Tensor], keys: List[str], args: List[str]):\n"


def _file_schemas() -> list[torch._C.FunctionSchema]:
    """Every registered op that takes a file name: a str argument whose name says file or path."""
    return [schema for schema in torch._C._jit_get_all_schemas()
            if any(str(arg.type) == "str" and ("file" in arg.name.lower() or "path" in arg.name.lower())
                   for arg in schema.arguments)]


def _value(arg: torch._C.Argument, target: Path) -> str:
    """TorchScript source for a required argument of a file op: the target path, or the input tensor."""
    kind = str(arg.type)
    if kind == "str":
        return repr(str(target))
    if kind in ("Tensor", "t"):
        return "tensors[0]"
    raise AssertionError(f"no value for {arg.name}: {kind}")


def _calls(schema: torch._C.FunctionSchema, target: Path) -> Iterator[tuple[str, str]]:
    """(spelling, call source) for ``schema``: ``torch.x(...)`` where torch has it, ``torch.ops.aten.x(...)``."""
    namespace, name = schema.name.split("::")
    required = [arg for arg in schema.arguments if not arg.has_default_value()]
    positional = [_value(arg, target) for arg in required if not arg.kwarg_only]
    keywords = [f"{arg.name}={_value(arg, target)}" for arg in required if arg.kwarg_only]
    args = ", ".join(positional + keywords)
    if namespace == "aten" and hasattr(torch, name):
        yield f"torch.{name}", f"torch.{name}({args})"
    yield f"torch.ops.{namespace}.{name}", f"torch.ops.{namespace}.{name}({args})"


def test_the_file_ops_are_found() -> None:
    names = {schema.name for schema in _file_schemas()}
    assert {"aten::save", "aten::from_file"} <= names


@pytest.mark.parametrize("schema", _file_schemas(), ids=lambda s: f"{s.name}.{s.overload_name or 'default'}")
def test_every_op_taking_a_file_name_is_refused_in_both_spellings(server: RunningServer, tmp_path: Path,
                                                                  schema: torch._C.FunctionSchema) -> None:
    client = server.client()
    client.execute_command("AI.TENSORSET", "x", "FLOAT", 1, "VALUES", 1)
    for number, (spelling, call) in enumerate(_calls(schema, tmp_path / "written")):
        # a result nobody uses would be dropped by the compiler (and never run): the script returns it
        body = f"    return {call}\n" if schema.returns else f"    {call}\n    return tensors[0]\n"
        with pytest.raises(redis.ResponseError, match=f"does not allow: .*{schema.name}") as refused:
            client.execute_command("AI.SCRIPTSTORE", f"s{number}", "CPU", "ENTRY_POINTS", 1, "f", "SOURCE",
                                   HEADER + body)
        assert str(refused.value).startswith("script uses operations this server does not allow: "), spelling
        assert client.exists(f"s{number}") == 0, spelling
    assert list(tmp_path.iterdir()) == []


HIDDEN = {
    "nested block": HEADER + "    for i in range(2):\n        if i == 1:\n            torch.save(tensors[0], {path})\n"
                    "    return tensors[0]\n",
    "helper function": "def helper(x: Tensor):\n    torch.save(x, {path})\n\n" + HEADER +
                       "    helper(tensors[0])\n    return tensors[0]\n",
    "function not an entry point": "def other(x: Tensor):\n    torch.ops.aten.save(x, {path})\n    return x\n\n"
                                   + HEADER + "    return tensors[0]\n",
}


@pytest.mark.parametrize("where", sorted(HIDDEN))
def test_a_hidden_call_is_found(client: redis.Redis, tmp_path: Path, where: str) -> None:
    source = HIDDEN[where].format(path=repr(str(tmp_path / "written")))
    with pytest.raises(redis.ResponseError, match="does not allow: aten::save"):
        client.execute_command("AI.SCRIPTSTORE", "s", "CPU", "ENTRY_POINTS", 1, "f", "SOURCE", source)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("call", "op"), [
    ("torch.ops.profiler._record_function_enter('x')", "profiler::_record_function_enter"),
    ("torch.ops.aten.set_(tensors[0], tensors[0])", "aten::set_"),
    ("torch.as_strided(tensors[0], [1], [1])", "aten::as_strided"),
])
def test_ops_outside_the_allow_list_are_named(client: redis.Redis, call: str, op: str) -> None:
    source = HEADER + f"    r = {call}\n    return tensors[0] + r\n"
    with pytest.raises(redis.ResponseError, match=f"does not allow: {op}$"):
        client.execute_command("AI.SCRIPTSTORE", "s", "CPU", "ENTRY_POINTS", 1, "f", "SOURCE", source)


def test_printing_is_refused(client: redis.Redis) -> None:
    with pytest.raises(redis.ResponseError, match="does not allow: prim::Print"):
        client.execute_command("AI.SCRIPTSTORE", "s", "CPU", "ENTRY_POINTS", 1, "f", "SOURCE",
                               HEADER + "    print('hi')\n    return tensors[0]\n")


@pytest.mark.parametrize("call", ["torch.load({path})", "torch.jit.load({path})", "open({path}, 'w')",
                                  "torch.jit._wait(torch.jit._fork(torch.neg, tensors[0]))"])
def test_other_ways_to_files_and_threads_do_not_compile_or_are_refused(client: redis.Redis, tmp_path: Path,
                                                                       call: str) -> None:
    source = HEADER + f"    r = {call.format(path=repr(str(tmp_path / 'x')))}\n    return tensors[0], r\n"
    with pytest.raises(redis.ResponseError):
        client.execute_command("AI.SCRIPTSTORE", "s", "CPU", "ENTRY_POINTS", 1, "f", "SOURCE", source)
    assert client.exists("s") == 0
    assert list(tmp_path.iterdir()) == []


def test_a_script_written_straight_into_the_store_is_checked_when_it_is_compiled(client: redis.Redis,
                                                                                 tmp_path: Path) -> None:
    """As if an older server (or anyone with the store) wrote it: the check is made at compile time, not only
    by AI.SCRIPTSTORE."""
    source = (HEADER + f"    torch.save(tensors[0], {str(tmp_path / 'x')!r})\n    return tensors[0]\n").encode()
    client.hset("planted", mapping={"__redisai__": "script", "format": "1", "device": "CPU", "tag": "",
                                    "entry_points": '["f"]', "digest": hashlib.sha256(source).hexdigest(),
                                    "source": source})
    client.execute_command("AI.TENSORSET", "x", "FLOAT", 1, "VALUES", 1)
    with pytest.raises(redis.ResponseError, match="does not allow: aten::save"):
        client.execute_command("AI.SCRIPTEXECUTE", "planted", "f", "INPUTS", 1, "x", "OUTPUTS", 1, "y")
    assert list(tmp_path.iterdir()) == [] and client.exists("y") == 0
