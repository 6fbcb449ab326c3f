"""RedisAI 1.2.7's exact replies for AI.CONFIG and AI.INFO, byte for byte on the wire.

The error texts, the replies of RedisAI's own tests, and its quirk of answering the statistics when
AI.INFO's third argument is anything but RESETSTAT.
"""

from __future__ import annotations

from typing import Any

import redis

from server.config import Config
from tests import models
from tests.integration.test_tensor import pack
from tests.support import RawClient, RunningServer, running_server

W = "ERR wrong number of arguments for 'AI.CONFIG' command"
NO_RUN_INFO = "ERR cannot find run info for key"
UNSUPPORTED = "ERR unsupported subcommand"
DEFAULT_CHUNK_SIZE = 535822336

CONFIG_ERRORS: list[tuple[tuple[Any, ...], str]] = [
    (("AI.CONFIG",), W),
    (("ai.config",), "ERR wrong number of arguments for 'ai.config' command"),
    (("AI.CONFIG", "LOADBACKEND"), W),
    (("AI.CONFIG", "LOADBACKEND", "TORCH"), W),
    (("AI.CONFIG", "LOADBACKEND", "NOT_EXIST_BACKEND", "notexist/redisai_tensorflow.so"), "ERR unsupported backend"),
    (("AI.CONFIG", "BACKENDSPATH"), "ERR BACKENDSPATH: missing path argument"),
    (("AI.CONFIG", "MODEL_CHUNK_SIZE"), "ERR MODEL_CHUNK_SIZE: missing chunk size"),
    (("AI.CONFIG", "MODEL_CHUNK_SIZE", 0), "ERR MODEL_CHUNK_SIZE: invalid chunk size"),
    (("AI.CONFIG", "MODEL_CHUNK_SIZE", -1), "ERR MODEL_CHUNK_SIZE: invalid chunk size"),
    (("AI.CONFIG", "MODEL_CHUNK_SIZE", "1.0"), "ERR MODEL_CHUNK_SIZE: invalid chunk size"),
    (("AI.CONFIG", "MODEL_CHUNK_SIZE", "01"), "ERR MODEL_CHUNK_SIZE: invalid chunk size"),
    (("AI.CONFIG", "MODEL_CHUNK_SIZE", "big"), "ERR MODEL_CHUNK_SIZE: invalid chunk size"),
    (("AI.CONFIG", "GET"), W),
    (("AI.CONFIG", "bad_subcommand"), UNSUPPORTED),
    # load-time only in RedisAI 1.2.7: not settable at run time
    (("AI.CONFIG", "THREADS_PER_QUEUE", 2), UNSUPPORTED),
    (("AI.CONFIG", "INTER_OP_PARALLELISM", 2), UNSUPPORTED),
    (("AI.CONFIG", "INTRA_OP_PARALLELISM", 2), UNSUPPORTED),
    (("AI.CONFIG", "MODEL_EXECUTION_TIMEOUT", 1000), UNSUPPORTED),
    (("AI.CONFIG", "BACKEND_MEMORY_LIMIT", 100), UNSUPPORTED),
]

INFO_ERRORS: list[tuple[tuple[Any, ...], str]] = [
    (("AI.INFO",), "ERR wrong number of arguments for 'AI.INFO' command"),
    (("ai.info", "m", "RESETSTAT", "extra"), "ERR wrong number of arguments for 'ai.info' command"),
    (("AI.INFO", "no_such_key"), NO_RUN_INFO),
    (("AI.INFO", "no_such_key", "RESETSTAT"), NO_RUN_INFO),
    (("AI.INFO", "t"), NO_RUN_INFO),  # a tensor has no run info
]


def _errors(server: RunningServer, cases: list[tuple[tuple[Any, ...], str]]) -> None:
    raw = server.raw()
    raw.send(b"".join(pack(*args) for args, _ in cases))
    expected = b"".join(b"-" + text.encode() + b"\r\n" for _, text in cases)
    assert raw.read_exactly(expected) == expected
    raw.close()


def _call(raw: RawClient, args: tuple[Any, ...], expected: bytes) -> None:
    assert raw.call(pack(*args), expected) == expected, args


def _bulk(value: str | bytes) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return b"$%d\r\n%s\r\n" % (len(data), data)


def info_bytes(key: str, kind: str, device: str, tag: str, duration: int, samples: int, calls: int,
               errors: int) -> bytes:
    labels = [("key", key), ("type", kind), ("backend", "TORCH"), ("device", device), ("tag", tag)]
    counts = [("duration", duration), ("samples", samples), ("calls", calls), ("errors", errors)]
    return (b"*18\r\n" + b"".join(_bulk(k) + _bulk(v) for k, v in labels)
            + b"".join(_bulk(k) + b":%d\r\n" % v for k, v in counts))


def test_config_error_replies(server: RunningServer) -> None:
    _errors(server, CONFIG_ERRORS)


def test_config_set_and_get(server: RunningServer) -> None:
    raw = server.raw()
    _call(raw, ("AI.CONFIG", "GET", "MODEL_CHUNK_SIZE"), b":%d\r\n" % DEFAULT_CHUNK_SIZE)
    _call(raw, ("AI.CONFIG", "GET", "bad_config"), b"$-1\r\n")
    _call(raw, ("AI.CONFIG", "BACKENDSPATH", "/usr/lib/redis/modules/backends/"), b"+OK\r\n")
    _call(raw, ("AI.CONFIG", "GET", "backendspath"), _bulk("/usr/lib/redis/modules/backends/"))
    _call(raw, ("AI.CONFIG", "model_chunk_size", 1024, "ignored-extra"), b"+OK\r\n")
    _call(raw, ("AI.CONFIG", "GET", "MODEL_CHUNK_SIZE", "ignored-extra"), b":1024\r\n")
    raw.close()
    raw3 = _resp3(server)
    _call(raw3, ("AI.CONFIG", "GET", "bad_config"), b"_\r\n")
    _call(raw3, ("AI.CONFIG", "GET", "MODEL_CHUNK_SIZE"), b":1024\r\n")
    raw3.close()


def _resp3(server: RunningServer) -> RawClient:
    """A raw connection after HELLO 3 (its map reply read up to the PING that follows it)."""
    raw = server.raw()
    raw.send(pack("HELLO", 3) + pack("PING"))
    data = b""
    while not data.endswith(b"+PONG\r\n"):
        data += raw.sock.recv(65536)
    return raw


def test_chunk_size_applies_to_modelget(client: redis.Redis) -> None:
    blob = models.torch_add()
    client.execute_command("AI.MODELSTORE", "m1", "TORCH", "CPU", "BLOB", blob)
    chunk = len(blob) // 3
    assert client.execute_command("AI.CONFIG", "MODEL_CHUNK_SIZE", chunk) == b"OK"
    chunks = client.execute_command("AI.MODELGET", "m1", "BLOB")
    assert len(chunks) == 4 and b"".join(chunks) == blob  # RedisAI sends an empty last chunk when the length divides


def test_loadbackend_once_then_error() -> None:
    with running_server(Config(port=0)) as server:
        raw = server.raw()
        _call(raw, ("AI.CONFIG", "LOADBACKEND", "TORCH", "redisai_torch/redisai_torch.so"), b"+OK\r\n")
        _call(raw, ("AI.CONFIG", "LOADBACKEND", "TORCH", "redisai_torch/redisai_torch.so"),
              b"-ERR error loading backend\r\n")
        _call(raw, ("AI.CONFIG", "LOADBACKEND", "onnx", "/x/redisai_onnxruntime.so"), b"+OK\r\n")
        # TF and TFLITE too (the [tf] and [tflite] extras); the path is ignored, as for the others
        _call(raw, ("AI.CONFIG", "LOADBACKEND", "TF", "notexist/redisai_tensorflow.so"), b"+OK\r\n")
        _call(raw, ("AI.CONFIG", "LOADBACKEND", "TF", "notexist/redisai_tensorflow.so"),
              b"-ERR error loading backend\r\n")
        _call(raw, ("AI.CONFIG", "loadbackend", "tflite", "/abs/redisai_tflite.so"), b"+OK\r\n")
        _call(raw, ("AI.CONFIG", "loadbackend", "tflite", "/abs/redisai_tflite.so"), b"-ERR error loading backend\r\n")
        raw.close()
        assert set(server.server.ctx.ai.backends.loaded()) == {"TORCH", "ONNX", "TF", "TFLITE"}


def test_load_time_settings_are_reported_by_get() -> None:
    """Ours: RedisAI answers null for these; we answer the values the server was started with."""
    config = Config(port=0, threads_per_queue=2, inter_op_parallelism=3, intra_op_parallelism=4,
                    model_execution_timeout=5000, backend_memory_limit=100, backends_path="/opt/backends")
    with running_server(config) as server:
        raw = server.raw()
        for name, reply in [("THREADS_PER_QUEUE", b":2\r\n"), ("INTER_OP_PARALLELISM", b":3\r\n"),
                            ("INTRA_OP_PARALLELISM", b":4\r\n"), ("MODEL_EXECUTION_TIMEOUT", b":5000\r\n"),
                            ("BACKEND_MEMORY_LIMIT", b":100\r\n"), ("BACKENDSPATH", _bulk("/opt/backends"))]:
            _call(raw, ("AI.CONFIG", "GET", name), reply)
        raw.close()


def test_info_error_replies(server: RunningServer) -> None:
    server.client().execute_command("AI.TENSORSET", "t", "FLOAT", 1, "VALUES", 1)
    _errors(server, INFO_ERRORS)


def _run_info(server: RunningServer, key: str) -> list[Any]:
    return list(server.client().execute_command("AI.INFO", key))


def test_model_info_counts_runs_errors_and_resets(server: RunningServer) -> None:
    conn, raw = server.client(), server.raw()
    conn.execute_command("AI.MODELSTORE", "m", "TORCH", "cpu", "TAG", "v1", "BLOB", models.torch_add())
    _call(raw, ("AI.INFO", "m"), info_bytes("m", "MODEL", "cpu", "v1", 0, 0, 0, 0))
    conn.execute_command("AI.TENSORSET", "a", "FLOAT", 2, 2, "VALUES", 2, 3, 2, 3)
    conn.execute_command("AI.TENSORSET", "bad", "FLOAT", 3, "VALUES", 1, 2, 3)
    conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c")
    info = _run_info(server, "m")
    assert info[:10] == [b"key", b"m", b"type", b"MODEL", b"backend", b"TORCH", b"device", b"cpu", b"tag", b"v1"]
    assert info[10] == b"duration" and info[11] > 0
    assert info[12:] == [b"samples", 2, b"calls", 1, b"errors", 0]
    duration = info[11]
    try:
        conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "bad", "OUTPUTS", 1, "c")
    except Exception as exc:
        assert "size of tensor" in str(exc) or "must match" in str(exc), exc
    else:
        raise AssertionError("shapes [2,2] and [3] must not add")
    assert _run_info(server, "m")[11:] == [duration, b"samples", 2, b"calls", 2, b"errors", 1]
    _call(raw, ("AI.INFO", "m", "whatever"), info_bytes("m", "MODEL", "cpu", "v1", duration, 2, 2, 1))  # ignored, as in RedisAI
    _call(raw, ("AI.INFO", "m", "resetstat"), b"+OK\r\n")
    _call(raw, ("AI.INFO", "m"), info_bytes("m", "MODEL", "cpu", "v1", 0, 0, 0, 0))
    raw.close()


def test_info_follows_the_key(server: RunningServer) -> None:
    """MODELDEL, DEL and RENAME leave no record under the name; a re-store starts from zero. (After a RENAME,
    RedisAI still answers under the old name; here neither name answers.)"""
    conn, raw = server.client(), server.raw()
    conn.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "VALUES", 2, 3)
    for _ in range(2):
        conn.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", models.torch_add())
        conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c")
        assert _run_info(server, "m")[14:] == [b"calls", 1, b"errors", 0]  # the second store reset the first
    conn.execute_command("AI.MODELDEL", "m")
    _call(raw, ("AI.INFO", "m"), b"-ERR cannot find run info for key\r\n")
    conn.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", models.torch_add())
    conn.delete("m")
    _call(raw, ("AI.INFO", "m"), b"-ERR cannot find run info for key\r\n")
    conn.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", models.torch_add())
    conn.rename("m", "renamed")
    _call(raw, ("AI.INFO", "renamed"), b"-ERR cannot find run info for key\r\n")
    conn.set("m", "now a string")
    _call(raw, ("AI.INFO", "m"), b"-ERR cannot find run info for key\r\n")
    raw.close()


SCRIPT = "def bar(tensors: List[Tensor], keys: List[str], args: List[str]):\n    return tensors[0] + tensors[1]\n"


def test_script_info_reports_samples_minus_one(server: RunningServer) -> None:
    conn, raw = server.client(), server.raw()
    conn.execute_command("AI.SCRIPTSTORE", "s", "CPU", "TAG", "t1", "ENTRY_POINTS", 1, "bar", "SOURCE", SCRIPT)
    _call(raw, ("AI.INFO", "s"), info_bytes("s", "SCRIPT", "CPU", "t1", 0, -1, 0, 0))
    conn.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "VALUES", 2, 3)
    conn.execute_command("AI.SCRIPTEXECUTE", "s", "bar", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c")
    assert _run_info(server, "s")[12:] == [b"samples", -1, b"calls", 1, b"errors", 0]
    _call(raw, ("AI.INFO", "s", "RESETSTAT"), b"+OK\r\n")
    _call(raw, ("AI.INFO", "s"), info_bytes("s", "SCRIPT", "CPU", "t1", 0, -1, 0, 0))
    raw.close()
