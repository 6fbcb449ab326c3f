"""Malformed and over-limit requests: an exact Protocol error, that connection closed, nobody else notices."""

from __future__ import annotations

import random
import socket

import hiredis
import pytest

from tests.fuzz import resp_frame
from tests.support import RunningServer

CASES = [
    (b"*abc\r\n", b"-ERR Protocol error: invalid multibulk length\r\n"),
    (b"*1\r\n$-5\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
    (b"*1\r\n$999999999999\r\n", b"-ERR Protocol error: invalid bulk length\r\n"),
    (b"*1\r\n:12\r\n", b"-ERR Protocol error: expected '$', got ':'\r\n"),
    (b"SET a \"unbalanced\r\n", b"-ERR Protocol error: unbalanced quotes in request\r\n"),
    (b"A" * (64 * 1024 + 10), b"-ERR Protocol error: too big inline request\r\n"),
    (b"*" + b"1" * (64 * 1024 + 10), b"-ERR Protocol error: too big mbulk count string\r\n"),
    (b"*1\r\n$" + b"1" * (64 * 1024 + 10), b"-ERR Protocol error: too big bulk count string\r\n"),
]


@pytest.mark.parametrize(("request_bytes", "error"), CASES)
def test_protocol_error_closes_only_that_connection(server: RunningServer, request_bytes: bytes,
                                                    error: bytes) -> None:
    bystander = server.client()
    bystander.set("safe", "1")
    raw = server.raw()
    raw.send(b"PING\r\n" + request_bytes)
    expected = b"+PONG\r\n" + error
    assert raw.read_exactly(expected) == expected
    assert raw.closed_by_peer()
    assert bystander.get("safe") == b"1"
    assert server.client().ping() is True


def test_commands_before_the_error_are_answered_first(server: RunningServer) -> None:
    raw = server.raw()
    raw.send(b"SET k v\r\nGET k\r\n*1\r\n$x\r\n")
    expected = b"+OK\r\n$1\r\nv\r\n-ERR Protocol error: invalid bulk length\r\n"
    assert raw.read_exactly(expected) == expected
    assert raw.closed_by_peer()


def test_garbage_bytes_do_not_kill_the_server(server: RunningServer) -> None:
    for payload in (b"\x00\xff\xfe*\r\n$", b"*2\r\n$3\r\nGET\r\n$1\r\nk", b"\r\n\r\n\r\n", bytes(range(256))):
        raw = server.raw()
        raw.send(payload)
        raw.close()
    assert server.client().ping() is True


RANDOM_FRAMES = 5_000


def _replies(data: bytes) -> list[object]:
    """Every complete RESP reply in ``data`` (hiredis; an error reply is a ``hiredis.ReplyError`` value)."""
    reader = hiredis.Reader()
    reader.feed(data)
    replies = []
    while (reply := reader.gets()) is not False:
        replies.append(reply)
    return replies


def test_random_frames_get_proper_replies_and_bystanders_notice_nothing(server: RunningServer) -> None:
    """Valid, cut, corrupted and garbage frames, each on its own connection that then ends its writing: the
    server answers what is complete (a Protocol error closes it first), never an internal error, and closes."""
    rng = random.Random(16)
    bystander = server.client()
    bystander.set("safe", "1")
    for case in range(RANDOM_FRAMES):
        frame = resp_frame(rng)
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(frame)
            sock.shutdown(socket.SHUT_WR)
            data = b""
            while chunk := sock.recv(65536):  # the server closes once it has answered: no timeout is reached
                data += chunk
        for reply in _replies(data):
            assert not (isinstance(reply, hiredis.ReplyError) and "internal error" in str(reply)), (frame, reply)
        if case % 500 == 0:
            assert bystander.get("safe") == b"1"
    assert bystander.get("safe") == b"1"
    assert server.client().ping() is True
