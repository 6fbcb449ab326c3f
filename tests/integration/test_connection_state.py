"""Connection state kept right: RESET, SELECT inside MULTI, CLIENT REPLY, push order, unauthenticated limits,
and a blocked client that disconnects."""

from __future__ import annotations

import socket
import time

import pytest
import redis

from server.config import Config
from server.store.embedded import EmbeddedStore
from tests.support import RunningServer, running_server


def test_reset_returns_to_a_fresh_resp2_connection(server: RunningServer) -> None:
    raw = server.raw()
    raw.switch_to_resp3()
    expected = b"+RESET\r\n$-1\r\n"
    assert raw.call(b"SELECT 2\r\nRESET\r\nGET nokey\r\n", b"+OK\r\n" + expected) == b"+OK\r\n" + expected


def test_pushes_never_overtake_earlier_replies(server: RunningServer) -> None:
    raw = server.raw()
    expected = b"+OK\r\n+RESET\r\n*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"
    assert raw.call(b"SET a 1\r\nRESET\r\nSUBSCRIBE ch\r\n", expected) == expected


def test_select_inside_multi_takes_effect_at_exec(server: RunningServer) -> None:
    raw = server.raw()
    expected = b"+OK\r\n+QUEUED\r\n*1\r\n+OK\r\n+OK\r\n:1\r\n"
    got = raw.call(b"MULTI\r\nSELECT 5\r\nEXEC\r\nAI.TENSORSET t FLOAT 1 VALUES 1\r\nEXISTS t\r\n", expected)
    assert got == expected
    assert server.client(db=5).exists("t") == 1
    expected = b"+OK\r\n+QUEUED\r\n-ERR HELLO cannot be queued in MULTI by this server\r\n"
    assert raw.call(b"MULTI\r\nSET h 1\r\nHELLO 3\r\n", expected) == expected
    aborted = raw.call(b"EXEC\r\n", b"-EXECABORT")
    assert aborted.startswith(b"-EXECABORT")  # a queue-time error fails the whole transaction, as in Redis
    assert server.client().get("h") is None


def test_client_reply_off_skip_on(server: RunningServer) -> None:
    raw = server.raw()
    assert raw.call(b"CLIENT REPLY SKIP\r\nSET a 1\r\nGET a\r\n", b"$1\r\n1\r\n") == b"$1\r\n1\r\n"
    raw.send(b"CLIENT REPLY OFF\r\nAI.TENSORSET t FLOAT 1 VALUES 7\r\nSET b 2\r\nCLIENT REPLY ON\r\n")
    assert raw.read_exactly(b"+OK\r\n") == b"+OK\r\n"
    assert raw.call(b"AI.TENSORGET t VALUES\r\n", b"*1\r\n$1\r\n7\r\n") == b"*1\r\n$1\r\n7\r\n"


def test_unauthenticated_clients_may_only_send_small_requests() -> None:
    with running_server(Config(port=0, requirepass="pw")) as server:
        raw = server.raw()
        expected = b"-ERR Protocol error: unauthenticated multibulk length\r\n"
        assert raw.call(b"*11\r\n", expected) == expected
        assert raw.closed_by_peer()
        raw = server.raw()
        expected = b"-ERR Protocol error: unauthenticated bulk length\r\n"
        assert raw.call(b"*2\r\n$4\r\nAUTH\r\n$20000\r\n", expected) == expected
        authed = server.raw()
        request = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$20000\r\n" + b"x" * 20000 + b"\r\n"
        assert authed.call(b"AUTH pw\r\n" + request, b"+OK\r\n+OK\r\n") == b"+OK\r\n+OK\r\n"


@pytest.mark.parametrize("store", ["embedded"])
def test_blocked_client_that_disconnects_leaves_nothing_behind(store: str) -> None:
    with running_server(Config(port=0)) as server:
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(b"BLPOP q 0\r\n")
        time.sleep(0.2)
        sock.close()
        time.sleep(0.3)
        embedded = server.server.ctx.store
        assert isinstance(embedded, EmbeddedStore)
        direct = redis.Redis(unix_socket_path=embedded.process.socket_path)
        assert direct.info("clients")["blocked_clients"] == 0  # its upstream connection was closed with it
        conn = server.client()
        conn.rpush("q", "job")
        assert conn.lrange("q", 0, -1) == [b"job"]  # nobody took it: the gone client no longer waits


def test_ai_commands_inside_multi(server: RunningServer) -> None:
    raw = server.raw()
    queued = b"+OK\r\n" + b"+QUEUED\r\n" * 5
    request = (b"MULTI\r\nAI.MODELEXECUTE no_model INPUTS 1 x OUTPUTS 1 y\r\nAI.TENSORSET t FLOAT 1 VALUES 3\r\n"
               b"AI.TENSORSET bad FLOAT\r\nSET k v\r\nAI.MODELGET m\r\n")
    assert raw.call(request, queued) == queued
    expected = (b"*5\r\n-ERR Cannot run RedisAI command within a transaction or a LUA script\r\n+OK\r\n"
                b"-ERR wrong number of arguments for 'AI.TENSORSET' command\r\n+OK\r\n"
                b"-ERR model key is empty\r\n")  # queued and run at EXEC, as RedisAI runs it
    assert raw.call(b"EXEC\r\n", expected) == expected
    assert raw.call(b"AI.TENSORGET t VALUES\r\n", b"*1\r\n$1\r\n3\r\n") == b"*1\r\n$1\r\n3\r\n"
    assert raw.call(b"MULTI\r\nAI.DAGRUN |> AI.TENSORGET t\r\nDISCARD\r\nPING\r\n",
                    b"+OK\r\n+QUEUED\r\n+OK\r\n+PONG\r\n") == b"+OK\r\n+QUEUED\r\n+OK\r\n+PONG\r\n"


def test_watch_abort_keeps_exec_null_and_the_database(server: RunningServer) -> None:
    raw, other = server.raw(), server.client()
    raw.call(b"SET k 1\r\n", b"+OK\r\n")
    queued = b"+OK\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n"
    assert raw.call(b"WATCH k\r\nMULTI\r\nSELECT 5\r\nAI.MODELEXECUTE m INPUTS 1 a OUTPUTS 1 b\r\n", queued) == queued
    other.set("k", "changed")
    assert raw.call(b"EXEC\r\n", b"*-1\r\n") == b"*-1\r\n"  # aborted: null, not an empty array
    assert raw.call(b"CLIENT INFO\r\n", b"$").startswith(b"$")
    raw.send(b"AI.TENSORSET t FLOAT 1 VALUES 1\r\n")
    raw.read_exactly(b"+OK\r\n")
    assert server.client(db=0).exists("t") == 1 and server.client(db=5).exists("t") == 0


def test_reset_answers_even_after_client_reply_off(server: RunningServer) -> None:
    raw = server.raw()
    assert raw.call(b"CLIENT REPLY OFF\r\nRESET\r\nPING\r\n", b"+RESET\r\n+PONG\r\n") == b"+RESET\r\n+PONG\r\n"
