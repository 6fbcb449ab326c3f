"""INFO ai, INFO commandstats and the Prometheus /metrics endpoint, after real runs."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import redis
import torch
from prometheus_client.parser import text_string_to_metric_families

from server.config import Config
from tests import models
from tests.integration.test_tensor import pack
from tests.support import RunningServer, free_port, running_server

SCRIPT = "def bar(tensors: List[Tensor], keys: List[str], args: List[str]):\n    return tensors[0] + tensors[1]\n"
ROOT = Path(__file__).resolve().parents[2]


def _runs(conn: redis.Redis) -> None:
    """Two model runs that succeed, one that fails at run time, one script run."""
    conn.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", models.torch_add())
    conn.execute_command("AI.SCRIPTSTORE", "s", "CPU", "ENTRY_POINTS", 1, "bar", "SOURCE", SCRIPT)
    conn.execute_command("AI.TENSORSET", "a", "FLOAT", 2, 2, "VALUES", 1, 2, 3, 4)
    conn.execute_command("AI.TENSORSET", "bad", "FLOAT", 3, "VALUES", 1, 2, 3)
    for _ in range(2):
        conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c")
    with pytest.raises(redis.ResponseError):
        conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "bad", "OUTPUTS", 1, "c")
    conn.execute_command("AI.SCRIPTEXECUTE", "s", "bar", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "d")


def test_info_ai_changes_after_runs(server: RunningServer) -> None:
    conn = server.client()
    before = conn.info("ai")
    assert before["ai_RedisAI_version"] == "1.2.7" and before["ai_threads_per_queue"] == 1
    assert (before["ai_runs"], before["ai_run_errors"], before["ai_models"], before["ai_worker_threads"]) == (0, 0, 0, 0)
    assert "ai_Torch_version" not in before and "ai_queue_CPU" not in before
    _runs(conn)
    after = conn.info("ai")
    assert after["ai_Torch_version"] == torch.__version__ and after["ai_backends_loaded"] == "TORCH"
    assert (after["ai_runs"], after["ai_run_errors"], after["ai_models"], after["ai_scripts"]) == (4, 1, 1, 1)
    assert after["ai_devices"] == "CPU" and after["ai_worker_threads"] == 1
    queue = after["ai_queue_CPU"]
    assert (queue["device"], queue["length"], queue["threads"], queue["executed"]) == ("CPU", 0, 1, 4)
    assert queue["busy_sec"] > 0
    assert "ai_runs" not in conn.info()
    assert conn.info("modules")["ai_runs"] == 4
    everything = conn.info("everything")
    assert everything["ai_runs"] == 4 and everything["cmdstat_ai.modelexecute"]["calls"] == 3


def test_info_commandstats_counts_our_commands(server: RunningServer) -> None:
    conn = server.client()
    _runs(conn)
    stats = conn.info("commandstats")
    execute = stats["cmdstat_ai.modelexecute"]
    assert (execute["calls"], execute["failed_calls"]) == (3, 1) and execute["usec"] > 0
    assert stats["cmdstat_ai.scriptexecute"]["calls"] == 1
    text = _raw_info(server, "commandstats")
    assert text.count("# Commandstats") == 1
    assert re.search(r"^cmdstat_ai\.modelexecute:calls=3,usec=\d+,usec_per_call=\d+\.\d\d,failed_calls=1\r$", text,
                     re.MULTILINE), text


def _raw_info(server: RunningServer, section: str) -> str:
    """INFO's bulk string as sent on the wire (redis-py would parse it into a dict)."""
    raw = server.raw()
    raw.send(pack("INFO", section))
    data = b""
    while b"\r\n" not in data or len(data) < data.index(b"\r\n") + 2 + int(data[1 : data.index(b"\r\n")]) + 2:
        data += raw.sock.recv(65536)
    raw.close()
    start = data.index(b"\r\n") + 2
    return data[start:-2].decode()


def _scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def _labels(**labels: str) -> frozenset[tuple[str, str]]:
    return frozenset(labels.items())


def test_metrics_endpoint_after_runs() -> None:
    port = free_port()
    with running_server(Config(port=0, metrics_port=port)) as server:
        conn = server.client()
        _runs(conn)
        server.server.ctx.metrics.observe_batch(b"m", 3, "CPU")  # what the batching code reports
        scraped = _scrape(port)
        model, script = _labels(key="m", type="MODEL", device="CPU"), _labels(key="s", type="SCRIPT", device="CPU")
        assert scraped[("redisai_requests_total", _labels(command="AI.MODELEXECUTE"))] == 3
        assert scraped[("redisai_request_errors_total", _labels(command="AI.MODELEXECUTE"))] == 1
        assert scraped[("redisai_request_seconds_total", _labels(command="AI.MODELEXECUTE"))] > 0
        assert scraped[("redisai_run_duration_seconds_count", model)] == 2
        assert scraped[("redisai_run_duration_seconds_sum", model)] > 0
        assert scraped[("redisai_run_duration_seconds_bucket", model | _labels(le="+Inf"))] == 2
        assert scraped[("redisai_run_duration_seconds_count", script)] == 1
        assert scraped[("redisai_run_failures_total", model)] == 1
        assert scraped[("redisai_batch_size_count", _labels(key="m", device="CPU"))] == 1
        assert scraped[("redisai_batch_size_bucket", _labels(key="m", device="CPU", le="2.0"))] == 0
        assert scraped[("redisai_batch_size_bucket", _labels(key="m", device="CPU", le="4.0"))] == 1
        assert scraped[("redisai_queue_depth", _labels(device="CPU"))] == 0
        assert scraped[("redisai_queue_executed_steps_total", _labels(device="CPU"))] == 4
        assert scraped[("redisai_runs_total", _labels())] == 4
        assert scraped[("redisai_run_errors_total", _labels())] == 1
        assert scraped[("redisai_connected_clients", _labels())] == 1
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
        assert missing.value.code == 404
        conn.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()  # stopped with the server


def test_metrics_off_never_imports_prometheus_client() -> None:
    code = ("import sys\nfrom server.app import Server\nfrom server.config import Config\n"
            "server = Server(Config(port=0))\nassert not server.ctx.metrics.enabled\n"
            "assert 'prometheus_client' not in sys.modules and 'torch' not in sys.modules\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_deleted_models_leave_no_series_behind() -> None:
    import urllib.request

    from server.config import Config
    from tests import models
    from tests.support import free_port, running_server

    port = free_port()
    with running_server(Config(port=0, metrics_port=port)) as server:
        conn = server.client()
        conn.execute_command("AI.MODELSTORE", "gone", "TORCH", "CPU", "BLOB", models.torch_add())
        conn.execute_command("AI.TENSORSET", "a", "FLOAT", 1, "VALUES", 1)
        conn.execute_command("AI.MODELEXECUTE", "gone", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "b")

        def scrape() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
                return str(response.read().decode())

        assert 'key="gone"' in scrape()
        conn.execute_command("AI.MODELDEL", "gone")
        assert 'key="gone"' not in scrape()


def _direct_store(server: RunningServer, store_url: str) -> redis.Redis:
    """A client of the store itself (the embedded child's private socket, or the real Redis)."""
    store = server.server.ctx.store
    process = getattr(store, "process", None)
    if process is not None:
        return redis.Redis(unix_socket_path=process.socket_path)
    return redis.Redis.from_url(store_url)


def test_info_server_reports_the_stores_version_truthfully_and_ours(server: RunningServer, store_url: str) -> None:
    theirs = _direct_store(server, store_url).info("server")
    ours = server.client().info("server")
    assert ours["redis_version"] == theirs["redis_version"]  # what the store behind us can do, as clients check it
    assert ours["redisai_server_version"] == "0.1.0"
    name = theirs.get("server_name", "redis")
    assert ours["store_version"].startswith(f"{name} {theirs.get(f'{name}_version', theirs['redis_version'])}")
    assert ours["process_id"] == os.getpid()  # this test process runs the server in a thread
    hello = server.client(protocol=3).execute_command("HELLO", 3)
    assert hello[b"version"] == str(theirs["redis_version"]).encode() and hello[b"redisai_server"] == b"0.1.0"


def test_info_memory_shows_this_process_first_and_the_stores_under_its_own_names(server: RunningServer,
                                                                                  store_url: str) -> None:
    text = _raw_info(server, "memory")
    lines = text.split("\r\n")
    assert lines[0] == "# Memory" and lines[1].startswith("server_process_rss:")
    memory = server.client().info("memory")
    statm = Path("/proc/self/statm").read_text().split()
    assert memory["server_process_rss"] > 0 and memory["server_process_peak_rss"] >= memory["server_process_rss"]
    assert memory["server_process_virtual_memory"] > 0 and int(statm[0]) > 0
    assert memory["server_process_id"] == os.getpid()
    assert memory["used_memory"] > 0 and "maxmemory_policy" in memory  # the store's, named as Redis names them
    assert memory["used_memory"] != memory["server_process_rss"]


def test_metrics_have_process_series_and_build_info() -> None:
    port = free_port()
    with running_server(Config(port=0, metrics_port=port)) as server:
        server.client().ping()
        scraped = _scrape(port)
        assert scraped[("process_resident_memory_bytes", _labels())] > 0
        assert scraped[("process_virtual_memory_bytes", _labels())] > 0
        assert scraped[("process_open_fds", _labels())] > 0
        assert scraped[("process_cpu_seconds_total", _labels())] > 0
        assert scraped[("process_start_time_seconds", _labels())] > 0
        build = [labels for (name, labels) in scraped if name == "redisai_build_info"]
        assert len(build) == 1
        labels = dict(build[0])
        assert labels["version"] == "0.1.0" and labels["redisai_version"] == "1.2.7" and labels["store"] == "valkey"
        assert labels["store_version"] == server.server.ctx.store_version.version != ""


def test_metrics_without_the_key_label_keep_one_series_per_type_and_device() -> None:
    port = free_port()
    with running_server(Config(port=0, metrics_port=port, metrics_key_label=False)) as server:
        conn = server.client()
        conn.execute_command("AI.TENSORSET", "a", "FLOAT", 1, "VALUES", 1)
        for index in range(3):  # three dynamically named models
            conn.execute_command("AI.MODELSTORE", f"m{index}", "TORCH", "CPU", "BLOB", models.torch_add())
            conn.execute_command("AI.MODELEXECUTE", f"m{index}", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "b")
        server.server.ctx.metrics.observe_batch(b"m0", 2, "CPU")
        scraped = _scrape(port)
        assert scraped[("redisai_run_duration_seconds_count", _labels(type="MODEL", device="CPU"))] == 3
        assert scraped[("redisai_batch_size_count", _labels(device="CPU"))] == 1
        assert not any(("key", name) in labels for (_, labels) in scraped for name in ("m0", "m1", "m2"))
        conn.execute_command("AI.MODELDEL", "m0")  # nothing keyed to forget; the totals stay
        assert _scrape(port)[("redisai_run_duration_seconds_count", _labels(type="MODEL", device="CPU"))] == 3
