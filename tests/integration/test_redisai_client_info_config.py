"""The ``redisai`` client package (1.3.0): config / loadbackend / infoget / inforeset against this server."""

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
port, torch_path = int(sys.argv[1]), sys.argv[2]
con = redisai.Client(host="127.0.0.1", port=port)
assert con.config("MODEL_CHUNK_SIZE") == 535822336, con.config("MODEL_CHUNK_SIZE")
assert con.config("BACKENDSPATH", "/my/backends/path") == "OK"
assert con.config("BACKENDSPATH") == "/my/backends/path"
assert con.config("MODEL_CHUNK_SIZE", 128 * 1024) == "OK"
assert con.config("bad_config") is None
assert con.loadbackend("TORCH", "redisai_torch/redisai_torch.so") == "OK"
try:
    con.loadbackend("TORCH", "redisai_torch/redisai_torch.so")
except Exception as exc:
    assert "error loading backend" in str(exc), exc
else:
    raise AssertionError("a second LOADBACKEND must fail")
assert con.modelstore("m", "TORCH", "CPU", open(torch_path, "rb").read(), tag="v1") == "OK"
assert con.infoget("m") == {"key": "m", "type": "MODEL", "backend": "TORCH", "device": "CPU", "tag": "v1",
                            "duration": 0, "samples": 0, "calls": 0, "errors": 0}, con.infoget("m")
a = np.array([[2, 3], [2, 3]], dtype=np.float32)
con.tensorset("a", a)
con.modelexecute("m", inputs=["a", "a"], outputs=["c"])
info = con.infoget("m")
assert info["calls"] == 1 and info["samples"] == 2 and info["duration"] > 0, info
assert con.inforeset("m") == "OK"
assert con.infoget("m")["calls"] == 0
print("redisai client: config and info ok")
'''


@pytest.mark.timeout(1200)
def test_redisai_client_config_and_info(redisai_python: Path, server: RunningServer, tmp_path: Path) -> None:
    torch_path = tmp_path / "add.pt"
    torch_path.write_bytes(models.torch_add())
    run_client_script(redisai_python, CLIENT_SCRIPT, server.port, torch_path, expect="config and info ok")
