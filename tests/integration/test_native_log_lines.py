"""With ``--log-format json`` every stderr line is a JSON object, native lines included: TensorFlow's start-up
notes (here made loud with TF_CPP_MIN_LOG_LEVEL=0) and LiteRT's XNNPACK line become ``redisai.native`` records
(server/ops/native_log.py) instead of plain text in the JSON log."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import redis

from tests.support import free_port, wait_for_port


def test_every_stderr_line_is_json_with_tf_and_litert_loaded() -> None:
    pytest.importorskip("tensorflow")
    pytest.importorskip("ai_edge_litert")
    from tests.tf_models import tf_mul, tflite_add_mul

    tf_blob, (tflite_blob, _) = tf_mul(), tflite_add_mul()
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "server", "--port", str(port), "--log-format", "json"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "0"})
    try:
        wait_for_port(port, 60)
        client = redis.Redis(port=port, socket_timeout=120)
        client.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "VALUES", 1, 2)
        client.execute_command("AI.TENSORSET", "b", "FLOAT", 2, "VALUES", 3, 4)
        client.execute_command("AI.MODELSTORE", "tf", "TF", "CPU", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "mul",
                               "BLOB", tf_blob)
        client.execute_command("AI.MODELEXECUTE", "tf", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "c")
        client.execute_command("AI.MODELSTORE", "lite", "TFLITE", "CPU", "BLOB", tflite_blob)
        client.execute_command("AI.MODELEXECUTE", "lite", "INPUTS", 2, "a", "b", "OUTPUTS", 2, "c", "d")
        client.close()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    records = []
    for line in err.splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            pytest.fail(f"a stderr line that is not JSON: {line!r}")
    native = [record["msg"] for record in records if record["logger"] == "redisai.native"]
    assert any("XNNPACK" in msg for msg in native), native
    assert records[-1]["msg"] == "shut down"
