"""The ``redisai`` client package (1.3.0): scriptstore / scriptget / scriptexecute, and the deprecated
scriptset / scriptrun, against our server (its virtualenv: the ``redisai_python`` fixture in conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import RunningServer, run_client_script

CLIENT_SCRIPT = r'''
import sys
import warnings
import numpy as np
import redisai

warnings.simplefilter("ignore")
con = redisai.Client(host="127.0.0.1", port=int(sys.argv[1]))
source = """
def bar(tensors: List[Tensor], keys: List[str], args: List[str]):
    return tensors[0] + tensors[1]

def scale(tensors: List[Tensor], keys: List[str], args: List[str]):
    redis.execute("SET", keys[0], args[0])
    return tensors[0] * float(args[0]), tensors[0] - tensors[0]
"""
assert con.scriptstore("s", "CPU", source, entry_points=["bar", "scale"], tag="v1") == "OK"
got = con.scriptget("s")
assert got == {"device": "CPU", "tag": "v1", "entry points": [b"bar", b"scale"], "source": source}, got
assert con.scriptget("s", meta_only=True) == {"device": "CPU", "tag": "v1", "entry points": [b"bar", b"scale"]}
a = np.array([[2, 3], [2, 3]], dtype=np.float32)
con.tensorset("a", a)
con.tensorset("b", a)
assert con.scriptexecute("s", "bar", inputs=["a", "b"], outputs=["c"]) == "OK"
assert np.array_equal(con.tensorget("c"), a + a)
assert con.scriptexecute("s", "scale", keys=["k"], inputs="a", args=["3"], outputs=["d", "e"], timeout=5000) == "OK"
assert np.array_equal(con.tensorget("d"), a * 3) and np.array_equal(con.tensorget("e"), a * 0)
assert con.get("k") == b"3"
assert con.scriptset("old", "CPU", "def bar(a, b):\n    return a * b\n") == "OK"
assert con.scriptget("old", meta_only=True)["entry points"] == []
assert con.scriptrun("old", "bar", inputs=["a", "b"], outputs="f") == "OK"
assert np.array_equal(con.tensorget("f"), a * a)
assert sorted(con.scriptscan()) == [["old", ""], ["s", "v1"]]
assert con.scriptdel("old") == "OK"
try:
    con.scriptexecute("s", "nope", inputs=["a"], outputs=["g"])
except Exception as exc:
    assert "Function does not exist: nope" in str(exc), exc
else:
    raise AssertionError("unknown function accepted")
try:  # the redisai client's own test compares this text, trailing space included
    con.scriptstore("test", "cpu", "return 1", "f")
except Exception as exc:
    expected = "expected def but found 'return' here:   File \"<string>\", line 1 return 1 ~~~~~~ <--- HERE "
    assert str(exc) == expected, repr(str(exc))
else:
    raise AssertionError("a script that does not compile was stored")
print("redisai client: scripts ok")
'''


@pytest.mark.timeout(1200)
def test_redisai_client_scripts(redisai_python: Path, server: RunningServer) -> None:
    run_client_script(redisai_python, CLIENT_SCRIPT, server.port, expect="scripts ok")
