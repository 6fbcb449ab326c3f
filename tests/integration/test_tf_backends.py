"""TF and TFLITE models end to end over redis-py: frozen GraphDefs and .tflite flatbuffers the tests build
(tests/tf_models.py), every output compared with TensorFlow run in-process on the same inputs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import redis

from backends.base import GraphNames, RuntimeOptions
from backends.device import Device
from backends.tf_backend import TfBackend
from server.config import Config
from tests import tf_models
from tests.support import RunningServer, run_in_threads, running_server

RUNS_ON_CLUSTER = True  # also run against a 3-primary Redis Cluster (tests/conftest.py)

AB = ("FLOAT", 2, "VALUES", 2, 3)


@dataclass(frozen=True)
class Blobs:
    mul: bytes
    dense: bytes
    int_string: bytes
    add_mul: bytes
    add_mul_reference: Callable[[np.ndarray, np.ndarray], list[np.ndarray]]
    quantized: bytes


@pytest.fixture(scope="module")
def blobs() -> Blobs:
    """Built once for the module: converting to TFLite takes a while."""
    add_mul, reference = tf_models.tflite_add_mul()
    return Blobs(tf_models.tf_mul(), tf_models.tf_dense(), tf_models.tf_int_and_string(), add_mul, reference,
                 tf_models.tflite_quantized())


def _store_tf(conn: redis.Redis, key: str, blob: bytes, inputs: list[str], outputs: list[str], *extra: object,
              device: str = "CPU") -> object:
    return conn.execute_command("AI.MODELSTORE", key, "TF", device, *extra, "INPUTS", len(inputs), *inputs,
                                "OUTPUTS", len(outputs), *outputs, "BLOB", blob)


def _set(conn: redis.Redis, key: str, array: np.ndarray) -> None:
    dtype = {"float32": "FLOAT", "int32": "INT32", "int8": "INT8"}[str(array.dtype)]
    conn.execute_command("AI.TENSORSET", key, dtype, *array.shape, "BLOB", array.tobytes())


def _get(conn: redis.Redis, key: str, dtype: str) -> np.ndarray:
    meta = conn.execute_command("AI.TENSORGET", key, "META", "BLOB")
    return np.frombuffer(meta[5], dtype=dtype).reshape(meta[3])


def _error(call: Callable[[], object]) -> str:
    with pytest.raises(redis.ResponseError) as info:
        call()
    return str(info.value)


# --- TF ------------------------------------------------------------------------------------------------------------


def test_tf_store_get_execute_del(client: redis.Redis, blobs: Blobs) -> None:
    assert _store_tf(client, "m", blobs.mul, ["a", "b"], ["mul"], "TAG", "v1.0", device="cpu") == b"OK"
    assert client.execute_command("AI.MODELGET", "m", "META") == [
        b"backend", b"TF", b"device", b"cpu", b"tag", b"v1.0", b"batchsize", 0, b"minbatchsize", 0,
        b"inputs", [b"a", b"b"], b"outputs", [b"mul"], b"minbatchtimeout", 0]
    assert client.execute_command("AI.MODELGET", "m", "BLOB") == blobs.mul
    client.execute_command("AI.TENSORSET", "a", *AB)
    client.execute_command("AI.TENSORSET", "b", *AB)
    assert client.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "c") == b"OK"
    expected = tf_models.run_graph(blobs.mul, {"a": np.array([2, 3], np.float32), "b": np.array([2, 3], np.float32)},
                                   ["mul"])[0]
    assert np.array_equal(_get(client, "c", "float32"), expected) and expected.tolist() == [4, 9]
    info = client.execute_command("AI.INFO", "m")
    assert info[:10] == [b"key", b"m", b"type", b"MODEL", b"backend", b"TF", b"device", b"cpu", b"tag", b"v1.0"]
    assert info[15] == 1  # calls
    assert client.execute_command("AI.MODELDEL", "m") == b"OK"
    assert "model key is empty" in _error(lambda: client.execute_command("AI.MODELGET", "m"))


def test_tf_outputs_match_tensorflow(client: redis.Redis, blobs: Blobs) -> None:
    _store_tf(client, "dense", blobs.dense, ["x"], ["logits", "probs"])
    x = np.random.default_rng(7).standard_normal((5, 4)).astype(np.float32)
    _set(client, "x", x)
    client.execute_command("AI.MODELEXECUTE", "dense", "INPUTS", 1, "x", "OUTPUTS", 2, "l", "p")
    logits, probs = tf_models.run_graph(blobs.dense, {"x": x}, ["logits", "probs"])
    assert np.allclose(_get(client, "l", "float32"), logits, rtol=1e-6, atol=1e-6)
    assert np.allclose(_get(client, "p", "float32"), probs, rtol=1e-6, atol=1e-6)
    assert client.execute_command("AI.TENSORGET", "p", "META") == [b"dtype", b"FLOAT", b"shape", [5, 3]]


def test_one_graph_stored_with_other_outputs_is_another_model(client: redis.Redis, blobs: Blobs) -> None:
    _store_tf(client, "logits", blobs.dense, ["x"], ["logits"])
    _store_tf(client, "probs", blobs.dense, ["x"], ["probs"])
    x = np.ones((1, 4), np.float32)
    _set(client, "x", x)
    for key in ("logits", "probs"):
        client.execute_command("AI.MODELEXECUTE", key, "INPUTS", 1, "x", "OUTPUTS", 1, f"out_{key}")
        assert np.allclose(_get(client, f"out_{key}", "float32"), tf_models.run_graph(blobs.dense, {"x": x}, [key])[0])


def test_tf_int_and_string_tensors(client: redis.Redis, blobs: Blobs) -> None:
    _store_tf(client, "is", blobs.int_string, ["n", "s"], ["twice", "echo"])
    _set(client, "n", np.array([1, -2, 30], np.int32))  # (VALUES refuses negative integers, as RedisAI)
    client.execute_command("AI.TENSORSET", "s", "STRING", 2, "VALUES", "ab", "ĉ")
    client.execute_command("AI.MODELEXECUTE", "is", "INPUTS", 2, "n", "s", "OUTPUTS", 2, "t", "e")
    assert client.execute_command("AI.TENSORGET", "t", "VALUES") == [2, -4, 60]
    assert client.execute_command("AI.TENSORGET", "e", "VALUES") == [b"ab", "ĉ".encode()]


def test_tf_store_errors(client: redis.Redis, blobs: Blobs) -> None:
    def store(*args: object) -> str:
        return _error(lambda: client.execute_command("AI.MODELSTORE", "bad", "TF", *args))

    assert store("CPU", "BLOB", blobs.mul) == "INPUTS not specified for TF"
    assert store("CPU", "INPUTS", 2, "a", "b", "BLOB", blobs.mul) == "OUTPUTS not specified for TF"
    assert store("CPU", "INPUTS", 2, "a", "zz", "OUTPUTS", 1, "mul", "BLOB", blobs.mul) == \
        'Input node named "zz" not found in TF graph.'
    assert store("CPU", "INPUTS", 2, "a", "mul", "OUTPUTS", 1, "mul", "BLOB", blobs.mul) == \
        'Input node named "mul" not found in TF graph.'  # not a Placeholder
    assert store("CPU", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "out", "BLOB", blobs.mul) == \
        'Output node named "out" not found in TF graph'
    assert store("GPU:0", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "mul", "BLOB", blobs.mul) == \
        "GPU requested but TF couldn't find CUDA"  # tensorflow-cpu never sees a GPU
    for broken in (b"not a graph \xff\xff", blobs.mul[: len(blobs.mul) // 2], blobs.add_mul):
        assert store("CPU", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "mul", "BLOB", broken) == "Invalid GraphDef"
    assert client.exists("bad") == 0
    assert client.ping()


def test_tf_run_errors_leave_outputs_unwritten(client: redis.Redis, blobs: Blobs) -> None:
    _store_tf(client, "m", blobs.mul, ["a", "b"], ["mul"])
    client.execute_command("AI.TENSORSET", "a", *AB)
    client.execute_command("AI.TENSORSET", "b3", "FLOAT", 2, 2, 3, "BLOB", bytes(48))
    client.execute_command("AI.TENSORSET", "i", "INT32", 2, "VALUES", 2, 3)

    def run(*inputs: str) -> str:
        return _error(lambda: client.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, *inputs, "OUTPUTS", 1, "c"))

    assert run("a", "b3") == "Incompatible shapes: [2] vs. [2,2,3] \t [[{{node mul}}]]"  # RedisAI's text
    assert run("i", "a") == "Expects arg[0] to be float but int32 is provided"
    assert client.exists("c") == 0
    assert client.execute_command("AI.INFO", "m")[15:] == [2, b"errors", 2]


def test_tf_deprecated_modelset_modelrun(client: redis.Redis, blobs: Blobs) -> None:
    assert client.execute_command("AI.MODELSET", "m", "TF", "CPU", "INPUTS", "a", "b", "OUTPUTS", "mul",
                                  "BLOB", blobs.mul) == b"OK"
    assert client.execute_command("AI.MODELGET", "m", "META")[10:14] == [b"inputs", [b"a", b"b"], b"outputs",
                                                                         [b"mul"]]
    client.execute_command("AI.TENSORSET", "a", *AB)
    client.execute_command("AI.TENSORSET", "b", *AB)
    assert client.execute_command("AI.MODELRUN", "m", "INPUTS", "a", "b", "OUTPUTS", "c") == b"OK"
    assert client.execute_command("AI.TENSORGET", "c", "VALUES") == [b"4", b"9"]


def test_tf_and_tflite_in_one_dag(client: redis.Redis, blobs: Blobs) -> None:
    """A TF model's output feeds a TFLITE model inside one DAG; only the persisted key is written."""
    _store_tf(client, "dense", blobs.dense, ["x"], ["probs"])
    client.execute_command("AI.MODELSTORE", "lite", "TFLITE", "CPU", "BLOB", blobs.add_mul)
    x = np.random.default_rng(3).standard_normal((2, 4)).astype(np.float32)
    reply = client.execute_command(
        "AI.DAGEXECUTE", "PERSIST", 1, "sum", "|>",
        "AI.TENSORSET", "x", "FLOAT", 2, 4, "BLOB", x.tobytes(), "|>",
        "AI.MODELEXECUTE", "dense", "INPUTS", 1, "x", "OUTPUTS", 1, "p", "|>",
        "AI.MODELEXECUTE", "lite", "INPUTS", 2, "p", "p", "OUTPUTS", 2, "sum", "prod")
    assert reply == [b"OK", b"OK", b"OK"]
    (probs,) = tf_models.run_graph(blobs.dense, {"x": x}, ["probs"])
    expected_sum, _ = blobs.add_mul_reference(probs, probs)
    assert np.allclose(_get(client, "sum", "float32"), expected_sum, rtol=1e-6)
    assert client.exists("p") == 0 and client.exists("prod") == 0


def test_tf_auto_batching_merges_requests(server: RunningServer, blobs: Blobs) -> None:
    """MINBATCHSIZE 4 and two 2-row requests: neither can run alone, so they always run as one batch."""
    setup = server.client()
    _store_tf(setup, "m", blobs.mul, ["a", "b"], ["mul"], "BATCHSIZE", 4, "MINBATCHSIZE", 4)
    before = server.server.ctx.ai.queues.queue("CPU").batched_requests
    results: dict[int, object] = {}

    def one(index: int) -> None:
        conn = server.client()
        values = np.array([[index, 2], [3, index]], np.float32)
        _set(conn, f"a{index}", values)
        try:
            conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, f"a{index}", f"a{index}", "OUTPUTS", 1,
                                 f"c{index}")
            results[index] = _get(conn, f"c{index}", "float32").tolist()
        except redis.ResponseError as exc:
            results[index] = exc

    assert run_in_threads(lambda i: one(1 + 4 * i), 2)  # clients 1 and 5
    assert results == {1: [[1, 4], [9, 1]], 5: [[25, 4], [9, 25]]}
    assert server.server.ctx.ai.queues.queue("CPU").batched_requests - before == 2


# --- TFLITE --------------------------------------------------------------------------------------------------------


def test_tflite_store_execute_matches_tensorflow(client: redis.Redis, blobs: Blobs) -> None:
    assert client.execute_command("AI.MODELSTORE", "lite", "TFLITE", "CPU", "BLOB", blobs.add_mul) == b"OK"
    inputs, outputs = tf_models.tflite_names(blobs.add_mul)
    meta = client.execute_command("AI.MODELGET", "lite", "META")
    assert meta[:4] == [b"backend", b"TFLITE", b"device", b"CPU"]
    assert meta[11] == [n.encode() for n in inputs] and meta[13] == [n.encode() for n in outputs]
    assert client.execute_command("AI.MODELGET", "lite", "BLOB") == blobs.add_mul
    rng = np.random.default_rng(11)
    for rows in (2, 5, 1):  # another batch size resizes the interpreter's inputs, as RedisAI does
        x, y = (rng.standard_normal((rows, 3)).astype(np.float32) for _ in range(2))
        _set(client, "x", x)
        _set(client, "y", y)
        client.execute_command("AI.MODELEXECUTE", "lite", "INPUTS", 2, "x", "y", "OUTPUTS", 2, "s", "p")
        expected = blobs.add_mul_reference(x, y)
        assert np.allclose(_get(client, "s", "float32"), expected[0], rtol=1e-6)
        assert np.allclose(_get(client, "p", "float32"), expected[1], rtol=1e-6)
    assert client.execute_command("AI.MODELDEL", "lite") == b"OK"


def test_tflite_quantized_int8(client: redis.Redis, blobs: Blobs) -> None:
    client.execute_command("AI.MODELSTORE", "q", "TFLITE", "CPU", "BLOB", blobs.quantized)
    x = np.array([[-128, -3, 40, 127]], np.int8)
    _set(client, "x", x)
    client.execute_command("AI.MODELEXECUTE", "q", "INPUTS", 1, "x", "OUTPUTS", 1, "y")
    assert client.execute_command("AI.TENSORGET", "y", "META") == [b"dtype", b"INT8", b"shape", [1, 2]]
    assert np.array_equal(_get(client, "y", "int8"), tf_models.run_tflite(blobs.quantized, [x])[0])
    client.execute_command("AI.TENSORSET", "f", "FLOAT", 1, 4, "VALUES", 1, 2, 3, 4)
    assert _error(lambda: client.execute_command("AI.MODELEXECUTE", "q", "INPUTS", 1, "f", "OUTPUTS", 1, "y")) == \
        "Input tensor type doesn't match the type expected by the model definition"


def test_tflite_errors(client: redis.Redis, blobs: Blobs) -> None:
    def store(*args: object) -> str:
        return _error(lambda: client.execute_command("AI.MODELSTORE", "bad", "TFLITE", "CPU", *args))

    assert store("INPUTS", 1, "x", "OUTPUTS", 1, "y", "BLOB", blobs.add_mul) == \
        "INPUTS argument should not be specified for this backend"
    for broken in (b"", b"garbage", blobs.add_mul[:100], blobs.mul):
        assert store("BLOB", broken) == "Failed to load model from buffer"
    assert _error(lambda: client.execute_command("AI.MODELSET", "bad", "TFLITE", "CPU", "BATCHSIZE", 2, "BLOB",
                                                 blobs.add_mul)) == "Auto-batching not supported by the TFLITE backend"
    assert client.exists("bad") == 0
    client.execute_command("AI.MODELSTORE", "lite", "TFLITE", "CPU", "BLOB", blobs.add_mul)
    client.execute_command("AI.TENSORSET", "x", "FLOAT", 2, 3, "BLOB", bytes(24))
    client.execute_command("AI.TENSORSET", "wide", "FLOAT", 2, 4, "BLOB", bytes(32))
    with pytest.raises(redis.ResponseError):  # [2,3] + [2,4] cannot broadcast: TFLite's error, as a reply
        client.execute_command("AI.MODELEXECUTE", "lite", "INPUTS", 2, "x", "wide", "OUTPUTS", 2, "s", "p")
    assert _error(lambda: client.execute_command("AI.MODELEXECUTE", "lite", "INPUTS", 1, "x", "OUTPUTS", 2, "s",
                                                 "p")) == "Number of keys given as INPUTS here does not match model definition"
    assert client.execute_command("AI.MODELEXECUTE", "lite", "INPUTS", 2, "x", "x", "OUTPUTS", 2, "s", "p") == b"OK"
    assert client.execute_command("AI.TENSORGET", "s", "META") == [b"dtype", b"FLOAT", b"shape", [2, 3]]


# --- hostile blobs, LOADBACKEND and INFO ---------------------------------------------------------------------------


def _damaged(blob: bytes, seed: int, count: int) -> list[bytes]:
    """Truncations and a few flipped bytes of a good model, deterministic by ``seed``."""
    rng = np.random.default_rng(seed)
    damaged = [blob[: int(cut)] for cut in rng.integers(1, len(blob), count)]
    for _ in range(count):
        copy = bytearray(blob)
        for at in rng.integers(0, len(blob), 3):
            copy[int(at)] = int(rng.integers(0, 256))
        damaged.append(bytes(copy))
    return damaged


def test_damaged_models_are_errors_or_models_never_a_crash(server: RunningServer, blobs: Blobs) -> None:
    conn = server.client()
    conn.execute_command("AI.TENSORSET", "x", "FLOAT", 2, 4, "BLOB", bytes(32))
    conn.execute_command("AI.TENSORSET", "y", "FLOAT", 2, 3, "BLOB", bytes(24))
    cases: list[tuple[str, bytes, tuple[object, ...], tuple[str, ...]]] = [
        ("TF", blob, ("INPUTS", 1, "x", "OUTPUTS", 1, "probs"), ("x",)) for blob in _damaged(blobs.dense, 1, 15)]
    cases += [("TFLITE", blob, (), ("y", "y")) for blob in _damaged(blobs.add_mul, 2, 15)]
    for backend, blob, io, inputs in cases:
        try:
            conn.execute_command("AI.MODELSTORE", "d", backend, "CPU", *io, "BLOB", blob)
            outputs = len(conn.execute_command("AI.MODELGET", "d", "META")[13])
            conn.execute_command("AI.MODELEXECUTE", "d", "INPUTS", len(inputs), *inputs, "OUTPUTS", outputs,
                                 *(f"o{i}" for i in range(outputs)))
        except redis.ResponseError:
            pass
        assert conn.ping()
    _store_tf(conn, "m", blobs.mul, ["a", "b"], ["mul"])
    conn.execute_command("AI.TENSORSET", "a", *AB)
    assert conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c") == b"OK"


def test_loadbackend_tf_tflite_and_info_ai() -> None:
    with running_server(Config(port=0)) as server:
        conn = server.client()
        assert conn.info("ai")["ai_backends_available"] == ["TF", "TFLITE", "TORCH", "ONNX"]  # redis-py splits at ","
        for name in ("TF", "tflite"):
            assert conn.execute_command("AI.CONFIG", "LOADBACKEND", name, "ignored.so") == b"OK"
            with pytest.raises(redis.ResponseError, match=r"^error loading backend$"):  # RedisAI refuses a second load
                conn.execute_command("AI.CONFIG", "LOADBACKEND", name, "x.so")
        info = conn.info("ai")
        assert info["ai_backends_loaded"] == ["TF", "TFLITE"]
        assert info["ai_TensorFlow_version"] == tf_models.tf_version()
        assert info["ai_TensorFlowLite_version"] == server.server.ctx.ai.backends.loaded()["TFLITE"]


def test_thread_settings_and_placement_reach_the_tf_session(blobs: Blobs) -> None:
    """INTRA_OP_PARALLELISM and INTER_OP_PARALLELISM go into the session's ConfigProto; ops sit on the device."""
    model = TfBackend().load_model(blobs.mul, Device("cpu", "CPU", None), RuntimeOptions(2, 3),
                                   GraphNames(("a", "b"), ("mul",)))
    config = model._session._config
    assert (config.intra_op_parallelism_threads, config.inter_op_parallelism_threads) == (2, 3)
    assert {op.device for op in model._session.graph.get_operations()} == {"/device:CPU:0"}
    a = np.array([1, 2], np.float32)
    assert model.run([a, a])[0].tolist() == [1, 4]


def test_tflite_model_shared_by_worker_threads(blobs: Blobs) -> None:
    """Four worker threads on one queue, one TFLite interpreter: runs with different batch sizes at once each
    get their own answer (the model's lock keeps resize, set, invoke and read together)."""
    with running_server(Config(port=0, threads_per_queue=4)) as server:
        server.client().execute_command("AI.MODELSTORE", "lite", "TFLITE", "CPU", "BLOB", blobs.add_mul)
        failures: list[str] = []

        def client(index: int) -> None:
            conn = server.client()
            for step in range(5):
                x = np.full((1 + (index + step) % 4, 3), index + step, np.float32)
                _set(conn, f"x{index}", x)
                conn.execute_command("AI.MODELEXECUTE", "lite", "INPUTS", 2, f"x{index}", f"x{index}", "OUTPUTS", 2,
                                     f"s{index}", f"p{index}")
                if not np.array_equal(_get(conn, f"p{index}", "float32"), x * x):
                    failures.append(f"client {index} step {step}")

        assert run_in_threads(client, 8) and failures == []
