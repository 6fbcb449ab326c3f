"""A script that never returns cannot hold its device queue: TIMEDOUT at the deadline, a fresh worker thread
serves the queue meanwhile, and the abandoned thread is counted (dag/watchdog.py). No wall-clock thresholds:
each check is a reply text, a counter, or an order of events the test controls."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator

import pytest
import redis
import torch

from server.config import Config
from tests.models import torch_double, torch_slow
from tests.support import RunningServer, free_port, running_server, server_process, wait_for_port, wait_until

# Loops for ever; every 1000 rounds it calls the store, which is where a given-up run is stopped.
SPIN = """
def spin(tensors: List[Tensor], keys: List[str], args: List[str]):
    x = tensors[0]
    i = 0
    while True:
        i += 1
        x = x + 1
        if i % 1000 == 0:
            redis.execute("EXISTS", "spin-probe")
    return x

def ok(tensors: List[Tensor], keys: List[str], args: List[str]):
    return tensors[0] + 1
"""

# Loops for ever too, but holds inside testhold::wait until the test lets it go: it is provably still running
# while the test checks that others are served.
HELD = """
def held(tensors: List[Tensor], keys: List[str], args: List[str]):
    x = tensors[0]
    while True:
        x = torch.ops.testhold.wait(x)
        redis.execute("EXISTS", "held-probe")
    return x
"""


def _info(conn: redis.Redis) -> dict[str, object]:
    return conn.info("ai")


def _store_spin(conn: redis.Redis) -> None:
    conn.execute_command("AI.SCRIPTSTORE", "s", "CPU", "ENTRY_POINTS", 2, "spin", "ok", "SOURCE", SPIN)
    conn.execute_command("AI.TENSORSET", "x", "FLOAT", 1, "VALUES", 1)


def _spin(conn: redis.Redis, *timeout: object) -> object:
    return conn.execute_command("AI.SCRIPTEXECUTE", "s", "spin", "INPUTS", 1, "x", "OUTPUTS", 1, "y", *timeout)


def test_a_runaway_script_is_answered_timedout_and_the_queue_goes_on(server: RunningServer) -> None:
    conn = server.client()
    _store_spin(conn)
    assert _spin(conn, "TIMEOUT", 200) == b"TIMEDOUT"
    assert conn.exists("y") == 0
    # the abandoned thread is stopped at its next store call; a fresh worker serves the queue
    assert wait_until(lambda: _info(conn)["ai_workers_stuck"] == 0)
    assert _info(conn)["ai_workers_abandoned"] == 1
    assert conn.execute_command("AI.SCRIPTEXECUTE", "s", "ok", "INPUTS", 1, "x", "OUTPUTS", 1, "z") == b"OK"
    assert conn.execute_command("AI.TENSORGET", "z", "VALUES") == [b"2"]


def test_the_server_limit_covers_runs_without_timeout(server: RunningServer) -> None:
    conn = server.client()
    _store_spin(conn)
    assert conn.execute_command("AI.CONFIG", "GET", "SCRIPT_EXECUTION_TIMEOUT") == 60_000
    assert conn.execute_command("AI.CONFIG", "SCRIPT_EXECUTION_TIMEOUT", 200) == b"OK"
    assert conn.execute_command("AI.CONFIG", "GET", "SCRIPT_EXECUTION_TIMEOUT") == 200
    assert _info(conn)["ai_script_execution_timeout"] == 200
    assert _spin(conn) == b"TIMEDOUT"
    assert conn.execute_command("AI.SCRIPTEXECUTE", "s", "ok", "INPUTS", 1, "x", "OUTPUTS", 1, "z") == b"OK"
    with pytest.raises(redis.ResponseError, match="must be a non-negative integer"):
        conn.execute_command("AI.CONFIG", "SCRIPT_EXECUTION_TIMEOUT", -1)


def test_a_runaway_script_in_a_dag_times_out_and_persists_nothing(server: RunningServer) -> None:
    conn = server.client()
    _store_spin(conn)
    reply = conn.execute_command("AI.DAGEXECUTE", "LOAD", 1, "x", "PERSIST", 1, "out", "TIMEOUT", 200, "|>",
                                 "AI.SCRIPTEXECUTE", "s", "spin", "INPUTS", 1, "x", "OUTPUTS", 1, "out")
    assert reply == b"TIMEDOUT"
    assert conn.exists("out") == 0


class Hold:
    """testhold::wait(Tensor x) -> Tensor: sets ``entered``, then blocks its caller until ``release`` is set."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()

    def wait(self, x: torch.Tensor) -> torch.Tensor:
        self.entered.set()
        self.release.wait(60)
        return x


@pytest.fixture
def hold() -> Iterator[Hold]:
    held = Hold()
    library = torch.library.Library("testhold", "DEF")
    library.define("wait(Tensor x) -> Tensor")
    library.impl("wait", held.wait, "CPU")
    yield held
    held.release.set()
    library._destroy()


def test_others_are_served_while_the_runaway_still_runs(hold: Hold) -> None:
    with running_server(Config(port=0, script_allow_ops="testhold::wait")) as server:
        conn, other = server.client(), server.client()
        conn.execute_command("AI.SCRIPTSTORE", "h", "CPU", "ENTRY_POINTS", 1, "held", "SOURCE", HELD)
        conn.execute_command("AI.TENSORSET", "x", "FLOAT", 1, "VALUES", 1)
        other.execute_command("AI.MODELSTORE", "m", "TORCH", "CPU", "BLOB", torch_double())
        assert conn.execute_command("AI.SCRIPTEXECUTE", "h", "held", "INPUTS", 1, "x", "OUTPUTS", 1, "y",
                                    "TIMEOUT", 200) == b"TIMEDOUT"
        assert _info(other)["ai_workers_stuck"] == 1  # the held thread cannot have returned: nothing released it
        other.execute_command("AI.TENSORSET", "in", "FLOAT", 1, 4, "VALUES", 1, 2, 3, 4)
        # a model's first run always goes to a worker (dag/inline.py): the fresh thread answers it
        assert other.execute_command("AI.MODELEXECUTE", "m", "INPUTS", 1, "in", "OUTPUTS", 1, "out") == b"OK"
        assert other.exists("out") == 1
        info = _info(other)
        assert (info["ai_workers_stuck"], info["ai_workers_abandoned"]) == (1, 1)
        hold.release.set()  # the held op returns; the script's next store call ends it; the thread exits
        assert wait_until(lambda: _info(other)["ai_workers_stuck"] == 0)


HELD_ONCE = """
def once(tensors: List[Tensor], keys: List[str], args: List[str]):
    return torch.ops.testhold.wait(tensors[0])

def ok(tensors: List[Tensor], keys: List[str], args: List[str]):
    return tensors[0] + 1
"""


def test_a_run_waiting_behind_a_long_op_is_answered_timedout_at_its_deadline(hold: Hold) -> None:
    """The worker is busy (not stuck past any deadline: its run has none); a run queued behind it with TIMEOUT
    is taken out of the queue at its deadline and answered, while the long op goes on and then ends well."""
    with running_server(Config(port=0, script_allow_ops="testhold::wait")) as server:
        conn, other = server.client(), server.client()
        conn.execute_command("AI.SCRIPTSTORE", "h", "CPU", "ENTRY_POINTS", 2, "once", "ok", "SOURCE", HELD_ONCE)
        conn.execute_command("AI.TENSORSET", "x", "FLOAT", 1, "VALUES", 1)
        replies: list[object] = []
        long_run = threading.Thread(target=lambda: replies.append(conn.execute_command(
            "AI.SCRIPTEXECUTE", "h", "once", "INPUTS", 1, "x", "OUTPUTS", 1, "y")))
        long_run.start()
        assert hold.entered.wait(30)  # the worker is inside the held op
        assert other.execute_command("AI.SCRIPTEXECUTE", "h", "ok", "INPUTS", 1, "x", "OUTPUTS", 1, "z",
                                     "TIMEOUT", 200) == b"TIMEDOUT"
        assert other.exists("z") == 0 and not replies  # answered while the long run still holds the worker
        info = _info(other)
        assert (info["ai_workers_abandoned"], info["ai_queue_CPU"]["length"]) == (0, 0)
        hold.release.set()
        long_run.join(30)
        assert replies == [b"OK"] and other.execute_command("AI.TENSORGET", "y", "VALUES") == [b"1"]


PURE_SPIN = """
def spin(tensors: List[Tensor], keys: List[str], args: List[str]):
    x = tensors[0]
    while True:
        x = x + 1
    return x
"""


def test_a_process_with_a_thread_that_never_returns_still_shuts_down_cleanly() -> None:
    """Pure compute cannot be interrupted: the thread spins until the process ends, which it then does at once
    and with status 0 (torch would abort a normal interpreter exit with that thread inside TorchScript)."""
    port = free_port()
    with server_process("--port", str(port)) as proc:
        wait_for_port(port, timeout=60)
        conn = redis.Redis(port=port, socket_timeout=30)
        conn.execute_command("AI.SCRIPTSTORE", "s", "CPU", "ENTRY_POINTS", 1, "spin", "SOURCE", PURE_SPIN)
        conn.execute_command("AI.TENSORSET", "x", "FLOAT", 1, "VALUES", 1)
        assert _spin(conn, "TIMEOUT", 200) == b"TIMEDOUT"
        assert _info(conn)["ai_workers_stuck"] == 1
        assert conn.execute_command("AI.SCRIPTEXECUTE", "s", "spin", "INPUTS", 1, "x", "OUTPUTS", 1, "y",
                                    "TIMEOUT", 200) == b"TIMEDOUT"
        assert _info(conn)["ai_workers_stuck"] == 2  # the fresh thread took the second run, and is stuck too
        conn.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        output = proc.stdout.read().decode() if proc.stdout else ""
        assert "ran past its deadline" in output and "exiting past 2 worker thread(s)" in output


def test_the_longest_timeout_kills_neither_a_worker_nor_the_watchdog(server: RunningServer) -> None:
    """Found by the fuzz: TIMEOUT 9223372036854775807 made a wait threading cannot represent; the watchdog and a
    worker waiting for another device's output died of OverflowError, and that DAG was never answered."""
    conn = server.client()
    _store_spin(conn)
    conn.execute_command("AI.MODELSTORE", "slow", "TORCH", "CPU:0", "BLOB", torch_slow())
    conn.execute_command("AI.MODELSTORE", "double", "TORCH", "CPU:1", "BLOB", torch_double())
    conn.execute_command("AI.TENSORSET", "big", "FLOAT", 128, 128, "BLOB", bytes(128 * 128 * 4))
    reply = conn.execute_command("AI.DAGEXECUTE", "LOAD", 1, "big", "TIMEOUT", 2**63 - 1,
                                 "|>", "AI.MODELEXECUTE", "slow", "INPUTS", 1, "big", "OUTPUTS", 1, "y",
                                 "|>", "AI.MODELEXECUTE", "double", "INPUTS", 1, "y", "OUTPUTS", 1, "z",
                                 "|>", "AI.TENSORGET", "z", "META")
    assert reply == [b"OK", b"OK", [b"dtype", b"FLOAT", b"shape", [128, 128]]]
    assert conn.execute_command("AI.MODELEXECUTE", "double", "INPUTS", 1, "x", "OUTPUTS", 1, "w") == b"OK"
    assert _spin(conn, "TIMEOUT", 200) == b"TIMEDOUT"  # the watchdog is still there
