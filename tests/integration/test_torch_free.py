"""What every Python in the declared range must serve, with no torch installed: ONNX models, tensors, a DAG,
AI.INFO, AI.CONFIG and INFO ai, in process and as a real `python -m server` process.

`make test-python PY=python3.12` (and python3.13) runs this module in a virtualenv without torch (CI does, for
each); `make test` runs it on 3.11 beside torch. Assertions about TORCH depend on whether torch is installed,
not skipped: the same test checks the right thing in both environments.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest
import redis

from server.compiled import describe_build
from tests.onnx_models import onnx_add
from tests.support import free_port, server_process, wait_for_port

TORCH_INSTALLED = importlib.util.find_spec("torch") is not None


def _store_and_run_onnx(client: redis.Redis) -> None:
    """AI.TENSORSET two inputs, AI.MODELSTORE an ONNX Add, AI.MODELEXECUTE it; the sum comes back."""
    client.execute_command("AI.TENSORSET", "a", "FLOAT", 2, 2, "VALUES", 1, 2, 3, 4)
    client.execute_command("AI.TENSORSET", "b", "FLOAT", 2, 2, "VALUES", 10, 20, 30, 40)
    assert client.execute_command("AI.MODELSTORE", "add", "ONNX", "CPU", "BLOB", onnx_add()) == b"OK"
    assert client.execute_command("AI.MODELEXECUTE", "add", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "c") == b"OK"
    values = client.execute_command("AI.TENSORGET", "c", "VALUES")
    assert [float(value) for value in values] == [11, 22, 33, 44]


def test_onnx_model_tensors_and_a_dag(client: redis.Redis) -> None:
    _store_and_run_onnx(client)
    reply = client.execute_command(
        "AI.DAGEXECUTE", "LOAD", 1, "a", "PERSIST", 1, "d", "|>",
        "AI.TENSORSET", "b", "FLOAT", 2, 2, "VALUES", 1, 1, 1, 1, "|>",
        "AI.MODELEXECUTE", "add", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "d")
    assert reply == [b"OK", b"OK"]
    assert [float(value) for value in client.execute_command("AI.TENSORGET", "d", "VALUES")] == [2, 3, 4, 5]


def test_info_config_and_backends(client: redis.Redis) -> None:
    _store_and_run_onnx(client)
    info = dict(zip(*[iter(client.execute_command("AI.INFO", "add"))] * 2, strict=True))
    assert (info[b"key"], info[b"type"], info[b"backend"], info[b"device"], info[b"calls"]) == (
        b"add", b"MODEL", b"ONNX", b"CPU", 1)
    assert client.execute_command("AI.CONFIG", "GET", "MODEL_CHUNK_SIZE") == 535822336
    ai = client.info("ai")
    listed = ai["ai_backends_available"]  # redis-py splits a comma list into a list
    available = listed if isinstance(listed, list) else str(listed).split(",")
    assert "ONNX" in available and ("TORCH" in available) == TORCH_INSTALLED
    assert "ai_onnxruntime_version" in ai


def test_a_torch_model_without_torch_is_refused_as_redisai_does(client: redis.Redis) -> None:
    """No torch: RedisAI's `ERR Could not load backend`; with torch, a blob that is no TorchScript is refused
    by torch itself (the server is the same code either way)."""
    with pytest.raises(redis.ResponseError) as refused:
        client.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", b"not a model")
    assert (str(refused.value) == "Could not load backend") != TORCH_INSTALLED


def test_the_server_process_starts_and_serves_onnx() -> None:
    """`python -m server` with this interpreter: the hot path it reports, a PONG, an ONNX model run."""
    port = free_port()
    with server_process("--port", str(port), "--bind", "127.0.0.1") as proc:
        wait_for_port(port, timeout=60)
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)
        assert client.ping() is True
        _store_and_run_onnx(client)
        client.close()
        proc.terminate()
        output = proc.communicate(timeout=30)[0].decode(errors="replace")
    assert proc.returncode == 0, output
    print(f"Python {sys.version.split()[0]}: hot path {describe_build()}")

