"""The ``redisai`` client package (1.3.0) against our server: ``tensorset`` / ``tensorget`` of every dtype.

redisai 1.3.0 wants redis-py 4.x (and was written for numpy < 2), which this project's environment does not
have, so it runs from its own virtualenv (.clients/redisai-venv, gitignored), created once and reused.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import RunningServer, run_client_script

CLIENT_SCRIPT = r'''
import sys
import numpy as np
import redisai

con = redisai.Client(host="127.0.0.1", port=int(sys.argv[1]))
cases = {
    "float32": (np.array([[1.5, -2.25], [3.0, 1e-3]], dtype=np.float32), "FLOAT"),
    "float64": (np.array([0.1, -1e300, 5e-324], dtype=np.float64), "DOUBLE"),
    "int8": (np.array([-128, 127, 0], dtype=np.int8), "INT8"),
    "int16": (np.array([[-32768], [32767]], dtype=np.int16), "INT16"),
    "int32": (np.array([-(2**31), 2**31 - 1], dtype=np.int32), "INT32"),
    "int64": (np.array([-(2**63), 2**63 - 1], dtype=np.int64), "INT64"),
    "uint8": (np.array([0, 255], dtype=np.uint8), "UINT8"),
    "uint16": (np.array([0, 65535], dtype=np.uint16), "UINT16"),
    "bool": (np.array([[True, False, True]]), "BOOL"),
    "str": (np.array([["hello", ""], ["w\u00f6rld", "x"]]), "STRING"),
    "scalar": (np.array(2.5, dtype=np.float32), "FLOAT"),
}
for key, (array, dtype) in cases.items():
    assert con.tensorset(key, array) == "OK", key
    got = con.tensorget(key)
    assert got.dtype == array.dtype and got.shape == array.shape and np.array_equal(got, array), (key, got)
    assert con.tensorget(key, meta_only=True) == {"dtype": dtype, "shape": list(array.shape)}, key
    plain = con.tensorget(key, as_numpy=False)
    assert plain["dtype"] == dtype and plain["shape"] == list(array.shape), (key, plain)
    assert plain["values"] == array.reshape(-1).tolist(), (key, plain["values"])
    mutable = con.tensorget(key, as_numpy_mutable=True) if dtype != "STRING" else got
    assert np.array_equal(mutable, array), key
assert con.tensorset("listed", [1, 2, 3, 4], shape=(2, 2), dtype="int32") == "OK"
assert con.tensorget("listed").tolist() == [[1, 2], [3, 4]]
assert con.tensorset("floats", (0.5, 1.5), dtype="float") == "OK"
assert con.tensorget("floats", as_numpy=False) == {"dtype": "FLOAT", "shape": [2], "values": [0.5, 1.5]}
try:
    con.tensorget("no-such-key")
except Exception as exc:
    assert "tensor key is empty" in str(exc), exc
else:
    raise AssertionError("missing key accepted")
print("redisai client: all round trips ok")
'''


@pytest.mark.timeout(1200)
def test_redisai_client_tensorset_tensorget(redisai_python: Path, server: RunningServer) -> None:
    run_client_script(redisai_python, CLIENT_SCRIPT, server.port, expect="all round trips ok")
