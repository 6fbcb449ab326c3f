"""Input meant to hurt: it gets a clear error, the server lives on, other clients notice nothing."""

from __future__ import annotations

import struct

import pytest
import redis

from backends.tensor import MAGIC
from tests.support import RunningServer

ENTRY = "def f(tensors: List[Tensor], keys: List[str], args: List[str]):\n    return "


def test_deeply_nested_script_source_does_not_crash_the_server(client: redis.Redis) -> None:
    source = ENTRY + "(" * 10000 + "tensors[0]" + ")" * 10000 + "\n"
    client.execute_command("AI.SCRIPTSTORE", "deep", "CPU", "ENTRY_POINTS", 1, "f", "SOURCE", source)
    client.execute_command("AI.TENSORSET", "x", "FLOAT", 1, "VALUES", 3)
    client.execute_command("AI.SCRIPTEXECUTE", "deep", "f", "INPUTS", 1, "x", "OUTPUTS", 1, "y")
    assert client.execute_command("AI.TENSORGET", "y", "VALUES") == [b"3"]


def test_scripts_cannot_touch_files(client: redis.Redis) -> None:
    source = ENTRY + "torch.from_file('/etc/hostname', False, 4, dtype=torch.uint8)\n"
    with pytest.raises(redis.ResponseError, match="does not allow: aten::from_file"):
        client.execute_command("AI.SCRIPTSTORE", "spy", "CPU", "ENTRY_POINTS", 1, "f", "SOURCE", source)
    assert client.exists("spy") == 0


def test_huge_string_tensors_are_refused_cheaply(client: redis.Redis) -> None:
    with pytest.raises(redis.ResponseError, match="STRING tensors are limited"):
        client.execute_command("AI.TENSORSET", "k", "STRING", 20_000_000)
    header = MAGIC + struct.pack("<BBH", 1, 10, 1) + struct.pack("<q", 50_000_000)
    client.set("forged", header + b"\0" * 50_000_000)
    with pytest.raises(redis.ResponseError, match="STRING tensors are limited"):
        client.execute_command("AI.TENSORGET", "forged", "VALUES")
    assert client.ping() is True


def test_forged_header_with_absurd_dims_is_wrongtype(client: redis.Redis) -> None:
    header = MAGIC + struct.pack("<BBH", 1, 1, 2) + struct.pack("<qq", 0, 2**62)
    client.set("absurd", header)
    with pytest.raises(redis.ResponseError, match=r"^WRONGTYPE"):
        client.execute_command("AI.TENSORGET", "absurd", "BLOB")


def test_device_names_cannot_forge_info_fields(server: RunningServer) -> None:
    conn = server.client()
    conn.execute_command("AI.SCRIPTSTORE", "s", "CPU\r\nforged_field:1", "ENTRY_POINTS", 1, "f", "SOURCE",
                         ENTRY + "tensors[0]\n")
    info = conn.info("ai")
    assert "forged_field" not in info and all("\n" not in str(value) for value in info.values())
    conn.execute_command("AI.SCRIPTSTORE", "odd", "CPU:\u00b2", "ENTRY_POINTS", 1, "f", "SOURCE", ENTRY + "tensors[0]\n")
    assert conn.exists("odd") == 1


def test_script_keys_must_be_text(client: redis.Redis) -> None:
    source = ("def f(tensors: List[Tensor], keys: List[str], args: List[str]):\n"
              "    redis.execute(\"SET\", keys[0], \"v\")\n    return tensors[0]\n")
    client.execute_command("AI.SCRIPTSTORE", "w", "CPU", "ENTRY_POINTS", 1, "f", "SOURCE", source)
    client.execute_command("AI.TENSORSET", "x", "FLOAT", 1, "VALUES", 1)
    with pytest.raises(redis.ResponseError, match="must be UTF-8"):
        client.execute_command("AI.SCRIPTEXECUTE", "w", "f", "KEYS", 1, b"k\xff", "INPUTS", 1, "x", "OUTPUTS", 1, "y")
    assert client.keys("k*") == []
