"""The embedded store is a real valkey-server child: private, durable with --dir, never outliving the server,
restarted when it dies, and written with store-side checks that no race can get between."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from server.config import Config
from server.store.embedded import EmbeddedStore
from tests.fuzz import WRITES, acknowledged, store_witness
from tests.models import torch_add
from tests.scripts import SCRIPT
from tests.support import (
    RawClient,
    RunningServer,
    child_pids,
    free_port,
    process_running,
    running_server,
    server_process,
    wait_for_port,
    wait_until,
)

BLOB = b"\x00\x00\x80?\x00\x00\x00@"  # float32 [1, 2]


def _embedded(server: RunningServer) -> EmbeddedStore:
    store = server.server.ctx.store
    assert isinstance(store, EmbeddedStore)
    return store


@pytest.fixture
def embedded() -> Iterator[RunningServer]:
    with running_server(Config(port=0, shutdown_timeout=2.0)) as running:
        yield running


# --- a real server behind ------------------------------------------------------------------------------------------


def test_ordinary_commands_reach_a_real_server(embedded: RunningServer) -> None:
    conn = embedded.client()
    assert conn.eval("return redis.call('SET', KEYS[1], ARGV[1])", 1, "k", "v") == b"OK"
    assert conn.object("encoding", "k") == b"embstr"
    assert conn.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    assert isinstance(conn.memory_usage("k"), int)
    assert isinstance(conn.slowlog_len(), int)
    assert conn.execute_command("FUNCTION", "LIST") == []
    assert conn.execute_command("SCRIPT", "EXISTS", "0" * 40) == [0]
    memory = conn.info("memory")
    assert memory["used_memory"] > 0 and memory["server_process_rss"] > 0
    assert memory["server_process_peak_rss"] >= memory["server_process_rss"] // 2
    assert conn.info("server")["redisai_server_version"]


def test_monitor_sees_other_clients_commands(embedded: RunningServer) -> None:
    monitor = embedded.raw()
    assert monitor.call(b"MONITOR\r\n", b"+OK\r\n") == b"+OK\r\n"
    embedded.client().set("watched", "1")
    assert b'"set" "watched" "1"' in monitor.read_until(b'"watched" "1"').lower()


def test_client_tracking_delivers_invalidations(embedded: RunningServer) -> None:
    tracked = embedded.raw()
    tracked.switch_to_resp3()
    assert tracked.call(b"CLIENT TRACKING ON\r\n", b"+OK\r\n") == b"+OK\r\n"
    assert tracked.call(b"GET cached\r\n", b"_\r\n") == b"_\r\n"
    embedded.client().set("cached", "new")
    push = b">2\r\n$10\r\ninvalidate\r\n*1\r\n$6\r\ncached\r\n"
    assert tracked.read_exactly(push) == push


# --- private ---------------------------------------------------------------------------------------------------------


def _tcp_listen_inodes() -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as handle:
            for row in handle.readlines()[1:]:
                fields = row.split()
                if fields[3] == "0A":  # LISTEN
                    inodes.add(fields[9])
    return inodes


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def test_the_store_listens_only_on_a_private_unix_socket(embedded: RunningServer) -> None:
    store = _embedded(embedded)
    conn = embedded.client()
    assert conn.config_get("port") == {"port": "0"}
    path = conn.config_get("unixsocket")["unixsocket"]
    assert path == store.process.socket_path
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert stat.S_ISSOCK(os.stat(path).st_mode)
    assert not _socket_inodes(store.process.pid) & _tcp_listen_inodes()
    assert conn.config_get("save") == {"save": ""} and conn.config_get("appendonly") == {"appendonly": "no"}


def _socket_path(conn: redis.Redis) -> str:
    return str(conn.config_get("unixsocket")["unixsocket"])


# --- never outlives the server ---------------------------------------------------------------------------------------


def _store_child(server_pid: int) -> int:
    assert wait_until(lambda: len(child_pids(server_pid)) == 1), "the server started no store process"
    return child_pids(server_pid)[0]


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM])
def test_the_store_process_ends_with_the_server(how: signal.Signals) -> None:
    port = free_port()
    with server_process("--port", str(port)) as proc:
        wait_for_port(port)
        socket_path = _socket_path(redis.Redis(port=port))
        store = _store_child(proc.pid)
        proc.send_signal(how)
        proc.wait(15)
        assert wait_until(lambda: not process_running(store)), "the store outlived the server"
        assert wait_until(lambda: not os.path.exists(socket_path)), "the store's socket was left behind"
        if how == signal.SIGTERM:
            assert not os.path.exists(os.path.dirname(socket_path))


def test_a_directory_left_by_a_killed_server_is_swept_at_the_next_start() -> None:
    port = free_port()
    with server_process("--port", str(port)) as proc:
        wait_for_port(port)
        left = os.path.dirname(_socket_path(redis.Redis(port=port)))
        proc.kill()
        proc.wait(15)
    assert os.path.isdir(left)
    with running_server(Config(port=0)):
        assert not os.path.exists(left)


# --- persistence ---------------------------------------------------------------------------------------------------


def _fill(conn: redis.Redis) -> None:
    conn.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "BLOB", BLOB)
    conn.execute_command("AI.TENSORSET", "b", "FLOAT", 2, "VALUES", 10, 20)
    conn.execute_command("AI.MODELSTORE", "adder", "TORCH", "CPU", "TAG", "v1", "BLOB", torch_add())
    conn.execute_command("AI.SCRIPTSTORE", "script", "CPU", "TAG", "s1", "ENTRY_POINTS", 1, "bar", "SOURCE", SCRIPT)
    conn.set("plain", "value")


def _check_filled(conn: redis.Redis) -> None:
    assert conn.execute_command("AI.TENSORGET", "a", "BLOB") == BLOB
    assert conn.execute_command("AI.MODELGET", "adder", "BLOB") == torch_add()
    assert conn.execute_command("AI.MODELEXECUTE", "adder", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "c") == b"OK"
    assert [float(v) for v in conn.execute_command("AI.TENSORGET", "c", "VALUES")] == [11, 22]
    assert conn.execute_command("AI.SCRIPTGET", "script", "SOURCE") == SCRIPT.encode()
    assert conn.execute_command("AI.SCRIPTEXECUTE", "script", "bar", "INPUTS", 2, "a", "b", "OUTPUTS", 1, "d") == b"OK"
    assert [float(v) for v in conn.execute_command("AI.TENSORGET", "d", "VALUES")] == [11, 22]
    assert conn.get("plain") == b"value"


def test_a_restart_with_the_same_dir_keeps_every_tensor_model_and_script(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    for round_number in range(2):
        port = free_port()
        with server_process("--port", str(port), "--dir", data) as proc:
            wait_for_port(port)
            conn = redis.Redis(port=port, socket_timeout=30)
            if round_number == 0:
                _fill(conn)
                assert conn.config_get("appendonly") == {"appendonly": "yes"}
                assert conn.config_get("appendfsync") == {"appendfsync": "everysec"}
            else:
                _check_filled(conn)
            conn.close()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
    assert (tmp_path / "data" / "appendonlydir").is_dir()


def test_two_servers_cannot_share_one_dir(tmp_path: Path) -> None:
    with running_server(Config(port=0, dir=str(tmp_path))):
        out = subprocess.run([sys.executable, "-m", "server", "--port", str(free_port()), "--dir", str(tmp_path)],
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "in use by another server (--dir)" in out.stderr


# --- errors ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["missing", "not executable", "fails to start"])
def test_a_store_binary_that_cannot_run_is_one_clear_line_and_exit_1(kind: str, tmp_path: Path) -> None:
    binary = {"missing": str(tmp_path / "nope"), "not executable": str(tmp_path / "plain"),
              "fails to start": "/bin/false"}[kind]
    (tmp_path / "plain").write_text("#!/bin/sh\n")
    out = subprocess.run([sys.executable, "-m", "server", "--port", str(free_port()), "--store-bin", binary],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("redisai-server: ") and "--store-bin" in lines[0], out.stderr


def test_dir_needs_the_embedded_store() -> None:
    out = subprocess.run([sys.executable, "-m", "server", "--redis-url", "redis://127.0.0.1:1", "--dir", "/tmp/x"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "cannot be used with redis-url" in out.stderr


def test_the_store_killed_mid_load_is_restarted_and_keeps_every_acknowledged_write(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Five writers (tensors, plain keys, DAG PERSISTs of a tensor, a model's and a script's output) while the store
    is SIGKILLed: what was acknowledged is there after the restart, and the only errors meanwhile are the store's
    absence."""
    with running_server(Config(port=0, dir=str(tmp_path), shutdown_timeout=2.0)) as running:
        store_witness(running.client())
        store = _embedded(running)
        first_pid = store.process.pid
        written: list[int] = []
        errors: list[str] = []
        done = threading.Event()

        def writer(kind: int) -> None:
            conn = running.client()
            write = WRITES[kind][0]
            for i in range(kind, 500_000, len(WRITES)):
                if done.is_set():
                    return
                try:
                    acknowledged(write(conn, f"w{i}", i))
                    written.append(i)
                except redis.ResponseError as exc:  # a closed connection would fail the test: it must not happen
                    errors.append(str(exc))

        threads = [threading.Thread(target=writer, args=(kind,), daemon=True) for kind in range(len(WRITES))]
        for thread in threads:
            thread.start()
        assert wait_until(lambda: len(written) >= 300)
        os.kill(first_pid, signal.SIGKILL)
        assert wait_until(lambda: store.process.pid != first_pid and store.restarts == 1)
        count_at_restart = len(written)
        assert wait_until(lambda: len(written) >= count_at_restart + 300)
        done.set()
        for thread in threads:
            thread.join(30)
        conn = running.client()
        values = conn.pipeline(transaction=False)
        for i in written:
            WRITES[i % len(WRITES)][1](values, f"w{i}")
        assert values.execute() == [WRITES[i % len(WRITES)][2](i) for i in written]
        assert all(e.startswith(("backing store unavailable", "LOADING")) for e in errors), errors[:5]
    messages = [r.getMessage() for r in caplog.records]
    assert any("embedded store exited unexpectedly" in m for m in messages)
    assert any("embedded store is back" in m for m in messages)


# --- atomic check-and-write --------------------------------------------------------------------------------------------


def _attempt(command: Callable[[], Any], barrier: threading.Barrier, results: list[bool]) -> None:
    """Run ``command`` once the other writer is ready too; record whether it won (wrote) or got WRONGTYPE."""
    barrier.wait(10)
    try:
        reply = command()
    except redis.ResponseError as exc:
        assert str(exc).startswith("WRONGTYPE"), exc
        results.append(False)
        return
    errors = [e for e in reply if isinstance(e, redis.ResponseError)] if isinstance(reply, list) else []
    assert all(str(e).startswith("WRONGTYPE") for e in errors), errors  # a DAG's PERSIST error element
    results.append(not errors)


def _race(first: Callable[[], Any], second: Callable[[], Any], reset: Callable[[], Any], rounds: int) -> None:
    """Run ``first`` and ``second`` at the same moment, ``rounds`` times: exactly one of them may succeed."""
    for _ in range(rounds):
        reset()
        barrier = threading.Barrier(2)
        results: list[bool] = []
        threads = [threading.Thread(target=_attempt, args=(c, barrier, results)) for c in (first, second)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(results) == [False, True], "both writers won: a key of the wrong kind was overwritten"


@pytest.fixture
def two_servers(embedded: RunningServer) -> Iterator[tuple[redis.Redis, redis.Redis]]:
    """A client of the embedded server and one of a second server in front of the same store."""
    url = f"unix://{_embedded(embedded).process.socket_path}"
    with running_server(Config(port=0, redis_url=url, shutdown_timeout=2.0)) as other:
        yield embedded.client(), other.client()


def test_racing_writers_on_two_servers_never_both_win(two_servers: tuple[redis.Redis, redis.Redis]) -> None:
    ours, theirs = two_servers
    ours.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_add())
    ours.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "VALUES", 1, 2)
    _race(lambda: ours.execute_command("AI.TENSORSET", "k", "FLOAT", 2, "VALUES", 1, 2),
          lambda: theirs.lpush("k", "x"), lambda: ours.delete("k"), rounds=150)
    _race(lambda: ours.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "k"),
          lambda: theirs.lpush("k", "x"), lambda: ours.delete("k"), rounds=150)
    _race(lambda: ours.execute_command("AI.DAGEXECUTE", "PERSIST", 1, "k", "|>", "AI.TENSORSET", "k", "FLOAT", 1,
                                       "VALUES", 1),
          lambda: theirs.lpush("k", "x"), lambda: ours.delete("k"), rounds=100)
    _race(lambda: theirs.execute_command("AI.MODELSTORE", "k", "TORCH", "CPU", "BLOB", torch_add()),
          lambda: ours.lpush("k", "x"), lambda: ours.delete("k"), rounds=30)


def test_tensorset_in_multi_checks_the_key_at_exec(embedded: RunningServer) -> None:
    conn = embedded.client()
    conn.lpush("list", "x")
    pipe = conn.pipeline(transaction=True)
    pipe.execute_command("AI.TENSORSET", "list", "FLOAT", 1, "VALUES", 1)
    pipe.execute_command("AI.TENSORSET", "fresh", "FLOAT", 1, "VALUES", 1)
    first, second = pipe.execute(raise_on_error=False)
    assert isinstance(first, redis.ResponseError) and str(first).startswith("WRONGTYPE")
    assert second == b"OK" and conn.type("list") == b"list"


def test_scripts_are_loaded_again_after_script_flush(embedded: RunningServer) -> None:
    conn = embedded.client()
    conn.script_flush()
    assert conn.execute_command("AI.TENSORSET", "t", "FLOAT", 1, "VALUES", 3) == b"OK"
    assert [float(v) for v in conn.execute_command("AI.TENSORGET", "t", "VALUES")] == [3]


def test_nothing_listens_on_tcp_for_the_store_even_to_raw_connects(embedded: RunningServer) -> None:
    """The store's own port is 0: no TCP port of this machine answers with the store's identity."""
    store = _embedded(embedded)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as direct:
        direct.connect(store.process.socket_path)
        direct.sendall(b"CONFIG GET port\r\n")
        assert direct.recv(100) == b"*2\r\n$4\r\nport\r\n$1\r\n0\r\n"


def test_raw_protocol_through_the_embedded_store(embedded: RunningServer) -> None:
    raw: RawClient = embedded.raw()
    assert raw.call(b"SET x 1\r\nGET x\r\n", b"+OK\r\n$1\r\n1\r\n") == b"+OK\r\n$1\r\n1\r\n"


def test_shutdown_stops_our_server_and_its_store_not_just_the_store(tmp_path: Path) -> None:
    port = free_port()
    with server_process("--port", str(port), "--dir", str(tmp_path)) as proc:
        wait_for_port(port)
        conn = redis.Redis(port=port)
        conn.execute_command("AI.TENSORSET", "kept", "FLOAT", 2, "BLOB", BLOB)
        store = _store_child(proc.pid)
        with pytest.raises(redis.ResponseError, match=r"^syntax error$"):
            conn.execute_command("SHUTDOWN", "SAVE", "NOSAVE")
        with pytest.raises(redis.ResponseError, match=r"^No shutdown in progress\.$"):
            conn.execute_command("SHUTDOWN", "ABORT")
        raw = RawClient(port)
        raw.send(b"SHUTDOWN\r\n")
        raw.sock.settimeout(30)
        assert raw.sock.recv(100) == b""  # closed without a reply, as redis-server 7 does
        raw.close()
        assert proc.wait(30) == 0
        assert not process_running(store)
    port = free_port()
    with server_process("--port", str(port), "--dir", str(tmp_path)):
        wait_for_port(port)
        assert redis.Redis(port=port).execute_command("AI.TENSORGET", "kept", "BLOB") == BLOB


def test_clients_cannot_take_the_private_store_out_of_our_hands(embedded: RunningServer) -> None:
    conn = embedded.client()
    for command in (("REPLICAOF", "127.0.0.1", "1"), ("CONFIG", "SET", "requirepass", "x"),
                    ("CONFIG", "SET", "maxmemory", "1gb", "unixsocketperm", "777"), ("ACL", "SETUSER", "eve", "on"),
                    ("MODULE", "LOAD", "/tmp/x.so")):  # (MODULE LIST is ours: the ai module)
        with pytest.raises(redis.ResponseError, match="is not allowed: the embedded store belongs to this server"):
            conn.execute_command(*command)
    assert conn.execute_command("CONFIG", "SET", "maxmemory", "1gb") == b"OK"
    assert conn.execute_command("ACL", "WHOAMI") == b"default"
    assert conn.execute_command("AI.TENSORSET", "t", "FLOAT", 1, "VALUES", 1) == b"OK"  # our links still log in
