"""``--workers N``: N processes on one port and one store (server/supervisor.py), agreeing through the store,
restarted when they die, and gone when the supervisor goes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
import redis

from tests.models import torch_add
from tests.support import child_pids, free_port, process_running, server_process, wait_for_port, wait_until


@pytest.fixture
def workers() -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = free_port()
    with server_process("--port", str(port), "--workers", "2") as proc:
        wait_for_port(port)
        assert wait_until(lambda: len(child_pids(proc.pid)) == 3)  # the store and two workers
        assert wait_until(lambda: len({_pid_of_a_connection(port) for _ in range(10)}) == 2)  # both listen
        yield proc, port


def _pid_of_a_connection(port: int) -> int:
    conn = redis.Redis(port=port)
    try:
        return int(conn.info("server")["process_id"])
    finally:
        conn.close()


def test_connections_spread_over_the_workers_which_agree_through_the_store(
        workers: tuple[subprocess.Popen[bytes], int]) -> None:
    proc, port = workers
    seen: set[int] = set()

    def both_answer() -> bool:  # a worker process may exist a while before it listens
        seen.update(_pid_of_a_connection(port) for _ in range(10))
        return len(seen) == 2

    assert wait_until(both_answer) and seen <= set(child_pids(proc.pid))
    setup = redis.Redis(port=port)
    setup.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_add())
    setup.execute_command("AI.TENSORSET", "a", "FLOAT", 2, "VALUES", 1, 2)
    for _ in range(20):  # fresh connections: some land on each worker
        conn = redis.Redis(port=port)
        assert conn.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 2, "a", "a", "OUTPUTS", 1, "c") == b"OK"
        conn.close()
    for _ in range(6):
        conn = redis.Redis(port=port)
        info = conn.execute_command("AI.INFO", "m")
        assert info[info.index(b"calls") + 1] == 20
        assert [entry[0] for entry in conn.execute_command("AI._MODELSCAN")] == [b"m"]
        conn.close()


def test_a_killed_worker_is_replaced(workers: tuple[subprocess.Popen[bytes], int]) -> None:
    proc, port = workers
    victim = _pid_of_a_connection(port)
    os.kill(victim, signal.SIGKILL)
    assert wait_until(lambda: victim not in child_pids(proc.pid) and len(child_pids(proc.pid)) == 3)
    assert redis.Redis(port=port).ping() is True
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=60)[0].decode(errors="replace")
    assert f"(pid {victim}) stopped (killed by signal 9 (SIGKILL)); starting it again" in output, output[-2000:]


def test_sigterm_stops_every_worker_and_the_store(workers: tuple[subprocess.Popen[bytes], int]) -> None:
    proc, _port = workers
    children = child_pids(proc.pid)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    assert wait_until(lambda: not any(process_running(pid) for pid in children))


def test_nothing_outlives_a_killed_supervisor(workers: tuple[subprocess.Popen[bytes], int]) -> None:
    proc, _port = workers
    children = child_pids(proc.pid)
    proc.kill()
    proc.wait(30)
    assert wait_until(lambda: not any(process_running(pid) for pid in children))


def test_a_unix_socket_needs_a_single_process() -> None:
    out = subprocess.run([sys.executable, "-m", "server", "--port", str(free_port()), "--workers", "2",
                          "--unixsocket", "/tmp/x.sock"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "unixsocket cannot be used with workers > 1" in out.stderr


def test_client_ids_are_unique_across_the_workers(workers: tuple[subprocess.Popen[bytes], int]) -> None:
    """CLIENT ID names one client of the server (CLIENT KILL ID …): the workers share the port, so their ids
    must not meet — worker i hands out i+1, i+1+N, …"""
    _proc, port = workers
    conns = [redis.Redis(port=port) for _ in range(16)]
    seen = [(int(conn.info("server")["process_id"]), int(conn.client_id())) for conn in conns]
    assert len({pid for pid, _id in seen}) == 2, "both workers took connections"  # (16 tries: 2**-15 to miss)
    assert len({client_id for _pid, client_id in seen}) == len(seen), seen
    for conn in conns:
        conn.close()


def test_workers_that_cannot_start_make_the_supervisor_give_up() -> None:
    """A store that refuses every connection: each worker exits at once. The supervisor stops after a few
    restarts in a row and exits 1, as a single process does, instead of restarting them for ever; each exit is
    reported as an exit code, not a raw wait status."""
    port = free_port()
    closed = free_port()  # nothing listens there
    out = subprocess.run([sys.executable, "-m", "server", "--port", str(port), "--bind", "127.0.0.1",
                          "--workers", "2", "--redis-url", f"redis://127.0.0.1:{closed}"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr[-2000:]
    assert "times in a row" in out.stderr and "giving up" in out.stderr
    assert "(exit code 1)" in out.stderr and "status 256" not in out.stderr


def test_a_store_that_never_answers_stops_the_supervisor_with_one_line() -> None:
    """A store that accepts connections and never replies, with --store-timeout-ms longer than the 2 s a start
    may take: the supervisor exits 1 with the store's one line, not a loop of workers started again. (A worker
    exit within the store's time limit plus 2 s counts as a failed start: ``Supervisor._stable_after``.)"""
    port = free_port()
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        out = subprocess.run([sys.executable, "-m", "server", "--port", str(port), "--bind", "127.0.0.1",
                              "--workers", "1", "--store-timeout-ms", "2500",
                              "--redis-url", f"redis://127.0.0.1:{silent.getsockname()[1]}"],
                             capture_output=True, text=True, timeout=110)
    assert out.returncode == 1, out.stderr[-2000:]
    assert "did not answer within 2500 ms (--store-timeout-ms)" in out.stderr and "Traceback" not in out.stderr


def test_a_port_in_use_is_refused_by_the_supervisor_as_by_one_process() -> None:
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        out = subprocess.run([sys.executable, "-m", "server", "--port", str(port), "--bind", "127.0.0.1",
                              "--workers", "2"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr[-2000:]
    assert "address already in use" in out.stderr and "giving up" not in out.stderr


def test_a_restarted_worker_never_hands_out_an_earlier_client_id(
        workers: tuple[subprocess.Popen[bytes], int]) -> None:
    """Redis never gives a CLIENT ID twice; a worker started again after it died began again at i+1, naming
    clients its dead predecessor had served (a CLIENT KILL ID kept from then would hit a new client)."""
    proc, port = workers
    conn = redis.Redis(port=port)
    victim, given = int(conn.info("server")["process_id"]), int(conn.client_id())
    before = set(child_pids(proc.pid))
    os.kill(victim, signal.SIGKILL)
    assert wait_until(lambda: victim not in child_pids(proc.pid) and len(child_pids(proc.pid)) == 3)
    (replacement,) = set(child_pids(proc.pid)) - before
    first_ids: list[int] = []

    def reached_the_replacement() -> bool:  # each connection lands on either worker; the first on the new one
        other = redis.Redis(port=port)
        if int(other.info("server")["process_id"]) == replacement:
            first_ids.append(int(other.client_id()))
        other.close()
        return bool(first_ids)

    assert wait_until(reached_the_replacement)
    assert first_ids[0] > given, (first_ids, given)


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def _seen_blocked(port: int) -> bool:
    """A BLPOP is listed by a connection that landed on the same worker (any worker: try until one does)."""
    other = redis.Redis(port=port)
    listed = [client.get("cmd") for client in other.client_list()]
    other.close()
    return "blpop" in listed


def test_a_second_sigterm_stops_the_draining_workers_at_once() -> None:
    """As one process does: the first SIGTERM lets in-flight commands finish (a BLPOP with a timeout is waited
    for, up to --shutdown-timeout); a second one while the workers drain stops them at once. The supervisor
    ignored it and waited the drain out (here two minutes)."""
    port = free_port()
    with server_process("--port", str(port), "--workers", "2", "--shutdown-timeout", "120") as proc:
        wait_for_port(port)
        assert wait_until(lambda: len(child_pids(proc.pid)) == 3)
        blocked = socket.create_connection(("127.0.0.1", port))
        blocked.sendall(b"*3\r\n$5\r\nBLPOP\r\n$9\r\nnever-set\r\n$3\r\n120\r\n")

        assert wait_until(lambda: _seen_blocked(port))
        proc.send_signal(signal.SIGTERM)
        assert wait_until(lambda: _refused(port))  # both workers stopped listening: they drain
        assert proc.poll() is None  # the blocked client holds one of them
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        blocked.settimeout(30)
        assert blocked.recv(100) == b""  # closed, unanswered
        blocked.close()


def test_ctrl_c_to_the_process_group_drains_the_workers_as_one_process_does() -> None:
    """A terminal's Ctrl-C sends SIGINT to its whole foreground process group. The workers shared the
    supervisor's group, so each got that SIGINT and then the supervisor's SIGTERM: a second signal, which
    skips the drain, and a BLPOP with a timeout was closed unanswered at once. Now the workers have groups of
    their own: the BLPOP is answered (nil, at its timeout), then everything exits."""
    port = free_port()
    with server_process("--port", str(port), "--workers", "2", "--shutdown-timeout", "60",
                        new_session=True) as proc:
        wait_for_port(port)
        assert wait_until(lambda: len(child_pids(proc.pid)) == 3)
        blocked = socket.create_connection(("127.0.0.1", port))
        blocked.sendall(b"*3\r\n$5\r\nBLPOP\r\n$9\r\nnever-set\r\n$1\r\n3\r\n")
        assert wait_until(lambda: _seen_blocked(port))
        os.killpg(proc.pid, signal.SIGINT)
        blocked.settimeout(60)
        assert blocked.recv(100) == b"*-1\r\n"
        assert proc.wait(60) == 0
        blocked.close()
