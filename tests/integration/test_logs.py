"""The server's log, read from real server processes' logfiles: the events at notice and verbose, the JSON and
text formats, the start banner, shutdown, and ``--version``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from server.config import Config
from tests import models
from tests.support import free_port, running_server, server_process, wait_for_port, wait_until

SCRIPT = "def bar(tensors: List[Tensor], keys: List[str], args: List[str]):\n    return tensors[0] + tensors[1]\n"
ROOT = Path(__file__).resolve().parents[2]


def _events(logfile: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in logfile.read_text().splitlines() if line.strip()]


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0


def _first(events: list[dict[str, Any]], msg: str) -> dict[str, Any]:
    found = [event for event in events if event["msg"] == msg]
    assert found, f"no '{msg}' in {[event['msg'] for event in events]}"
    return found[0]


def test_json_log_of_stores_loads_failed_runs_and_connections(tmp_path: Path, real_redis_url: str) -> None:
    """Server A stores; server B (the one logging) stores, loads A's model from the store, fails a run."""
    redis.Redis.from_url(real_redis_url).flushall()
    port, logfile = free_port(), tmp_path / "server.jsonl"
    with running_server(Config(port=0, redis_url=real_redis_url)) as other, \
            server_process("--port", str(port), "--redis-url", real_redis_url, "--log-format", "json",
                           "--log-level", "verbose", "--logfile", str(logfile)) as proc:
        blob, foreign = models.torch_add(), models.torch_mul()  # two digests: B has never built A's model
        other.client().execute_command("AI.MODELSTORE", "elsewhere", "TORCH", "CPU", "BLOB", foreign)
        wait_for_port(port, timeout=30)
        conn = redis.Redis(port=port, protocol=2, socket_timeout=30)
        conn.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "TAG", "v1", "BLOB", blob)
        conn.execute_command("AI.SCRIPTSTORE", "s", "CPU", "ENTRY_POINTS", 1, "bar", "SOURCE", SCRIPT)
        conn.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "VALUES", 1, 2)
        conn.execute_command("AI.TENSORSET", "bad", "FLOAT", 3, "VALUES", 1, 2, 3)
        conn.execute_command("AI.MODELEXECUTE", "elsewhere", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c")
        with pytest.raises(redis.ResponseError):
            conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "bad", "OUTPUTS", 1, "c")
        conn.close()
        assert wait_until(lambda: any(e["msg"] == "client disconnected" for e in _events(logfile)))
        _stop(proc)
    events = _events(logfile)
    assert all(set(event) >= {"ts", "pid", "level", "logger", "msg"} for event in events)
    stored = _first(events, "model stored")
    assert (stored["key"], stored["backend"], stored["device"], stored["size"]) == ("m", "TORCH", "CPU", len(blob))
    assert stored["level"] == "notice" and stored["load_ms"] >= 0
    script = _first(events, "script stored")
    assert (script["key"], script["backend"], script["size"]) == ("s", "TORCH", len(SCRIPT))
    loaded = _first(events, "model loaded")
    assert (loaded["key"], loaded["backend"], loaded["device"], loaded["size"]) == ("elsewhere", "TORCH", "CPU", len(foreign))
    failed = _first(events, "run failed")
    assert failed["key"] == "m" and failed["type"] == "MODEL"
    assert "The size of tensor a (2) must match the size of tensor b (3)" in failed["error"]
    connected, gone = _first(events, "client connected"), _first(events, "client disconnected")
    assert connected["level"] == gone["level"] == "verbose" and connected["id"] == gone["id"]
    assert connected["addr"].startswith("127.0.0.1:")
    messages = [event["msg"] for event in events]
    assert any(message.startswith("ready to accept connections") for message in messages)
    assert messages[-1] == "shut down" and "shutting down" in messages


def test_notice_level_leaves_out_connections_and_text_lines_carry_fields(tmp_path: Path) -> None:
    port, logfile = free_port(), tmp_path / "server.log"
    with server_process("--port", str(port), "--logfile", str(logfile)) as proc:
        wait_for_port(port, timeout=30)
        conn = redis.Redis(port=port, protocol=2, socket_timeout=30)
        conn.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", models.torch_add())
        conn.close()
        _stop(proc)
    text = logfile.read_text()
    assert "client connected" not in text and "client disconnected" not in text
    stored = next(line for line in text.splitlines() if "model stored" in line)
    assert " N redisai.commands: model stored key=m backend=TORCH device=CPU size=" in stored and "load_ms=" in stored
    assert text.rstrip().endswith("redisai.server: shut down")


def test_start_banner(tmp_path: Path) -> None:
    port, metrics, logfile = free_port(), free_port(), tmp_path / "banner.jsonl"
    conf = tmp_path / "server.conf"
    conf.write_text(f"port {port}\nthreads-per-queue 2\n")
    with server_process(str(conf), "--metrics-port", str(metrics), "--log-format", "json",
                        "--logfile", str(logfile)) as proc:
        wait_for_port(port, timeout=30)
        assert wait_until(lambda: any(e["msg"].startswith("ready to accept") for e in _events(logfile)))
        _stop(proc)
    events = _events(logfile)
    version = next(e for e in events if e["msg"].startswith("redisai-server "))
    assert version["version"] == "0.1.0" and version["redisai_version"] == "1.2.7" and version["pid"] == proc.pid
    listening = next(e for e in events if e["msg"].startswith("listening on"))
    assert listening["listeners"] == [f"127.0.0.1:{port}"] and listening["metrics"] == f"http://127.0.0.1:{metrics}"
    store = next(e for e in events if e["msg"].startswith("store:"))
    assert store["store"] == "embedded" and store["store_version"].startswith("valkey ")
    backends = next(e for e in events if e["msg"].startswith("backends available:"))
    import torch

    assert backends["backends"]["TORCH"] == torch.__version__
    devices = next(e for e in events if e["msg"].startswith("devices:"))
    assert devices["cpus"] >= 1 and "CUDA: " in devices["msg"]
    workers = next(e for e in events if e["msg"].startswith("worker threads:"))
    assert workers["threads_per_queue"] == 2 and workers["config_file"] == str(conf)


def test_version_flag_prints_and_exits() -> None:
    out = subprocess.run([sys.executable, "-m", "server", "--version"], capture_output=True, text=True, timeout=60,
                         cwd=ROOT)
    assert out.returncode == 0 and out.stdout.startswith("redisai-server 0.1.0 (RedisAI 1.2.7 commands, Python ")


def test_a_logfile_that_cannot_be_opened_stops_the_cli_with_a_message(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "server", "--port", str(free_port()), "--logfile",
                          str(tmp_path / "missing" / "dir" / "x.log")], capture_output=True, text=True, timeout=60,
                         cwd=ROOT)
    assert out.returncode == 1 and out.stderr.startswith("redisai-server: ") and "x.log" in out.stderr
