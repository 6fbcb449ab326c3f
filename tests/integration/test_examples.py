"""examples/resnet.py, run in its reduced size against a real server, so the worked example cannot rot.

The example checks every reply against torch's logits itself and exits non-zero on a mismatch. With
MINBATCHSIZE equal to the number of clients (each with one request in flight) every batched run holds one
request of each client, so the mean batch is exactly that number whatever the machine's speed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support import RunningServer

ROOT = Path(__file__).resolve().parents[2]
CLIENTS, REQUESTS = 4, 3


def test_resnet_example_reduced(server: RunningServer) -> None:
    command = [sys.executable, str(ROOT / "examples" / "resnet.py"), "--small", "--port", str(server.port),
               "--clients", str(CLIENTS), "--requests", str(REQUESTS), "--batch", "8",
               "--min-batch", str(CLIENTS), "--deadline", "240"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in result.stdout.splitlines()
            if line.startswith("| resnet:")]
    assert [row[0] for row in rows] == ["resnet:torch:single", "resnet:torch:batch8", "resnet:onnx:single",
                                        "resnet:onnx:batch8"]
    assert all(int(row[1]) == CLIENTS * REQUESTS for row in rows)
    assert [float(row[5]) for row in rows if "batch8" in row[0]] == [float(CLIENTS)] * 2
    assert all(float(row[6]) >= 0 for row in rows)  # the server runs here: its CPU time per request is shown
    assert "every reply matched torch's logits" in result.stdout
    conn = server.client()
    assert conn.keys("resnet:*") == [] and conn.keys("in:*") == [] and conn.keys("out:*") == []
