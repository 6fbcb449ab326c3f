"""Relayed commands on a Redis Cluster that are not one node's: reply slots that forward a node's reply to
the client's slot (and follow MOVED/ASK instead), and the keyless commands that visit every primary.

Fan-out, as Redis Cluster clients do it: FLUSHALL / FLUSHDB go to every primary (the first error, else
``+OK``), DBSIZE is summed, KEYS is the union of every primary's answer, RANDOMKEY is any primary's non-nil
answer. SCRIPT LOAD / FLUSH and FUNCTION LOAD / DELETE / FLUSH / RESTORE go to every primary too (the first
error, else the first node's answer: a script loaded through us runs by EVALSHA on any shard, as redis-py's
``register_script`` expects), and SCRIPT EXISTS answers 1 for a script every primary holds. SCAN walks the
primaries one after the other: the client's cursor is ``node cursor * 1024 + index of the primary`` (the
primaries in slot order), so a SCAN that reaches 0 has seen every shard.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Final

from backends import errors as msgs
from server.protocol.framer import join_aggregate, split_aggregate
from server.protocol.slot import ReplySlot

_NODE_DOWN: Final = b"-" + msgs.UPSTREAM_DOWN_MSG.split("{")[0].encode()  # a node that cannot be reached (failover?)
# Redirects, and the errors that make the map be read again:
_FOLLOWED: Final = (*(b"-" + word.encode() for word in (msgs.MOVED_PREFIX, msgs.ASK_PREFIX, msgs.CLUSTERDOWN_PREFIX)),
                    _NODE_DOWN)
FAN_OUT_COMMANDS: Final = frozenset({b"flushall", b"flushdb", b"dbsize", b"keys", b"randomkey"})
# with a subcommand, which the combining rule is named by ("script load" …)
_FAN_OUT_WITH_SUBCOMMAND: Final = frozenset({b"script", b"function"})
SCAN_NODES: Final = 1024  # the most primaries a SCAN cursor can tell apart


class ForwardSlot(ReplySlot):
    """A node's slot for one client slot: frames go to ``target``; a MOVED/ASK reply goes to ``redirect``
    instead (which sends the command again elsewhere, and answers None), so the client never sees a redirect it
    cannot follow; a redirect not followed (or a CLUSTERDOWN) reaches the client as ``redirect`` answers it."""

    __slots__ = ("redirect", "target")

    def __init__(self, target: ReplySlot, redirect: Callable[[bytes], bytes | None] | None = None) -> None:
        super().__init__()
        self.target = target
        self.redirect = redirect

    def answers_for(self, slot: ReplySlot) -> bool:
        return self is slot or self.target.answers_for(slot)

    def show(self) -> None:
        self.target.show()

    def add_frame(self, data: bytes) -> None:
        self.frames_left -= 1
        answer = self._followed(data)
        if answer is None:
            self.frames_left = 0
            return
        self.target.chunks.append(answer)
        if self.frames_left <= 0:
            self.target.finish()

    def fill(self, data: bytes) -> None:
        self.frames_left = 0
        answer = self._followed(data)
        if answer is not None:
            self.target.fill(answer)

    def _followed(self, data: bytes) -> bytes | None:
        if self.redirect is None or self.target.chunks or not data.startswith(_FOLLOWED):
            return data
        return self.redirect(data)


def fan_out_name(name: bytes, argv: list[bytes]) -> bytes | None:
    """The fan-out rule of ``argv`` (see the module docstring; None: not a fan-out command): ``name`` (its
    command's name, in lower case), or name and subcommand."""
    if name in FAN_OUT_COMMANDS:
        return name
    if len(argv) > 1 and name in _FAN_OUT_WITH_SUBCOMMAND:
        full = name + b" " + argv[1].lower()
        if full in _COMBINE:
            return full
    return None


class FanOut:
    """One client slot answered by every primary's reply, combined once the last is in."""

    def __init__(self, target: ReplySlot, name: bytes, parts: int) -> None:
        self._target = target
        self._combine = _COMBINE[name]
        self._replies: list[bytes | None] = [None] * parts

    def part(self, index: int) -> ReplySlot:
        return _Part(self, index)

    def arrived(self, index: int, frame: bytes) -> None:
        self._replies[index] = frame
        if all(reply is not None for reply in self._replies):
            self._target.fill(self._combine([r for r in self._replies if r is not None]))


class _Part(ReplySlot):
    __slots__ = ("_fan", "_index")

    def __init__(self, fan: FanOut, index: int) -> None:
        super().__init__()
        self._fan = fan
        self._index = index

    def add_frame(self, data: bytes) -> None:
        self.fill(data)

    def fill(self, data: bytes) -> None:
        self.frames_left = 0
        self._fan.arrived(self._index, data)


def _first_error(replies: list[bytes]) -> bytes | None:
    return next((r for r in replies if r.startswith(b"-")), None)


def _all_ok(replies: list[bytes]) -> bytes:
    return _first_error(replies) or replies[0]


def _summed(replies: list[bytes]) -> bytes:
    error = _first_error(replies)
    if error is not None:
        return error
    return b":%d\r\n" % sum(int(r[1:].strip()) for r in replies)


def _union(replies: list[bytes]) -> bytes:
    error = _first_error(replies)
    if error is not None:
        return error
    kind = replies[0][:1]
    return join_aggregate(kind, [element for r in replies for element in split_aggregate(r)[1]])


def _held_by_all(replies: list[bytes]) -> bytes:
    """SCRIPT EXISTS: 1 for each script that every primary holds."""
    error = _first_error(replies)
    if error is not None:
        return error
    answers = [split_aggregate(r)[1] for r in replies]
    kind = replies[0][:1]
    return join_aggregate(kind, [b":1\r\n" if all(len(a) > i and a[i] == b":1\r\n" for a in answers) else b":0\r\n"
                                 for i in range(len(answers[0]))])


def _any_key(replies: list[bytes]) -> bytes:
    error = _first_error(replies)
    if error is not None:
        return error
    found = [r for r in replies if not r.startswith((b"$-1", b"_"))]
    return random.choice(found) if found else replies[0]


_COMBINE: Final[dict[bytes, Callable[[list[bytes]], bytes]]] = {
    b"flushall": _all_ok, b"flushdb": _all_ok, b"dbsize": _summed, b"keys": _union, b"randomkey": _any_key,
    b"script load": _all_ok, b"script flush": _all_ok, b"script exists": _held_by_all, b"function load": _all_ok,
    b"function delete": _all_ok, b"function flush": _all_ok, b"function restore": _all_ok,
}


def split_scan_cursor(cursor: bytes) -> tuple[int, bytes] | None:
    """(index of the primary, that node's cursor) of a client's SCAN cursor; None when it is not a number."""
    if not cursor.isdigit():
        return None
    value = int(cursor)
    return value % SCAN_NODES, str(value // SCAN_NODES).encode()


def scan_reply_rewriter(index: int, primaries: int) -> Callable[[bytes], bytes]:
    """Turn one node's SCAN reply into the client's: its cursor, or the next primary's start at its end."""

    def rewrite(raw: bytes) -> bytes:
        if not raw.startswith(b"*2\r\n"):
            return raw  # an error
        kind, (cursor_frame, keys) = split_aggregate(raw)
        node_cursor = int(split_aggregate_bulk(cursor_frame))
        if node_cursor:
            value = node_cursor * SCAN_NODES + index
        else:
            value = index + 1 if index + 1 < primaries else 0
        text = str(value).encode()
        return join_aggregate(kind, [b"$%d\r\n%s\r\n" % (len(text), text), keys])

    return rewrite


def split_aggregate_bulk(frame: bytes) -> bytes:
    """The payload of one bulk-string frame."""
    end = frame.index(b"\r\n")
    return frame[end + 2 : -2]
