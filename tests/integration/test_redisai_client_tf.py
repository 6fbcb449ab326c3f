"""The ``redisai`` client package (1.3.0) with TF and TFLITE models: what redisai-py's own test suite does
with them (modelset/modelstore with inputs and outputs, modelget, modelexecute/modelrun, tensorget,
infoget/inforeset, a DAG), on models the tests build (tests/tf_models.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests import models, tf_models
from tests.support import RunningServer, run_client_script

CLIENT_SCRIPT = r'''
import sys
import warnings
import numpy as np
import redisai
from redis.exceptions import ResponseError

warnings.simplefilter("ignore")
port, folder = int(sys.argv[1]), sys.argv[2]
read = lambda name: open(f"{folder}/{name}", "rb").read()
graph, torch_blob, lite, quant = read("graph.pb"), read("add.pt"), read("add_mul.tflite"), read("quant.tflite")
expected = np.load(f"{folder}/expected.npz")
con = redisai.Client(host="127.0.0.1", port=port)
tf_meta = {"backend": "TF", "batchsize": 0, "device": "cpu", "inputs": ["a", "b"], "minbatchsize": 0,
           "minbatchtimeout": 0, "outputs": ["mul"], "tag": "v1.0"}

# test_deprecated_modelset, test_modelget_meta
con.modelset("m", "tf", "cpu", graph, inputs=["a", "b"], outputs=["mul"], tag="v1.0")
assert con.modelget("m", meta_only=True) == tf_meta, con.modelget("m", meta_only=True)
assert con.modelstore("m", "tf", "cpu", graph, inputs=["a", "b"], outputs=["mul"], tag="v1.0") == "OK"
assert con.modelget("m", meta_only=True) == tf_meta

# test_modelexecute_non_list_input_output, test_run_tf_model
con.tensorset("a", (2, 3), dtype="float")
con.tensorset("b", (2, 3), dtype="float")
assert con.modelexecute("m", ["a", "b"], "out") == "OK"
assert np.allclose(con.tensorget("out"), [4, 9])
con.modeldel("m")
try:
    con.modelget("m")
except ResponseError:
    pass
else:
    raise AssertionError("deleted model still there")
con.modelstore("m", "tf", "cpu", graph, inputs=["a", "b"], outputs="mul", tag="v1.0")
try:
    con.modelstore("m", "tf", "cpu", torch_blob, inputs=["a", "b"], outputs=["mul"])
except ResponseError as exc:
    assert str(exc) == "Invalid GraphDef", str(exc)
else:
    raise AssertionError("a TorchScript blob stored as TF")
con.modelexecute("m", ["a", "b"], ["c"])
assert np.allclose([4, 9], con.tensorget("c"))
model = con.modelget("m")
assert model["backend"] == "TF" and model["device"] == "cpu" and model["tag"] == "v1.0" and model["blob"] == graph

# test_non_ascii_char, test_device_with_id, test_deprecated_modelrun
nonascii = "\u0109"
con.modelstore("m" + nonascii, "tf", "cpu", graph, inputs=["a", "b"], outputs=["mul"], tag="v1.0")
con.tensorset("a" + nonascii, (2, 3), dtype="float")
con.modelexecute("m" + nonascii, ["a" + nonascii, "b"], ["c" + nonascii])
assert np.allclose(con.tensorget("c" + nonascii), [4.0, 9.0])
assert con.modelstore("m1", "tf", "cpu:1", graph, inputs=["a", "b"], outputs=["mul"], tag="v1.0") == "OK"
con.modelrun("m", ["a", "b"], ["d"])
assert np.allclose([4, 9], con.tensorget("d"))

# test_info
con.modelstore("i", "tf", "cpu", graph, inputs=["a", "b"], outputs=["mul"])
first = con.infoget("i")
assert first == {"key": "i", "type": "MODEL", "backend": "TF", "device": "cpu", "tag": "", "duration": 0,
                 "samples": 0, "calls": 0, "errors": 0}, first
con.modelexecute("i", ["a", "b"], ["c"])
con.modelexecute("i", ["a", "b"], ["c"])
assert con.infoget("i")["calls"] == 2
con.inforeset("i")
assert con.infoget("i") == first

# test_run_tflite_model: the model's own input and output names; outputs compared with TensorFlow's
assert con.modelstore("tfl_model", "tflite", "cpu", lite) == "OK"
meta = con.modelget("tfl_model", meta_only=True)
assert meta["backend"] == "TFLITE" and meta["inputs"] == ["x", "y"] and len(meta["outputs"]) == 2, meta
con.tensorset("x", expected["x"])
con.tensorset("y", expected["y"])
con.modelexecute("tfl_model", ["x", "y"], ["output1", "output2"])
assert np.allclose(con.tensorget("output1"), expected["sum"]) and np.allclose(con.tensorget("output2"), expected["prod"])
con.modelstore("q", "tflite", "cpu", quant)
con.tensorset("qx", expected["qx"])
con.modelexecute("q", "qx", "qy")
assert np.array_equal(con.tensorget("qy"), expected["qy"]) and con.tensorget("qy").dtype == np.int8

# a DAG with both (test_dagexecute_modelexecute_with_scriptexecute, on our models)
dag = con.dag(persist="sum", routing="r")
dag.tensorset("k", expected["x"])
dag.modelexecute("m", inputs=["k", "k"], outputs=["kk"])
dag.modelexecute("tfl_model", inputs=["kk", "k"], outputs=["sum", "prod"])
dag.tensorget("sum")
result = dag.execute()
assert result[:3] == ["OK", "OK", "OK"], result
assert np.allclose(result[3], expected["x"] * expected["x"] + expected["x"]), result
assert np.allclose(con.tensorget("sum"), result[3])
print("redisai client: tf and tflite ok")
'''


def test_redisai_client_tf_and_tflite(redisai_python: Path, server: RunningServer, tmp_path: Path) -> None:
    lite, reference = tf_models.tflite_add_mul()
    quant = tf_models.tflite_quantized()
    rng = np.random.default_rng(5)
    x, y = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
    qx = np.array([[5, -100, 17, 127]], np.int8)
    total, product = reference(x, y)
    (tmp_path / "graph.pb").write_bytes(tf_models.tf_mul())
    (tmp_path / "add.pt").write_bytes(models.torch_add())
    (tmp_path / "add_mul.tflite").write_bytes(lite)
    (tmp_path / "quant.tflite").write_bytes(quant)
    np.savez(tmp_path / "expected.npz", x=x, y=y, sum=total, prod=product, qx=qx,
             qy=tf_models.run_tflite(quant, [qx])[0])
    run_client_script(redisai_python, CLIENT_SCRIPT, server.port, tmp_path, expect="tf and tflite ok")
