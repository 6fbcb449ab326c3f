"""Model commands end to end: real TorchScript and ONNX models built by the tests, both stores."""

from __future__ import annotations

import threading

import onnxruntime
import pytest
import redis
import torch

from server.config import Config
from tests import models
from tests.support import RunningServer, assert_overlapped, running_server

RUNS_ON_CLUSTER = True  # also run against a 3-primary Redis Cluster (tests/conftest.py)

A_B = ("FLOAT", 2, 2, "VALUES", 2, 3, 2, 3)


# A GPU this machine lacks, refused with the same RedisAI text on every machine: GPU:0 without CUDA, GPU:<count>
# (one past the last device) with it.
ABSENT_GPU = f"GPU:{torch.cuda.device_count() if torch.cuda.is_available() else 0}"
ONNX_HAS_CUDA = "CUDAExecutionProvider" in onnxruntime.get_available_providers()


def _set_ab(conn: redis.Redis) -> None:
    conn.execute_command("AI.TENSORSET", "a", *A_B)
    conn.execute_command("AI.TENSORSET", "b", *A_B)


def _values(conn: redis.Redis, key: str) -> list[bytes]:
    return list(conn.execute_command("AI.TENSORGET", key, "VALUES"))


def test_store_get_execute_torch(client: redis.Redis) -> None:
    blob = models.torch_add()
    assert client.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "TAG", "v1", "BLOB", blob) == b"OK"
    meta = client.execute_command("AI.MODELGET", "m", "META")
    assert meta == [b"backend", b"TORCH", b"device", b"CPU", b"tag", b"v1", b"batchsize", 0, b"minbatchsize", 0,
                    b"inputs", [b"a", b"b"], b"outputs", [b""], b"minbatchtimeout", 0]
    assert client.execute_command("AI.MODELGET", "m", "BLOB") == blob
    full = client.execute_command("AI.MODELGET", "m")
    assert full[:16] == meta and full[16:] == [b"blob", blob]
    _set_ab(client)
    assert client.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "c") == b"OK"
    assert _values(client, "c") == [b"4", b"6", b"4", b"6"]
    assert client.execute_command("AI.TENSORGET", "c", "META") == [b"dtype", b"FLOAT", b"shape", [2, 2]]


def test_outputs_may_replace_an_empty_string_and_nothing_else(client: redis.Redis) -> None:
    """As RedisAI: a run's output may overwrite a key holding an empty string (AI.TENSORSET may not); a key
    holding anything else answers WRONGTYPE and keeps its value, and the model does not run (AI.INFO: one call)."""
    client.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", models.torch_add())
    _set_ab(client)
    client.set("empty", "")
    assert client.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "empty") == b"OK"
    assert _values(client, "empty") == [b"4", b"6", b"4", b"6"]
    client.set("text", "value")
    client.hset("hash", "f", "v")
    client.rpush("list", "x")
    for key in ("text", "hash", "list"):
        with pytest.raises(redis.ResponseError, match=r"^WRONGTYPE Operation against a key holding the wrong kind"):
            client.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "b", "OUTPUTS", 1, key)
    assert client.get("text") == b"value" and client.hgetall("hash") == {b"f": b"v"}
    assert client.lrange("list", 0, -1) == [b"x"]
    info = dict(zip(*[iter(client.execute_command("AI.INFO", "m"))] * 2, strict=True))
    assert info[b"calls"] == 1


def test_two_outputs_and_onnx(client: redis.Redis) -> None:
    client.execute_command("AI.MODELSTORE", "pair", "TORCH", "CPU", "BLOB", models.torch_sum_and_diff())
    assert client.execute_command("AI.MODELGET", "pair", "META")[13] == [b"", b""]
    _set_ab(client)
    client.execute_command("AI.MODELEXECUTE", "pair", "INPUTS", 2, "a", "b", "OUTPUTS", 2, "s", "d")
    assert _values(client, "s") == [b"4", b"6", b"4", b"6"]
    assert _values(client, "d") == [b"0", b"0", b"0", b"0"]
    client.execute_command("AI.MODELSTORE", "onnx", "ONNX", "CPU", "BLOB", models.onnx_add())
    assert client.execute_command("AI.MODELGET", "onnx", "META")[11] == [b"a", b"b"]
    assert client.execute_command("AI.MODELEXECUTE", "onnx", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "c",
                                  "TIMEOUT", 60000000) == b"OK"
    assert _values(client, "c") == [b"4", b"6", b"4", b"6"]


def test_onnx_string_outputs_are_the_strings_themselves(client: redis.Redis) -> None:
    client.execute_command("AI.MODELSTORE", "strings", "ONNX", "CPU", "BLOB", models.onnx_string_identity())
    client.execute_command("AI.TENSORSET", "x", "STRING", 3, "VALUES", "input11", "", "\u00e9t\u00e9")
    assert client.execute_command("AI.MODELEXECUTE", "strings", "INPUTS", 1, "x", "OUTPUTS", 1, "y") == b"OK"
    assert client.execute_command("AI.TENSORGET", "y", "VALUES") == [b"input11", b"", "\u00e9t\u00e9".encode()]
    assert client.execute_command("AI.TENSORGET", "y", "BLOB") == "input11\0\0\u00e9t\u00e9\0".encode()
    dag = client.execute_command("AI.DAGEXECUTE", "LOAD", 1, "x", "|>", "AI.MODELEXECUTE", "strings", "INPUTS", 1,
                                 "x", "OUTPUTS", 1, "z", "|>", "AI.TENSORGET", "z", "VALUES")
    assert dag == [b"OK", [b"input11", b"", "\u00e9t\u00e9".encode()]]
    client.execute_command("AI.TENSORSET", "bad", "STRING", 1, "BLOB", b"\xff\xfe\0")
    with pytest.raises(redis.ResponseError, match=r"^ONNX string tensors must hold UTF-8 text$"):
        client.execute_command("AI.MODELEXECUTE", "strings", "INPUTS", 1, "bad", "OUTPUTS", 1, "y")


def test_replacing_a_model_uses_the_new_one(server: RunningServer) -> None:
    conn = server.client()
    _set_ab(conn)
    conn.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", models.torch_add())
    conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "c")
    conn.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", models.torch_mul())
    conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "c")
    assert _values(conn, "c") == [b"4", b"9", b"4", b"9"]


def test_model_changed_behind_our_back_is_reloaded(server: RunningServer) -> None:
    """Another writer replaces the hash's blob and digest directly: the next run must use the new model."""
    from backends.objects import blob_digest

    conn = server.client()
    _set_ab(conn)
    conn.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", models.torch_add())
    conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "c")
    new_blob = models.torch_mul()
    conn.hset("m", mapping={"blob": new_blob, "digest": blob_digest(new_blob)})  # a plain HSET, relayed
    conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "c")
    assert _values(conn, "c") == [b"4", b"9", b"4", b"9"]


def test_delete_and_scan(client: redis.Redis) -> None:
    client.execute_command("AI.MODELSTORE", "m1", "TORCH", "CPU", "TAG", "t1", "BLOB", models.torch_add())
    client.execute_command("AI.MODELSTORE", "m2", "ONNX", "CPU", "BLOB", models.onnx_add())
    assert sorted(client.execute_command("AI._MODELSCAN")) == [[b"m1", b"t1"], [b"m2", b""]]
    assert client.execute_command("AI.MODELDEL", "m1") == b"OK"
    assert client.exists("m1") == 0
    with pytest.raises(redis.ResponseError, match=r"^model key is empty$"):
        client.execute_command("AI.MODELGET", "m1")
    with pytest.raises(redis.ResponseError, match=r"^model key is empty$"):
        client.execute_command("AI.MODELDEL", "m1")
    assert client.execute_command("AI._MODELSCAN") == [[b"m2", b""]]


def test_model_chunks() -> None:
    blob = models.torch_add()
    with running_server(Config(port=0, model_chunk_size=len(blob) // 3)) as running:
        conn = running.client()
        conn.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", *(blob[i:i + 500]
                                                                           for i in range(0, len(blob), 500)))
        chunks = conn.execute_command("AI.MODELGET", "m", "BLOB")
        size = len(blob) // 3
        assert len(chunks) == len(blob) // size + 1 and b"".join(chunks) == blob
        assert all(len(chunk) == size for chunk in chunks[:-1])
    with running_server(Config(port=0, model_chunk_size=len(blob))) as running:
        conn = running.client()
        conn.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", blob)
        assert conn.execute_command("AI.MODELGET", "m", "BLOB") == [blob, b""]  # RedisAI's empty last chunk


def test_wrong_types_never_crash(server: RunningServer) -> None:
    conn = server.client()
    conn.set("plain", "value")
    conn.hset("userhash", "f", "v")
    for key in ("plain", "userhash"):
        with pytest.raises(redis.ResponseError, match=r"^WRONGTYPE"):
            conn.execute_command("AI.MODELSTORE", key, "TORCH", "CPU", "BLOB", models.torch_add())
        with pytest.raises(redis.ResponseError, match=r"^WRONGTYPE"):
            conn.execute_command("AI.MODELGET", key)
        with pytest.raises(redis.ResponseError, match=r"^WRONGTYPE"):
            conn.execute_command("AI.MODELEXECUTE", key, "INPUTS", 1, "a", "OUTPUTS", 1, "b")
    assert conn.get("plain") == b"value" and conn.hgetall("userhash") == {b"f": b"v"}
    conn.execute_command("AI.TENSORSET", "t", "FLOAT", 1, "VALUES", 1)
    with pytest.raises(redis.ResponseError, match=r"^WRONGTYPE"):
        conn.execute_command("AI.MODELSTORE", "t", "TORCH", "CPU", "BLOB", models.torch_add())
    conn.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", models.torch_double())
    for target in ("plain", "userhash", "m"):  # outputs may only replace tensors
        with pytest.raises(redis.ResponseError, match=r"^WRONGTYPE"):
            conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 1, "t", "OUTPUTS", 1, target)
    assert conn.get("plain") == b"value" and conn.hgetall("userhash") == {b"f": b"v"}
    conn.execute_command("AI.TENSORSET", "outputs", "FLOAT", 1, "VALUES", 1)
    with pytest.raises(redis.ResponseError, match=r"^WRONGTYPE"):  # an input named like the keyword
        conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 1, "outputs", "OUTPUTS", 1, "userhash")
    assert conn.hgetall("userhash") == {b"f": b"v"}
    assert conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 1, "t", "OUTPUTS", 1, "t") == b"OK"
    assert conn.execute_command("AI.TENSORGET", "t", "VALUES") == [b"2"]


def test_bad_models_and_bad_inputs_are_clear_errors(server: RunningServer) -> None:
    conn = server.client()
    for backend, blob in (("TORCH", b"garbage"), ("TORCH", models.onnx_add()), ("ONNX", b"\x00\x01junk"),
                          ("TORCH", models.torch_add()[:-100])):
        with pytest.raises(redis.ResponseError):
            conn.execute_command("AI.MODELSTORE", "bad", backend, "CPU", "BLOB", blob)
    assert conn.exists("bad") == 0
    with pytest.raises(redis.ResponseError, match=r"^Invalid GraphDef$"):  # more in test_tf_backends.py
        conn.execute_command("AI.MODELSTORE", "tf", "TF", "CPU", "INPUTS", 1, "a", "OUTPUTS", 1, "b", "BLOB", b"\xff")
    with pytest.raises(redis.ResponseError, match=r"GPU requested but Torch couldn't find CUDA"):
        conn.execute_command("AI.MODELSTORE", "g", "TORCH", ABSENT_GPU, "BLOB", models.torch_add())
    conn.execute_command("AI.MODELSTORE", "mm", "TORCH", "CPU", "BLOB", models.torch_matmul())
    conn.execute_command("AI.TENSORSET", "x", "FLOAT", 2, 3, "VALUES", 1, 2, 3, 4, 5, 6)
    with pytest.raises(redis.ResponseError):  # (2,3) @ (2,3): torch raises at run time
        conn.execute_command("AI.MODELEXECUTE", "mm", "INPUTS", 2, "x", "x", "OUTPUTS", 1, "y")
    assert conn.exists("y") == 0
    conn.execute_command("AI.MODELSTORE", "onnx", "ONNX", "CPU", "BLOB", models.onnx_add())
    conn.execute_command("AI.TENSORSET", "i", "INT32", 2, 2, "VALUES", 1, 2, 3, 4)
    with pytest.raises(redis.ResponseError):  # wrong dtype for the graph
        conn.execute_command("AI.MODELEXECUTE", "onnx", "INPUTS", 2, "i", "i", "OUTPUTS", 1, "y")
    with pytest.raises(redis.ResponseError, match=r"^tensor key is empty or in a different shard$"):
        conn.execute_command("AI.MODELEXECUTE", "onnx", "INPUTS", 2, "i", "missing", "OUTPUTS", 1, "y")
    with pytest.raises(redis.ResponseError, match=r"^Number of keys given as INPUTS here does not match"):
        conn.execute_command("AI.MODELEXECUTE", "onnx", "INPUTS", 1, "i", "OUTPUTS", 1, "y")
    conn.execute_command("AI.MODELSTORE", "mm", "TORCH", "CPU", "BLOB", models.torch_matmul())
    conn.execute_command("AI.TENSORSET", "sq", "FLOAT", 2, 2, "VALUES", 1, 0, 0, 1)
    assert conn.execute_command("AI.MODELEXECUTE", "mm", "INPUTS", 2, "sq", "sq", "OUTPUTS", 1, "y") == b"OK"


def test_error_replies_on_the_wire(server: RunningServer) -> None:
    raw = server.raw()
    expected = b"-ERR model key is empty\r\n"
    assert raw.call(b"AI.MODELEXECUTE nope INPUTS 1 a OUTPUTS 1 b\r\n", expected) == expected
    conn = server.client()
    conn.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", models.torch_add())
    expected = b"-Number of keys given as INPUTS here does not match model definition\r\n"
    assert raw.call(b"AI.MODELEXECUTE m INPUTS 1 a OUTPUTS 1 b\r\n", expected) == expected
    expected = b"-ERR wrong number of arguments for 'AI.MODELEXECUTE' command\r\n"
    assert raw.call(b"ai.modelexecute m INPUTS 1 a\r\n", expected) == expected
    expected = b"+OK\r\n+QUEUED\r\n+QUEUED\r\n"
    assert raw.call(b"MULTI\r\nSET k v\r\nAI.MODELEXECUTE m INPUTS 2 a b OUTPUTS 1 c\r\n", expected) == expected
    expected = b"*2\r\n+OK\r\n-ERR Cannot run RedisAI command within a transaction or a LUA script\r\n"
    assert raw.call(b"EXEC\r\n", expected) == expected  # RedisAI's reply, from its own tests


def test_deprecated_modelset_and_modelrun(client: redis.Redis) -> None:
    assert client.execute_command("AI.MODELSET", "m", "TORCH", "CPU", "BLOB", models.torch_add()) == b"OK"
    _set_ab(client)
    assert client.execute_command("AI.MODELRUN", "m", "INPUTS", "a", "b", "OUTPUTS", "c") == b"OK"
    assert _values(client, "c") == [b"4", b"6", b"4", b"6"]
    assert client.execute_command("AI.MODELRUN", "m", "TIMEOUT", 5000, "INPUTS", "a", "b", "OUTPUTS", "d") == b"OK"
    with pytest.raises(redis.ResponseError, match=r"^Number of keys given as INPUTS"):
        client.execute_command("AI.MODELRUN", "m", "INPUTS", "a", "OUTPUTS", "c")


@pytest.mark.parametrize("store", ["embedded"])
def test_two_devices_run_in_parallel(store: str) -> None:
    """Two clients' runs on CPU:0 and CPU:1 execute at the same time (their workers' intervals overlap)."""
    with running_server(Config(port=0, intra_op_parallelism=1)) as server:
        _check_parallel(server)


def _check_parallel(server: RunningServer) -> None:
    setup = server.client()
    blob = models.torch_slow()
    for device in ("CPU:0", "CPU:1"):
        setup.execute_command("AI.MODELSTORE", f"slow{device[-1]}", "TORCH", device, "BLOB", blob)
    setup.execute_command("AI.TENSORSET", "x", "FLOAT", 256, 256, "BLOB", bytes(256 * 256 * 4))

    def run(key: str) -> None:
        server.client().execute_command("AI.MODELEXECUTE", key, "INPUTS", 1, "x", "OUTPUTS", 1, f"y{key}")

    run("slow0")  # warm-up: load and first run
    run("slow1")
    threads = [threading.Thread(target=run, args=(key,)) for key in ("slow0", "slow1")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert_overlapped(server, "CPU:0", "CPU:1")


@pytest.mark.parametrize("inline_op_us", [200, 0])
def test_small_models_run_inline_with_the_same_results(inline_op_us: int) -> None:
    """A cheap model's runs after its first stay on the loop thread (dag/inline.py); replies, outputs and
    AI.INFO are the same either way."""
    with running_server(Config(port=0, inline_op_us=inline_op_us)) as server:
        conn = server.client()
        conn.execute_command("AI.MODELSTORE", "add", "TORCH", "CPU", "BLOB", models.torch_add())
        conn.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "VALUES", 1, 2)
        for _ in range(20):
            assert conn.execute_command("AI.MODELEXECUTE", "add", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c") == b"OK"
            assert [float(v) for v in conn.execute_command("AI.TENSORGET", "c", "VALUES")] == [2.0, 4.0]
        info = dict(zip(*[iter(conn.execute_command("AI.INFO", "add"))] * 2, strict=True))
        assert info[b"calls"] == 20 and info[b"errors"] == 0
        inline_runs = conn.info("ai")["ai_inline_runs"]
        assert (inline_runs > 0) if inline_op_us else (inline_runs == 0)


def _wire_error(server: RunningServer, *words: bytes) -> bytes:
    """The exact error line a command gets on the wire (redis-py drops a leading ``ERR ``)."""
    raw = server.raw()
    raw.send(b"*%d\r\n" % len(words) + b"".join(b"$%d\r\n%s\r\n" % (len(w), w) for w in words))
    return raw.read_until(b"\r\n").split(b"\r\n")[0]


def test_backend_errors_are_redisais_texts_byte_for_byte(server: RunningServer) -> None:
    onnx = _wire_error(server, b"AI.MODELSTORE", b"bad", b"ONNX", b"CPU", b"BLOB", b"\x00\x01junk")
    assert onnx == b"-Failed to load model because protobuf parsing failed."  # ORT's message, no binding prefix
    torch = _wire_error(server, b"AI.MODELSTORE", b"bad", b"TORCH", b"CPU", b"BLOB", b"garbage")
    assert torch.startswith(b"-") and not torch.startswith((b"-ERR ", b"-[")), torch  # torch's own text
    gpu = _wire_error(server, b"AI.MODELSTORE", b"g", b"TORCH", ABSENT_GPU.encode(), b"BLOB", models.torch_add())
    assert gpu == b"-GPU requested but Torch couldn't find CUDA"
    if not ONNX_HAS_CUDA:  # the CPU onnxruntime: RedisAI's text for any GPU
        onnx_gpu = _wire_error(server, b"AI.MODELSTORE", b"g", b"ONNX", b"GPU", b"BLOB", models.onnx_add())
        assert onnx_gpu == b"-ERR GPU requested but ONNX couldn't find CUDA"
    else:  # onnxruntime-gpu: a device past the last is onnxruntime's own error (docs/gpu.md, "Devices")
        onnx_gpu = _wire_error(server, b"AI.MODELSTORE", b"g", b"ONNX", ABSENT_GPU.encode(), b"BLOB", models.onnx_add())
        assert onnx_gpu.startswith(b"-"), onnx_gpu
