"""The ``redisai`` client package (1.3.0): modelstore / modelget / modelexecute / modelrun and dag()."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import models
from tests.support import RunningServer, run_client_script

CLIENT_SCRIPT = r'''
import sys
import warnings
import numpy as np
import redisai

warnings.simplefilter("ignore")
port, torch_path, onnx_path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
con = redisai.Client(host="127.0.0.1", port=port)
torch_blob, onnx_blob = open(torch_path, "rb").read(), open(onnx_path, "rb").read()

assert con.modelstore("m", "TORCH", "CPU", torch_blob, tag="v1") == "OK"
meta = con.modelget("m", meta_only=True)
assert meta["backend"] == "TORCH" and meta["device"] == "CPU" and meta["tag"] == "v1", meta
assert meta["inputs"] == ["a", "b"] and meta["outputs"] == [""], meta
assert con.modelget("m")["blob"] == torch_blob
a = np.array([[2, 3], [2, 3]], dtype=np.float32)
con.tensorset("a", a)
con.tensorset("b", a)
assert con.modelexecute("m", inputs=["a", "b"], outputs=["c"]) == "OK"
assert np.array_equal(con.tensorget("c"), a + a)
assert con.modelexecute("m", inputs=["a", "b"], outputs="c", timeout=60000000) == "OK"
assert con.modelrun("m", inputs=["a", "b"], outputs=["d"]) == "OK"
assert np.array_equal(con.tensorget("d"), a + a)

assert con.modelstore("o", "ONNX", "CPU", onnx_blob) == "OK"
dag = con.dag(persist="out", routing="r")
dag.tensorset("x", a)
dag.modelexecute("o", inputs=["x", "x"], outputs=["y"])
dag.modelexecute("m", inputs=["y", "x"], outputs=["out"])
dag.tensorget("out")
result = dag.execute()
assert result[:3] == ["OK", "OK", "OK"], result
assert np.array_equal(result[3], a * 3), result
assert np.array_equal(con.tensorget("out"), a * 3)
ro = con.dag(load=["a"], readonly=True)
ro.tensorget("a")
assert np.array_equal(ro.execute()[0], a)
assert con.modeldel("m") == "OK"
try:
    con.modelget("m")
except Exception as exc:
    assert "model key is empty" in str(exc), exc
else:
    raise AssertionError("deleted model still there")
print("redisai client: models and dags ok")
'''


@pytest.mark.timeout(1200)
def test_redisai_client_models_and_dag(redisai_python: Path, server: RunningServer, tmp_path: Path) -> None:
    torch_path, onnx_path = tmp_path / "add.pt", tmp_path / "add.onnx"
    torch_path.write_bytes(models.torch_add())
    onnx_path.write_bytes(models.onnx_add())
    run_client_script(redisai_python, CLIENT_SCRIPT, server.port, torch_path, onnx_path, expect="models and dags ok")
