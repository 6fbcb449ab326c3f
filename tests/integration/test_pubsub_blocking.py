"""Stateful commands: SUBSCRIBE/PSUBSCRIBE (RESP2 and RESP3 pushes) and blocking commands."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from server.config import Config
from tests.support import RunningServer, redis_server_process, running_server


def _next_message(pubsub: redis.client.PubSub, timeout: float = 5.0) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.2)
        if message is not None and message["type"] in ("message", "pmessage"):
            return dict(message)
    raise AssertionError("no message arrived")


@pytest.mark.parametrize("protocol", [2, 3])
def test_subscribe_and_psubscribe(server: RunningServer, protocol: int) -> None:
    subscriber = server.client(protocol=protocol).pubsub()
    subscriber.subscribe("news")
    subscriber.psubscribe("weather.*")
    publisher = server.client()
    time.sleep(0.1)
    assert publisher.publish("news", "hello") == 1
    message = _next_message(subscriber)
    assert (message["channel"], message["data"]) == (b"news", b"hello")
    assert publisher.publish("weather.paris", "rain") == 1
    message = _next_message(subscriber)
    assert (message["pattern"], message["data"]) == (b"weather.*", b"rain")
    subscriber.unsubscribe("news")
    subscriber.punsubscribe()
    time.sleep(0.1)
    assert publisher.publish("news", "again") == 0
    subscriber.close()


def test_subscribe_raw_resp2_and_ping_in_subscribe_mode(server: RunningServer) -> None:
    raw = server.raw()
    expected = b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n*3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n"
    assert raw.call(b"SUBSCRIBE a b\r\n", expected) == expected
    pong = b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"
    assert raw.call(b"PING\r\n", pong) == pong
    server.client().publish("b", "x")
    message = b"*3\r\n$7\r\nmessage\r\n$1\r\nb\r\n$1\r\nx\r\n"
    assert raw.read_exactly(message) == message
    expected = (b"*3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:1\r\n*3\r\n$11\r\nunsubscribe\r\n$1\r\nb\r\n:0\r\n")
    got = raw.call(b"UNSUBSCRIBE\r\n", expected)
    assert len(got) == len(expected) and b":0\r\n" in got
    assert b"$1\r\na\r\n" in got and b"$1\r\nb\r\n" in got
    assert raw.call(b"SET k v\r\n", b"+OK\r\n") == b"+OK\r\n"


def test_resp3_subscribe_is_a_push(server: RunningServer) -> None:
    raw = server.raw()
    raw.switch_to_resp3()
    expected = b">3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"
    assert raw.call(b"SUBSCRIBE ch\r\n", expected) == expected
    assert raw.call(b"PING\r\n", b"+PONG\r\n") == b"+PONG\r\n"


def _push(kind: bytes, channel: bytes | None, count: int) -> bytes:
    named = b"_" if channel is None else b"$%d\r\n%s" % (len(channel), channel)
    return b">3\r\n$%d\r\n%s\r\n%s\r\n:%d\r\n" % (len(kind), kind, named, count)


def test_resp3_bare_unsubscribe_counts_what_a_transaction_left(server: RunningServer) -> None:
    """UNSUBSCRIBE a inside MULTI, then a bare UNSUBSCRIBE: one channel is left to leave, one push. It used to
    wait for two, and took the next command's reply as the second."""
    raw = server.raw()
    raw.switch_to_resp3()
    raw.send(b"SUBSCRIBE a b\r\nMULTI\r\nUNSUBSCRIBE a\r\nEXEC\r\nUNSUBSCRIBE\r\nCLIENT GETNAME\r\nECHO x\r\n")
    expected = (_push(b"subscribe", b"a", 1) + _push(b"subscribe", b"b", 2) + b"+OK\r\n+QUEUED\r\n*1\r\n"
                + _push(b"unsubscribe", b"a", 1) + _push(b"unsubscribe", b"b", 0) + b"_\r\n$1\r\nx\r\n")
    assert raw.read_exactly(expected, timeout=5) == expected


def test_resp3_confirmations_come_before_the_replies_pipelined_behind_them(server: RunningServer) -> None:
    """As in Redis: the pushes that confirm a SUBSCRIBE are its reply, so a command we answer ourselves (CLIENT
    ID, PING before any subscription, QUIT) waits for them instead of overtaking them."""
    raw = server.raw()
    raw.switch_to_resp3()
    raw.send(b"UNSUBSCRIBE\r\nPING\r\n")  # the first commands of this client: they open its session
    expected = b">3\r\n$11\r\nunsubscribe\r\n_\r\n:0\r\n+PONG\r\n"
    assert raw.read_exactly(expected) == expected
    raw.send(b"SUBSCRIBE a b\r\nCLIENT ID\r\n")
    confirmations = _push(b"subscribe", b"a", 1) + _push(b"subscribe", b"b", 2)
    got = raw.read_exactly(confirmations + b":1\r\n", timeout=5)  # the pushes, then CLIENT ID's integer
    assert got.startswith(confirmations) and got[len(confirmations):][:1] == b":", got
    raw.send(b"SUBSCRIBE c\r\nQUIT\r\n")
    expected = _push(b"subscribe", b"c", 3) + b"+OK\r\n"
    assert raw.read_exactly(expected) == expected
    assert raw.closed_by_peer()


@pytest.mark.parametrize("protocol", [2, 3])
def test_subscribe_confirmations_are_sent_under_client_reply_off_and_skip(server: RunningServer,
                                                                          protocol: int) -> None:
    """Redis pushes pub/sub confirmations whatever CLIENT REPLY says; the other replies stay suppressed."""
    raw = server.raw()
    if protocol == 3:
        raw.switch_to_resp3()
    confirmation = (_push if protocol == 3 else _resp2_confirmation)
    raw.send(b"CLIENT REPLY SKIP\r\nSUBSCRIBE b c\r\nPING\r\n")
    pong = b"+PONG\r\n" if protocol == 3 else b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"
    expected = confirmation(b"subscribe", b"b", 1) + confirmation(b"subscribe", b"c", 2) + pong
    assert raw.read_exactly(expected) == expected
    raw = server.raw()
    if protocol == 3:
        raw.switch_to_resp3()
    raw.send(b"CLIENT REPLY OFF\r\nSUBSCRIBE d\r\nPING\r\nRESET\r\n")  # RESET: replies on again
    expected = confirmation(b"subscribe", b"d", 1) + b"+RESET\r\n"
    assert raw.read_exactly(expected) == expected


@pytest.mark.parametrize("protocol", [2, 3])
def test_a_subscribe_refused_for_one_channel_answers_one_error_and_subscribes_to_none(protocol: int) -> None:
    """The store's user may not use every channel: Redis refuses the whole SUBSCRIBE with one NOPERM error. It
    used to wait for a confirmation per channel for ever (and count the client as subscribed to them)."""
    with redis_server_process() as url:
        admin = redis.Redis.from_url(url)
        admin.acl_setuser("ai", enabled=True, passwords=["+pw"], keys=["*"], channels=["ok*"], commands=["+@all"])
        store_url = url.replace("redis://", "redis://ai:pw@")
        with running_server(Config(port=0, redis_url=store_url, shutdown_timeout=2.0)) as server:
            raw = server.raw()
            if protocol == 3:
                raw.switch_to_resp3()
            refused = b"-NOPERM this user has no permissions to access one of the channels used as arguments\r\n"
            assert raw.call(b"SUBSCRIBE ok1 bad ok2\r\n", refused) == refused
            assert raw.call(b"ECHO x\r\n", b"$1\r\nx\r\n") == b"$1\r\nx\r\n"  # (refused to a RESP2 subscriber)
            left = b"unsubscribe", None, 0  # a bare UNSUBSCRIBE pipelined behind it: none to leave, one frame
            end = (_push(*left) + b"_\r\n") if protocol == 3 else (_resp2_confirmation(*left) + b"+OK\r\n")
            raw.send(b"SUBSCRIBE ok1 bad\r\nUNSUBSCRIBE\r\n" + (b"CLIENT GETNAME\r\n" if protocol == 3 else b"QUIT\r\n"))
            assert raw.read_exactly(refused + end, timeout=5) == refused + end
            raw = server.raw()
            if protocol == 3:
                raw.switch_to_resp3()
            raw.send(b"SUBSCRIBE ok1\r\nPING\r\n")
            pong = b"+PONG\r\n" if protocol == 3 else b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"
            expected = (_push if protocol == 3 else _resp2_confirmation)(b"subscribe", b"ok1", 1) + pong
            assert raw.read_exactly(expected) == expected
            assert admin.publish("ok1", "hi") == 1
        admin.close()


def _resp2_confirmation(kind: bytes, channel: bytes | None, count: int) -> bytes:
    named = b"$-1" if channel is None else b"$%d\r\n%s" % (len(channel), channel)
    return b"*3\r\n$%d\r\n%s\r\n%s\r\n:%d\r\n" % (len(kind), kind, named, count)


def test_replies_shaped_as_pub_sub_frames_are_replies(server: RunningServer) -> None:
    """A script may return what looks like a subscribe confirmation, then a message: both are its replies (the
    first once made the session count the client as subscribed, the second was then written as a push and
    every later reply went to the command before it)."""
    raw = server.raw()
    raw.send(b"WATCH k\r\nEVAL \"return {'subscribe','x',1}\" 0\r\nEVAL \"return {'message','a','b'}\" 0\r\nECHO z\r\n")
    expected = (b"+OK\r\n" + _resp2_confirmation(b"subscribe", b"x", 1)
                + b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nz\r\n")
    assert raw.read_exactly(expected, timeout=5) == expected


def test_blocked_client_does_not_block_others(server: RunningServer) -> None:
    blocked, other = server.client(), server.client()
    result: list[object] = []
    waiter = threading.Thread(target=lambda: result.append(blocked.blpop(["queue"], timeout=0)))  # for ever
    waiter.start()
    time.sleep(0.2)
    for _ in range(20):  # answered while the BLPOP still waits: it blocks nobody else
        assert other.ping() is True
        other.set("x", "y")
    assert not result and waiter.is_alive()
    other.rpush("queue", "job")
    waiter.join(5)
    assert result == [(b"queue", b"job")]


def test_blocking_pipeline_keeps_order(server: RunningServer) -> None:
    raw = server.raw()
    raw.send(b"BLPOP q 0.3\r\nPING\r\nSET after 1\r\n")
    expected_nil = b"*-1\r\n+PONG\r\n+OK\r\n"
    assert raw.read_exactly(expected_nil, timeout=5) == expected_nil


def test_xread_block(server: RunningServer) -> None:
    reader, writer = server.client(), server.client()
    got: list[object] = []
    thread = threading.Thread(target=lambda: got.append(reader.xread({"stream": "$"}, block=5000)))
    thread.start()
    time.sleep(0.2)
    entry = writer.xadd("stream", {"k": "v"})
    thread.join(5)
    assert got and got[0][0][1][0][0] == entry


def test_unsubscribe_pipelined_after_subscribe(server: RunningServer) -> None:
    raw = server.raw()
    expected = (b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n*3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n"
                b"*3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:1\r\n*3\r\n$11\r\nunsubscribe\r\n$1\r\nb\r\n:0\r\n+OK\r\n")
    got = raw.call(b"SUBSCRIBE a b\r\nUNSUBSCRIBE\r\nSET k v\r\n", expected)
    assert len(got) == len(expected) and got.endswith(b"+OK\r\n") and got.count(b"unsubscribe") == 2


def test_subscriber_that_never_reads_is_cut_off(server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> None:
    import server.frontend.connection as connection

    monkeypatch.setattr(connection, "PUBSUB_OUTPUT_LIMIT", 1024 * 1024)
    lazy = server.raw()
    lazy.send(b"SUBSCRIBE firehose\r\n")
    time.sleep(0.2)
    publisher = server.client()
    payload = b"x" * 200_000
    for _ in range(60):
        publisher.publish("firehose", payload)
    time.sleep(0.3)
    assert server.client().ping() is True
    assert lazy.closed_by_peer(5)
    time.sleep(0.2)
    assert publisher.execute_command("PUBSUB", "NUMSUB", "firehose")[1] == 0  # its subscription went with it


def test_a_resp2_subscriber_may_send_only_what_redis_allows(server: RunningServer) -> None:
    """Subscribed in RESP2, the commands this server answers itself are refused as redis-server 7 refuses
    every other command — and, unsubscribed, taken again."""
    raw = server.raw()
    raw.send(b"SUBSCRIBE ch\r\nTYPE x\r\nCLIENT ID\r\nPING\r\nINFO\r\nHELLO 3\r\nAI.TENSORSET t FLOAT 1 VALUES 1\r\n"
             b"UNSUBSCRIBE\r\nAI.TENSORSET t FLOAT 1 VALUES 1\r\n")
    only = b"': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n"
    expected = (b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"
                + b"".join(b"-ERR Can't execute '" + name + only for name in (b"type", b"client|id"))
                + b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"
                + b"".join(b"-ERR Can't execute '" + name + only for name in (b"info", b"hello", b"ai.tensorset"))
                + b"*3\r\n$11\r\nunsubscribe\r\n$2\r\nch\r\n:0\r\n+OK\r\n")
    assert raw.read_exactly(expected) == expected
    assert server.client().execute_command("AI.TENSORGET", "t", "VALUES") == [b"1"]  # (the second was run)


def test_a_tracking_client_with_a_big_reply_unread_is_not_cut_off_by_a_push(
        server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """CLIENT TRACKING's invalidations are pushes, but the client is not a subscriber: the pub/sub output limit
    (here lowered to 1 MiB) is not its, and a big reply it has not read yet plus a push lose nothing."""
    import server.frontend.connection as connection

    monkeypatch.setattr(connection, "PUBSUB_OUTPUT_LIMIT", 1024 * 1024)
    big = b"v" * (8 * 1024 * 1024)
    writer = server.client()
    writer.set("t", "1")
    writer.set("big", big)
    reader = server.raw()
    reader.send(b"HELLO 3\r\nCLIENT TRACKING on\r\nGET t\r\n")
    assert reader.read_until(b"$1\r\n1\r\n").endswith(b"$1\r\n1\r\n")
    reader.send(b"GET big\r\n")
    time.sleep(0.5)  # the reply waits in our buffers, unread
    writer.set("t", "2")  # its invalidation is pushed behind that reply
    time.sleep(0.3)
    got = reader.read_until(b"$1\r\nt\r\n", timeout=30)
    assert got.startswith(b"$%d\r\n" % len(big)) and big in got
    assert got.endswith(b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nt\r\n")


def test_a_client_that_left_every_subscription_is_a_normal_client_again(server: RunningServer) -> None:
    """CLIENT LIST's flag P, CLIENT LIST TYPE pubsub and INFO's pubsub_clients follow the subscriptions held
    now, as in Redis (they stayed set for good once a client had subscribed)."""
    raw = server.raw()
    observer = server.client()
    subscribed = b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"
    assert raw.call(b"SUBSCRIBE ch\r\n", subscribed) == subscribed
    assert observer.info("clients")["pubsub_clients"] == 1
    assert len(observer.client_list(_type="pubsub")) == 1
    left = b"*3\r\n$11\r\nunsubscribe\r\n$2\r\nch\r\n:0\r\n"
    assert raw.call(b"UNSUBSCRIBE\r\n", left) == left
    assert observer.info("clients")["pubsub_clients"] == 0
    assert observer.client_list(_type="pubsub") == []
    assert all("P" not in entry["flags"] for entry in observer.client_list())


def test_a_refused_multi_leaves_the_subscriptions_followed(server: RunningServer) -> None:
    """MULTI is refused to a RESP2 subscriber (by the store): no transaction starts, so the UNSUBSCRIBE after it
    is followed and the client may send anything again — and an arity error comes before the refusal, as
    redis-server 7 answers."""
    raw = server.raw()
    raw.send(b"SUBSCRIBE ch\r\nECHO\r\nMULTI\r\nUNSUBSCRIBE\r\nECHO hi\r\n")
    expected = (b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n"
                b"-ERR wrong number of arguments for 'echo' command\r\n"
                b"-ERR Can't execute 'multi': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed "
                b"in this context\r\n"
                b"*3\r\n$11\r\nunsubscribe\r\n$2\r\nch\r\n:0\r\n$2\r\nhi\r\n")
    assert raw.read_exactly(expected) == expected
