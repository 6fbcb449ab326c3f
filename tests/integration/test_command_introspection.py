"""COMMAND for the AI commands: key specs (INFO), GETKEYS, DOCS, LIST FILTERBY and COUNT, in Redis 7's shapes.

Every shape is compared with what a real redis-server answers for its own commands of the same kind
(ZUNIONSTORE: a key, then a count and keys; GEORADIUS: a key after a keyword), in RESP2 and RESP3, over
redis-py and over a raw socket; redis-py's own cluster key parser is run against us.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis._parsers.commands import CommandsParser

from server.protocol.framer import ReplyFramer, split_aggregate
from tests.support import RunningServer

RUNS_ON_CLUSTER = True  # COMMAND is relayed to one node of a cluster store: the same merged answers

DAG = ("AI.DAGEXECUTE LOAD 1 a PERSIST 1 c KEYS 1 {k} ROUTING r |> AI.MODELEXECUTE m INPUTS 1 a OUTPUTS 1 b "
       "|> AI.SCRIPTEXECUTE s f KEYS 1 kk INPUTS 1 b OUTPUTS 1 c |> AI.TENSORSET LOAD FLOAT 1")

GETKEYS_CASES = [
    ("AI.MODELEXECUTE m INPUTS 2 a b OUTPUTS 1 c", "m a b c"),
    ("AI.MODELEXECUTE m INPUTS 1 OUTPUTS OUTPUTS 1 c TIMEOUT 5", "m OUTPUTS c"),
    ("AI.MODELRUN m TIMEOUT 5 INPUTS a b OUTPUTS c", "m a b c"),
    ("AI.SCRIPTEXECUTE s f KEYS 1 k INPUTS 2 a b ARGS 1 OUTPUTS OUTPUTS 1 c", "s k a b c"),
    ("AI.SCRIPTRUN s f INPUTS a $ b OUTPUTS c", "s a b c"),
    (DAG, "a c {k} r m s kk"),
    ("AI.DAGEXECUTE_RO ROUTING r |> AI.MODELEXECUTE m INPUTS 1 x OUTPUTS 1 y", "r m"),
    ("AI.DAGRUN PERSIST 1 y |> AI.MODELRUN m INPUTS x OUTPUTS y", "y m"),
    ("AI.DAGRUN_RO LOAD 2 a b |> AI.TENSORGET a", "a b"),
    ("AI.GRAPHSTORE g INPUTS 1 x OUTPUTS 1 y |> AI.MODELEXECUTE m INPUTS 1 x OUTPUTS 1 y", "g m"),
    ("AI.GRAPHEXECUTE g INPUTS 1 a OUTPUTS 1 b MODE INTERPRETED", "g a b"),
    ("AI.TENSORSET t FLOAT 1 VALUES 1", "t"),
    ("AI.MODELSTORE m TORCH CPU BLOB x", "m"),
    ("AI.SCRIPTDEL s", "s"),
    ("AI.INFO m RESETSTAT", "m"),
]


def _words(line: str) -> list[str]:
    return line.split()


@pytest.fixture
def real(real_redis_url: str) -> Iterator[redis.Redis]:
    conn = redis.Redis.from_url(real_redis_url)
    yield conn
    conn.close()


@pytest.mark.parametrize(("line", "keys"), GETKEYS_CASES)
def test_getkeys_names_every_key_of_every_form(client: redis.Redis, line: str, keys: str) -> None:
    assert client.execute_command("COMMAND GETKEYS", *_words(line)) == keys.split()  # redis-py decodes GETKEYS


def test_getkeys_over_a_raw_socket(server: RunningServer) -> None:
    raw = server.raw()
    request = b"COMMAND GETKEYS AI.MODELEXECUTE m INPUTS 2 a b OUTPUTS 1 c\r\n"
    expected = b"*4\r\n$1\r\nm\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n"
    assert raw.call(request, expected) == expected
    raw.close()


def test_getkeysandflags_gives_the_key_spec_flags_as_redis_does(server: RunningServer, real: redis.Redis) -> None:
    ours = server.client().execute_command("COMMAND GETKEYSANDFLAGS", *_words(DAG))
    assert ours[:4] == [[b"a", [b"RO", b"access"]], [b"c", [b"OW", b"update"]], [b"{k}", [b"RO", b"not_key"]],
                        [b"r", [b"RO", b"not_key"]]]
    assert ours[-1] == [b"kk", [b"RW", b"access", b"update"]]
    theirs = real.execute_command("COMMAND GETKEYSANDFLAGS", "ZUNIONSTORE", "d", "1", "a")
    assert [type(part) for part in theirs[0]] == [type(part) for part in ours[0]]
    resp3 = read_frame(server.port, b"COMMAND GETKEYSANDFLAGS AI.MODELEXECUTE m INPUTS 1 a OUTPUTS 1 b\r\n")
    assert resp3 == (b"*3\r\n*2\r\n$1\r\nm\r\n~2\r\n+RO\r\n+access\r\n*2\r\n$1\r\na\r\n~2\r\n+RO\r\n+access\r\n"
                     b"*2\r\n$1\r\nb\r\n~2\r\n+OW\r\n+update\r\n")


def test_redis_py_cluster_key_parser_finds_the_keys(client: redis.Redis) -> None:
    """redis-py's cluster client reads COMMAND once, then asks GETKEYS for a ``movablekeys`` command."""
    parser = CommandsParser(client)
    assert parser.get_keys(client, *_words("AI.MODELEXECUTE m INPUTS 2 a b OUTPUTS 1 c")) == ["m", "a", "b", "c"]
    assert parser.get_keys(client, *_words("AI.TENSORGET t META")) == ["t"]


@pytest.mark.parametrize(("ours", "redis_like"), [
    ("AI._MODELSCAN", "PING x"),  # no key arguments at all
    ("AI.MODELEXECUTE m INPUTS 1", "ZUNIONSTORE d x a"),  # keys cannot be found
    ("TYPE a b", "GET a b"),  # arity
    ("NOSUCH a", "NOSUCH a"),
])
def test_getkeys_errors_are_redis_texts(client: redis.Redis, real: redis.Redis, ours: str, redis_like: str) -> None:
    with pytest.raises(redis.ResponseError) as theirs:
        real.execute_command("COMMAND GETKEYS", *_words(redis_like))
    with pytest.raises(redis.ResponseError) as mine:
        client.execute_command("COMMAND GETKEYS", *_words(ours))
    assert str(mine.value) == str(theirs.value)


def _skeleton(frame: bytes) -> Any:
    """A reply's types without its values: the type byte, and the skeletons of an aggregate's elements."""
    if frame[:1] not in (b"*", b"~", b"%"):
        return frame[:1]
    kind, elements = split_aggregate(frame)
    return kind, [_skeleton(element) for element in elements]


def _kind(skeleton: Any) -> bytes:
    return skeleton if isinstance(skeleton, bytes) else skeleton[0]


def read_frame(port: int, request: bytes, *, resp3: bool = True) -> bytes:
    """One whole reply to ``request``, as bytes, after HELLO 3 (its reply dropped) when ``resp3``."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    framer = ReplyFramer()
    try:
        sock.sendall((b"HELLO 3\r\n" if resp3 else b"") + request)
        frames: list[bytes] = []
        while len(frames) < (2 if resp3 else 1):
            chunk = sock.recv(1 << 20)
            assert chunk, "the server closed the connection"
            framer.feed(chunk)
            while (frame := framer.next_frame()) is not None:
                frames.append(frame)
        return frames[-1]
    finally:
        sock.close()


def _entry(port: int, name: bytes, *, resp3: bool) -> bytes:
    return split_aggregate(read_frame(port, b"COMMAND INFO " + name + b"\r\n", resp3=resp3))[1][0]


@pytest.mark.parametrize("resp3", [False, True])
def test_command_info_shape_is_redis_7s(server: RunningServer, real_redis_url: str, resp3: bool) -> None:
    real_port = redis.Redis.from_url(real_redis_url).connection_pool.connection_kwargs["port"]
    ours = _entry(server.port, b"AI.MODELEXECUTE", resp3=resp3)
    theirs = _entry(real_port, b"ZUNIONSTORE", resp3=resp3)  # key, then a keynum spec; ours: key + 2 keyword/keynum
    our_kind, our_parts = _skeleton(ours)
    their_kind, their_parts = _skeleton(theirs)
    assert our_kind == their_kind and len(our_parts) == len(their_parts) == 10
    assert [_kind(part) for part in our_parts] == [_kind(part) for part in their_parts]
    assert our_parts[8][0] == their_parts[8][0]  # the key specs: a set in RESP3, an array in RESP2
    assert our_parts[8][1][0] == their_parts[8][1][0]  # the first spec: index 1, range
    keyword = _skeleton(_entry(real_port, b"GEORADIUS", resp3=resp3))[1][8][1][1]  # a STORE keyword spec
    assert our_parts[8][1][1][1][:4] == keyword[1][:4]  # flags and begin_search (keyword, startfrom) alike
    assert our_parts[8][1][2][1][4:] == their_parts[8][1][1][1][4:]  # find_keys: ZUNIONSTORE's keynum spec


def test_command_info_keys_by_name(server: RunningServer) -> None:
    info = server.client(protocol=3).execute_command("COMMAND INFO", "AI.MODELEXECUTE")[0]
    assert info[:6] == [b"ai.modelexecute", -1, [b"write", b"denyoom", b"movablekeys"], 1, 1, 1]
    specs = info[8]
    assert specs[1] == {b"flags": [b"RO", b"access"],
                        b"begin_search": {b"type": b"keyword", b"spec": {b"keyword": b"INPUTS", b"startfrom": 2}},
                        b"find_keys": {b"type": b"keynum", b"spec": {b"keynumidx": 0, b"firstkey": 1,
                                                                     b"keystep": 1}}}
    assert specs[2][b"flags"] == [b"OW", b"update"]
    dag = server.client(protocol=3).execute_command("COMMAND INFO", "AI.DAGEXECUTE")[0]
    assert [spec[b"begin_search"][b"spec"].get(b"keyword") for spec in dag[8]] == \
        [b"LOAD", b"PERSIST", b"KEYS", b"ROUTING", None]
    assert dag[8][-1][b"begin_search"] == {b"type": b"unknown", b"spec": {}}


def _doc_keys(arguments: list[dict[bytes, Any]]) -> set[bytes]:
    found = {key for arg in arguments for key in arg}
    return found.union(*(_doc_keys(arg[b"arguments"]) for arg in arguments if b"arguments" in arg))


def test_command_docs_arguments_and_complexity(server: RunningServer, real_redis_url: str) -> None:
    conn = server.client(protocol=3)
    docs = conn.execute_command("COMMAND DOCS", "AI.MODELEXECUTE", "ZUNIONSTORE")
    ours, theirs = docs[b"ai.modelexecute"], docs[b"zunionstore"]  # ZUNIONSTORE: the store's own docs
    assert theirs[b"group"] == b"sorted-set" and theirs[b"complexity"].startswith(b"O(N)")
    assert set(ours) <= {b"summary", b"since", b"group", b"complexity", b"module", b"doc_flags", b"replaced_by",
                         b"arguments"}
    assert ours[b"group"] == b"module" and ours[b"module"] == b"ai" and ours[b"complexity"]
    assert [arg[b"name"] for arg in ours[b"arguments"]] == [b"key", b"inputs", b"outputs", b"timeout"]
    inputs = ours[b"arguments"][1]
    assert inputs[b"type"] == b"block" and inputs[b"token"] == b"INPUTS"
    assert inputs[b"arguments"][1] == {b"name": b"key", b"type": b"key", b"key_spec_index": 1,
                                       b"flags": [b"multiple"]}
    real_docs = redis.Redis.from_url(real_redis_url, protocol=3)
    redis_fields = _doc_keys(real_docs.execute_command("COMMAND DOCS", "ZUNIONSTORE", "GEORADIUS")
                             [b"zunionstore"][b"arguments"])
    assert _doc_keys(ours[b"arguments"]) <= redis_fields
    deprecated = conn.execute_command("COMMAND DOCS", "AI.MODELRUN")[b"ai.modelrun"]
    assert deprecated[b"doc_flags"] == [b"deprecated"] and deprecated[b"replaced_by"] == b"`AI.MODELEXECUTE`"
    assert len(conn.execute_command("COMMAND DOCS")) > 200  # the store's, and every AI command's


def test_command_docs_resp2_over_raw_socket(server: RunningServer) -> None:
    frame = read_frame(server.port, b"COMMAND DOCS AI.MODELDEL\r\n", resp3=False)
    assert frame.startswith(b"*2\r\n$11\r\nai.modeldel\r\n*12\r\n$7\r\nsummary\r\n")
    assert b"$9\r\narguments\r\n*1\r\n*6\r\n$4\r\nname\r\n$3\r\nkey\r\n$4\r\ntype\r\n$3\r\nkey\r\n" in frame


def test_command_list_filterby(client: redis.Redis, real: redis.Redis) -> None:
    module = client.execute_command("COMMAND LIST", "FILTERBY", "MODULE", "ai")
    assert module and all(name.startswith(b"ai.") for name in module)
    assert b"ai.modelexecute" in module and b"get" not in module
    assert client.execute_command("COMMAND LIST", "FILTERBY", "MODULE", "nosuch") == []
    pattern = client.execute_command("COMMAND LIST", "FILTERBY", "PATTERN", "AI.MODEL*")
    assert sorted(pattern) == sorted(n for n in module if n.startswith(b"ai.model"))
    assert client.execute_command("COMMAND LIST", "FILTERBY", "PATTERN", "p?n[g]") == [b"ping"]
    assert client.execute_command("COMMAND LIST", "FILTERBY", "PATTERN", "g[^e]t") == []
    assert b"ai.tensorget" in client.execute_command("COMMAND LIST", "FILTERBY", "ACLCAT", "ai")
    connection = client.execute_command("COMMAND LIST", "FILTERBY", "ACLCAT", "connection")
    assert set(real.execute_command("COMMAND LIST", "FILTERBY", "ACLCAT", "connection")) <= set(connection)
    assert len(connection) == len(set(connection))
    for bad in (("FILTERBY", "NOPE", "x"), ("FILTERBY", "PATTERN"), ("NOPE",)):
        with pytest.raises(redis.ResponseError) as theirs:
            real.execute_command("COMMAND LIST", *bad)
        with pytest.raises(redis.ResponseError) as mine:
            client.execute_command("COMMAND LIST", *bad)
        assert str(mine.value) == str(theirs.value)


def test_command_count_is_the_length_of_command(server: RunningServer, client: redis.Redis) -> None:
    entries = split_aggregate(read_frame(server.port, b"COMMAND\r\n", resp3=False))[1]
    names = [split_aggregate(entry)[1][0].split(b"\r\n")[1] for entry in entries]
    assert len(names) == len(set(names)), "a command we answer is listed twice"
    assert client.command_count() == len(entries)
    assert len(split_aggregate(read_frame(server.port, b"COMMAND INFO\r\n", resp3=False))[1]) == len(entries)
    listed = client.execute_command("COMMAND LIST")
    assert len(listed) == len(set(listed))
    assert {name for name in listed if b"|" not in name} == set(names)
    assert b"ai.modelexecute" in names and b"get" in names
