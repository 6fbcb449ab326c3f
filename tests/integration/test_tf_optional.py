"""TF and TFLITE are optional: the server starts and serves TORCH/ONNX without them, and imports them only
when a TF/TFLITE model or LOADBACKEND asks for them. Each check runs in a fresh interpreter, so that what it
imported is its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SERVE_TORCH = '''
import sys
{prelude}
import redis
from server.config import Config
from tests import models
from tests.support import running_server

with running_server(Config(port=0)) as server:
    conn = server.client()
    conn.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", models.torch_add())
    conn.execute_command("AI.MODELSTORE", "o", "ONNX", "CPU", "BLOB", models.onnx_add())
    conn.execute_command("AI.TENSORSET", "a", "FLOAT", 2, 2, "VALUES", 1, 2, 1, 2)
    for key in ("m", "o"):
        conn.execute_command("AI.MODELEXECUTE", key, "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c")
        assert conn.execute_command("AI.TENSORGET", "c", "VALUES") == [b"2", b"4", b"2", b"4"]
    {checks}
print("served")
'''

# Makes tensorflow and the TFLite runtimes impossible to import, as in an install without the extras.
HIDE_RUNTIMES = '''
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("tensorflow", "ai_edge_litert", "tflite_runtime"):
            raise ModuleNotFoundError(name)
        return None
sys.meta_path.insert(0, Hide())
'''

WITHOUT_EXTRAS = '''
    for store in (("TF", "CPU", "INPUTS", 1, "a", "OUTPUTS", 1, "c"), ("TFLITE", "CPU")):
        try:
            conn.execute_command("AI.MODELSTORE", "t", *store, "BLOB", b"x")
        except redis.ResponseError as exc:
            assert str(exc) == "Could not load backend", exc
        else:
            raise AssertionError("stored without its runtime")
        try:
            conn.execute_command("AI.CONFIG", "LOADBACKEND", store[0], "x.so")
        except redis.ResponseError as exc:
            assert str(exc) == "error loading backend", exc
    assert conn.info("ai")["ai_backends_available"] == ["TORCH", "ONNX"]
    assert conn.exists("t") == 0 and conn.ping()
'''

LAZY = '''
    assert not {"tensorflow", "ai_edge_litert"} & set(sys.modules), "imported at start"
    conn.execute_command("AI.CONFIG", "LOADBACKEND", "TFLITE", "x.so")
    assert "ai_edge_litert" in sys.modules and "tensorflow" not in sys.modules
'''


def _serve(prelude: str, checks: str) -> None:
    code = SERVE_TORCH.format(prelude=prelude, checks=checks.strip())
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "served" in result.stdout, result.stdout + result.stderr


def test_serves_torch_and_onnx_without_the_tf_extras() -> None:
    _serve(HIDE_RUNTIMES, WITHOUT_EXTRAS)


def test_tf_and_tflite_are_imported_only_when_asked_for() -> None:
    _serve("", LAZY)
