"""The real command line: redisai-server as a process, redis-cli against it, SIGTERM with work in flight."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
import redis

from tests.support import free_port, server_process, wait_for_port, wait_until


def test_help_lists_the_options() -> None:
    out = subprocess.run([sys.executable, "-m", "server", "--help"], capture_output=True, text=True, check=True)
    for option in ("--bind", "--port", "--unixsocket", "--redis-url", "--requirepass", "--threads-per-queue",
                   "--log-level", "--tls-cert-file", "--tls-key-file"):
        assert option in out.stdout


def test_bad_option_value_exits_with_an_error() -> None:
    out = subprocess.run([sys.executable, "-m", "server", "--redis-url", "http://x"], capture_output=True, text=True)
    assert out.returncode == 1
    assert "redis-url" in out.stderr


@pytest.mark.parametrize("store", ["embedded", "redis"])
def test_redis_cli_against_the_process(store: str, request: pytest.FixtureRequest) -> None:
    if shutil.which("redis-cli") is None:
        pytest.fail("redis-cli is required (Debian package redis-server / redis-tools)")
    port = free_port()
    extra = ["--redis-url", request.getfixturevalue("real_redis_url")] if store == "redis" else []
    with server_process("--port", str(port), *extra):
        wait_for_port(port)
        cli = ["redis-cli", "-p", str(port)]
        assert subprocess.run([*cli, "SET", "greeting", "hello world"], capture_output=True, text=True).stdout == "OK\n"
        assert subprocess.run([*cli, "GET", "greeting"], capture_output=True, text=True).stdout == "hello world\n"
        assert subprocess.run([*cli, "-3", "HGETALL", "nothing"], capture_output=True, text=True).stdout.strip() in (
            "(empty hash)", "")
        piped = subprocess.run(cli, input="PING\nINCR counter\nINCR counter\n", capture_output=True, text=True)
        assert piped.stdout.split() == ["PONG", "1", "2"]


def test_config_file_and_environment(tmp_path: pytest.TempPathFactory) -> None:
    port, env_port = free_port(), free_port()
    conf = tmp_path / "server.conf"  # type: ignore[operator]
    conf.write_text(f"# a comment\nport {port}\nrequirepass fromfile\n")
    with server_process(str(conf)):
        wait_for_port(port)
        assert redis.Redis(port=port, password="fromfile").ping() is True
    with server_process(str(conf), env={"REDISAI_PORT": str(env_port)}):
        wait_for_port(env_port)
        assert redis.Redis(port=env_port, password="fromfile").ping() is True


def test_unix_socket(tmp_path: pytest.TempPathFactory) -> None:
    path = str(tmp_path / "redisai.sock")  # type: ignore[operator]
    with server_process("--port", str(free_port()), "--unixsocket", path) as proc:
        deadline = time.monotonic() + 10
        while not os.path.exists(path) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        conn = redis.Redis(unix_socket_path=path)
        assert conn.set("via-unix", "1") is True
        assert conn.get("via-unix") == b"1"


def test_sigterm_finishes_in_flight_commands_then_exits() -> None:
    port = free_port()
    with server_process("--port", str(port), "--shutdown-timeout", "5") as proc:
        wait_for_port(port)
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"BLPOP nothing 1\r\n")
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        sock.settimeout(5)
        assert sock.recv(100) == b"*-1\r\n"
        assert proc.wait(10) == 0


def test_sigterm_does_not_wait_for_a_client_blocked_for_ever() -> None:
    """A BLPOP with no timeout never ends by itself: graceful shutdown closes its client at once, as Redis
    does (a BLPOP with a timeout is still answered: the test above), rather than waiting out a long
    --shutdown-timeout (here 600 s; the test's own bound is 60)."""
    port = free_port()
    with server_process("--port", str(port), "--shutdown-timeout", "600") as proc:
        wait_for_port(port)
        blocked = socket.create_connection(("127.0.0.1", port))
        blocked.sendall(b"BLPOP nothing 0\r\n")
        pipelined = socket.create_connection(("127.0.0.1", port))
        pipelined.sendall(b"WATCH x\r\nBLPOP nothing 0\r\nPING\r\n")  # its own session; PING behind it
        # and commands that wait for the client's relayed ones before they start (INFO, CLIENT, TYPE …)
        held = socket.create_connection(("127.0.0.1", port))
        held.sendall(b"BLPOP nothing 0\r\nCLIENT ID\r\nINFO\r\n")
        assert wait_until(lambda: redis.Redis(port=port).info("clients")["blocked_clients"] == 3)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        blocked.settimeout(10)
        pipelined.settimeout(10)
        assert blocked.recv(100) == b""
        assert pipelined.recv(100) in (b"+OK\r\n", b"")  # the WATCH's reply, then closed
        held.settimeout(10)
        assert held.recv(100) == b""
        blocked.close()
        pipelined.close()
        held.close()


def test_sighup_is_logged_and_ignored() -> None:
    port = free_port()
    with server_process("--port", str(port)) as proc:
        wait_for_port(port)
        conn = redis.Redis(port=port)
        assert conn.set("before", "1") is True
        proc.send_signal(signal.SIGHUP)
        assert wait_until(lambda: conn.ping() is True)  # still serving, the store's keys still there
        assert conn.get("before") == b"1" and proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        output = proc.stdout.read().decode() if proc.stdout is not None else ""
        assert "received SIGHUP: ignored" in output
