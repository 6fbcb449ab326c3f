"""Commands we answer ourselves: AUTH, HELLO, PING, ECHO, QUIT, CLIENT, COMMAND, INFO."""

from __future__ import annotations

import pytest
import redis

from server.config import Config
from tests.support import RunningServer, running_server, wait_until


def test_ping_echo_quit_raw(server: RunningServer) -> None:
    raw = server.raw()
    expected = b"+PONG\r\n$2\r\nhi\r\n$3\r\nabc\r\n+OK\r\n"
    assert raw.call(b"PING\r\nPING hi\r\n*2\r\n$4\r\nECHO\r\n$3\r\nabc\r\nQUIT\r\n", expected) == expected
    assert raw.closed_by_peer()


def test_wrong_arity_names_redis_commands_by_their_table_name(server: RunningServer) -> None:
    """redis-server 7 names its own commands in lower case however they were typed (a module's command, AI.*,
    as typed: tests/conformance/test_tensor_errors.py); so do the ones this server answers itself."""
    raw = server.raw()
    for typed, named in ((b"eChO", b"echo"), (b"SELECT", b"select"), (b"Client", b"client")):
        expected = b"-ERR wrong number of arguments for '" + named + b"' command\r\n"
        assert raw.call(typed + b"\r\n", expected) == expected
    assert raw.call(b"PING\r\n", b"+PONG\r\n") == b"+PONG\r\n"


def test_auth_gate() -> None:
    with running_server(Config(port=0, requirepass="s3cret")) as running:
        raw = running.raw()
        noauth = b"-NOAUTH Authentication required.\r\n"
        assert raw.call(b"GET x\r\n", noauth) == noauth
        wrong = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
        assert raw.call(b"AUTH nope\r\n", wrong) == wrong
        assert raw.call(b"AUTH s3cret\r\nPING\r\n", b"+OK\r\n+PONG\r\n") == b"+OK\r\n+PONG\r\n"
        conn = running.client(password="s3cret")
        assert conn.set("a", "1") is True
        resp3 = redis.Redis(port=running.port, protocol=3, username="default", password="s3cret")
        assert resp3.get("a") == b"1"
        with pytest.raises(redis.AuthenticationError):
            running.client(password="bad").ping()


def test_auth_without_password_configured(server: RunningServer) -> None:
    """As redis-server 7 with no password: AUTH password is an error, but the default user named takes any
    password (so redis-py's username="default" connects) and another user is WRONGPASS. Named, it was refused."""
    with pytest.raises(redis.AuthenticationError, match="without any password configured"):
        server.client().execute_command("AUTH", "x")
    raw = server.raw()
    wrong = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    assert raw.call(b"AUTH default x\r\nAUTH bob x\r\n", b"+OK\r\n" + wrong) == b"+OK\r\n" + wrong
    resp3 = redis.Redis(port=server.port, protocol=3, username="default", password="anything")
    assert resp3.ping() is True
    resp3.close()


def test_hello_switches_protocol_and_sets_name(server: RunningServer) -> None:
    conn = server.client()
    reply = conn.execute_command("HELLO", "3", "SETNAME", "worker-1")
    assert reply[b"proto"] == 3 if isinstance(reply, dict) else 3 in reply
    assert conn.client_getname() == "worker-1" or conn.client_getname() == b"worker-1"
    with pytest.raises(redis.ResponseError, match="NOPROTO"):
        conn.execute_command("HELLO", "4")


def test_client_subcommands(server: RunningServer) -> None:
    one, two = server.client(), server.client()
    one.client_setname("first")
    assert one.client_getname() in ("first", b"first")
    one.execute_command("CLIENT", "SETINFO", "LIB-NAME", "mylib")
    id_two = two.client_id()
    listing = one.client_list()
    names = {entry["name"] for entry in listing}
    assert "first" in names
    assert any(entry.get("lib-name") == "mylib" for entry in listing)
    raw = server.raw()
    raw.send(b"PING\r\n")
    assert raw.read_exactly(b"+PONG\r\n") == b"+PONG\r\n"
    raw_id = max(entry_id for entry_id in (int(e["id"]) for e in one.client_list()))
    assert one.execute_command("CLIENT", "KILL", "ID", id_two) == 1
    assert all(int(entry["id"]) != id_two for entry in one.client_list())
    assert one.execute_command("CLIENT", "KILL", "ID", raw_id) == 1
    assert raw.closed_by_peer()
    with pytest.raises(redis.ResponseError, match="No such client"):
        one.execute_command("CLIENT", "KILL", "1.2.3.4:5")


def _fields(line: bytes) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in line.decode().split())


def test_client_info_and_list_fields_as_redis_7(server: RunningServer) -> None:
    """The subscription counts, the flags in Redis's order (P, x, t), redir (0 while tracking) and, in RESP3, a
    verbatim string (redis-py reads both into the same dict)."""
    raw = server.raw()
    raw.switch_to_resp3()
    raw.send(b"CLIENT INFO\r\n")
    reply = raw.read_until(b"\n\r\n")
    assert reply.startswith(b"=") and b"\r\ntxt:id=" in reply, reply
    fields = _fields(reply.split(b"txt:", 1)[1])
    assert (fields["flags"], fields["sub"], fields["psub"], fields["ssub"], fields["redir"]) == ("N", "0", "0", "0", "-1")
    raw.send(b"SUBSCRIBE a b\r\nPSUBSCRIBE p*\r\nSSUBSCRIBE s\r\nCLIENT TRACKING ON\r\nMULTI\r\n")
    assert raw.read_until(b"+OK\r\n+OK\r\n").endswith(b"+OK\r\n+OK\r\n")  # TRACKING's and MULTI's
    observer = server.client(protocol=3)
    listing = {int(entry["id"]): entry for entry in observer.client_list()}
    mine = [entry for entry in listing.values() if entry["flags"] != "N"]
    assert len(mine) == 1 and mine[0]["flags"] == "Pxt", listing
    assert (mine[0]["sub"], mine[0]["psub"], mine[0]["ssub"], mine[0]["redir"]) == ("2", "1", "1", "0")
    raw.send(b"DISCARD\r\nCLIENT TRACKING OFF\r\nUNSUBSCRIBE a\r\n")
    raw.read_until(b"unsubscribe")
    assert wait_until(lambda: any(e["flags"] == "P" and e["sub"] == "1" and e["redir"] == "-1"
                                  for e in observer.client_list()))
    plain = server.raw()  # RESP2: a bulk string; what relayed commands pipelined before it changed is in it
    plain.send(b"MULTI\r\nSELECT 5\r\nEXEC\r\nCLIENT TRACKING ON\r\nCLIENT INFO\r\n")
    reply = plain.read_until(b"\n\r\n")
    assert reply.startswith(b"+OK\r\n+QUEUED\r\n*1\r\n+OK\r\n+OK\r\n$"), reply
    fields = _fields(reply.split(b"\r\n")[-2])
    assert (fields["db"], fields["flags"], fields["redir"]) == ("5", "t", "0")


def test_command_count_info_docs_getkeys(server: RunningServer) -> None:
    conn = server.client()
    count = conn.command_count()
    assert count > 100
    info = conn.execute_command("COMMAND INFO", "PING", "GET")
    assert [entry[0] for entry in info] == [b"ping", b"get"]
    assert info[0][1] == -1
    docs = conn.execute_command("COMMAND DOCS", "PING")
    assert b"ping" in docs
    everything = conn.command()
    assert "ping" in everything and "get" in everything
    with pytest.raises(redis.ResponseError, match="no key arguments"):
        conn.execute_command("COMMAND", "GETKEYS", "PING")
    assert conn.execute_command("COMMAND GETKEYS", "GET", "k1") in (["k1"], [b"k1"])


def test_info_sections(server: RunningServer) -> None:
    conn = server.client()
    conn.set("a", "1")
    conn.set("b", "2")
    info = conn.info()
    assert info["redisai_server_version"]
    assert info["connected_clients"] >= 1
    assert info["db0"]["keys"] == 2
    assert "total_commands_processed" in conn.info("stats")
    resp3 = server.client(protocol=3)
    assert resp3.info("keyspace")["db0"]["keys"] == 2


def test_client_kill_by_type_and_user(server: RunningServer) -> None:
    """CLIENT KILL TYPE pubsub|normal picks clients as CLIENT LIST TYPE does, and USER names a user that must
    exist, as in redis-server 7 (TYPE was a syntax error; USER nouser killed nothing, no error)."""
    killer, subscriber = server.client(), server.raw()
    assert subscriber.call(b"SUBSCRIBE news\r\n", b"*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n")
    assert killer.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes") == 0
    assert killer.execute_command("CLIENT", "KILL", "TYPE", "pubsub") == 1
    assert subscriber.closed_by_peer()
    with pytest.raises(redis.ResponseError, match=r"^Unknown client type 'bogus'$"):
        killer.execute_command("CLIENT", "KILL", "TYPE", "bogus")
    with pytest.raises(redis.ResponseError, match=r"^No such user 'nouser'$"):
        killer.execute_command("CLIENT", "KILL", "USER", "nouser")
    assert killer.execute_command("CLIENT", "KILL", "USER", "default") == 0  # itself skipped; nobody else
