"""One node's connections for relayed commands: a client's own (``NodeSession``) and the one every
session-less client shares (``NodeRelay``). A client session and the shared relay (server/store/relays.py)
route each command to one of these, on a single store or on each node of a cluster.
"""

from __future__ import annotations

import asyncio
from collections import deque

from backends import errors as msgs
from server.protocol.slot import ReplySlot
from server.store.pubsub_state import UNSIZED, PubSubState, confirmation_of
from server.store.session import BLOCKING_COMMANDS, PUBSUB_COMMANDS, SessionSink
from server.store.upstream import (
    StoreAddress,
    UpstreamConnection,
    UpstreamProtocol,
    has_big_argument,
    lost_detail,
    pack_command,
    pack_vectored,
)


class NodeSession(UpstreamConnection):
    """A client's own connection to one node; classifies frames into replies (to slots) and pushes. Its state on
    the store is the client's: once lost (or given up on), the client is closed and it never reconnects."""

    def __init__(self, address: StoreAddress, sink: SessionSink) -> None:
        super().__init__(address, address.db)
        self._sink = sink
        self._proto = 2
        self._fifo: deque[ReplySlot] = deque()
        self._pubsub = PubSubState()
        self._in_multi = False
        self._closed = False
        # ids of the slots in ``_fifo`` whose command may wait (BLPOP k 0 …) → whether with no timeout at all
        self._blocking: dict[int, bool] = {}

    def send(self, argv: list[bytes], slot: ReplySlot) -> None:
        """One frame expected, or a pub/sub command's confirmations (server/store/pubsub_state.py): in RESP3
        pushes, and the command still waits for them, so a reply we give ourselves to a command pipelined
        behind it (CLIENT ID, QUIT …) does not overtake them, as it does not in Redis."""
        name = argv[0].lower()
        if not self._in_multi and name in PUBSUB_COMMANDS:
            slot.frames_left = self._pubsub.sending(id(slot), argv, name)
        else:
            slot.frames_left = 1
            if not self._in_multi and may_block(argv, name):  # (queued in MULTI, it answers at once)
                self._blocking[id(slot)] = blocks_for_ever(argv, name)
            self._track_command(name, id(slot))
        self._fifo.append(slot)
        if slot.frames_left == UNSIZED and len(self._fifo) == 1:
            slot.frames_left = self._pubsub.size_for(id(slot))
        upstream = self._upstream
        if upstream is None:  # queued for the connection being made
            self._queue(argv)
            self._start_connecting()
        elif has_big_argument(argv):  # not copied into one buffer where the transport can
            upstream.write_buffers(pack_vectored(argv))
        else:
            upstream.write(pack_command(argv))

    def oldest_pending(self) -> object | None:
        """The command waiting longest for its reply, for a cluster's watchdog; None when none waits, or when
        it is one that may legitimately wait (a blocking command: the commands behind it wait with it)."""
        if not self._fifo:
            return None
        oldest = self._fifo[0]
        return None if id(oldest) in self._blocking else oldest

    def waits_blocked(self) -> bool:
        """Whether its oldest command is a blocking one (its node is then probed: server/store/cluster_watch.py)."""
        return bool(self._fifo) and id(self._fifo[0]) in self._blocking

    def subscribed(self) -> bool:
        return self._pubsub.subscribed()

    def subscription_counts(self) -> tuple[int, int, int]:
        return self._pubsub.counts()

    def blocks_for_ever(self, slot: ReplySlot) -> bool:
        """Whether ``slot``'s command (unanswered) went through here as a blocking one with no timeout (BLPOP k
        0, WAIT n 0 …), as ``slot`` or as a cluster node's slot forwarding to it: graceful shutdown does not wait
        for it (server/frontend/connection.py ``idle``)."""
        if not self._blocking:
            return False
        return any(self._blocking.get(id(pending), False) and pending.answers_for(slot) for pending in self._fifo)

    def set_protocol(self, proto: int) -> None:
        self._proto = proto
        self._fifo.append(ReplySlot())  # the HELLO reply is ours to drop; the client got our own
        self._write(pack_command([b"HELLO", str(proto).encode()]))

    def _write(self, payload: bytes) -> None:
        if self._upstream is not None:
            self._upstream.write(payload)
            return
        self._outbox.append(payload)
        self._start_connecting()

    def _accepts(self, upstream: UpstreamProtocol) -> bool:
        if self._closed:
            upstream.close()
        return not self._closed

    def _attach(self, upstream: UpstreamProtocol) -> None:
        upstream.on_reply = self._on_frame
        upstream._on_batch_end = self._sink.flush

    def _lost(self, detail: str) -> None:
        """The client's state on the store is gone (the connection was lost, or a watchdog gave up on it): the
        client is closed (first, so nothing more is sent), its pending commands get the error naming the
        store, and this session never reconnects."""
        if not self._closed:
            self._closed = True
            self._fail_pending(detail)  # (before the client's other connections close, failing theirs: the why)
            self._sink.store_lost()
            self._fail_all(detail)

    def _fail_all(self, detail: str) -> None:
        self._fail_pending(detail)
        self._drop_outbox()
        self._sink.flush()

    def _fail_pending(self, detail: str) -> None:
        error = _store_down_reply(detail)
        while self._fifo:
            slot = self._fifo.popleft()
            slot.fill(error)
        self._blocking.clear()
        self._pubsub.forget_pending()

    def _track_command(self, name: bytes, slot_id: int) -> None:
        """Follow MULTI (its commands are queued, a pub/sub one too: EXEC's reply then holds confirmations)."""
        if name == b"multi":  # (refused by the store to a RESP2 subscriber: no transaction to follow then)
            self._in_multi = self._in_multi or not (self._proto == 2 and self._pubsub.subscribed())
        elif name == b"exec" or name == b"discard":
            self._pubsub.transaction_ended(slot_id if name == b"exec" else None)
            self._in_multi = False
        elif name == b"reset":
            self._pubsub.reset()
            self._in_multi = False
        elif self._in_multi and name in PUBSUB_COMMANDS:
            self._pubsub.queued()

    def _on_frame(self, frame: bytes) -> None:
        first = frame[:1]
        if first == b">":  # RESP3: a pub/sub command's confirmation, or a push (message, invalidation …)
            found = confirmation_of(frame)
            if found is not None and self._fifo and self._pubsub.expects(id(self._fifo[0]), found[0]):
                self._answer(frame, found)
                return
            if found is not None:  # the store's own (a shard channel left when its slot moved)
                self._pubsub.confirm(*found)
            self._sink.push(frame)
            return
        found = None
        if self._proto == 2 and first == b"*" and self._pubsub.used:
            if _is_message(frame) and self._pubsub.store_has_subscriptions():
                self._sink.push(frame)
                return
            found = confirmation_of(frame)
            if found is not None and not (self._fifo and self._pubsub.expects(id(self._fifo[0]), found[0])):
                if self._pubsub.left_by_store(*found):
                    self._pubsub.confirm(*found)
                    self._sink.push(frame)
                    return
                found = None  # a reply that only looks like one (an EVAL's)
        if self._fifo:
            self._answer(frame, found)
        else:
            self._sink.push(frame)  # MONITOR lines and anything else unsolicited

    def _answer(self, frame: bytes, confirmation: tuple[bytes, bytes | None] | None) -> None:
        """``frame`` is a reply to the oldest command. A pub/sub confirmation is written even under CLIENT REPLY
        OFF/SKIP, as Redis does (it pushes them whatever the reply mode); a pub/sub command refused (NOPERM for
        one of its channels, a redirect) gets one error for all its channels and subscribed to none of them."""
        slot = self._fifo[0]
        pubsub = self._pubsub
        if pubsub.used and pubsub.waits(id(slot)):
            if confirmation is not None:
                slot.show()
                pubsub.confirm(*confirmation)
            elif frame[:1] == b"-":
                pubsub.refused(id(slot))
                slot.frames_left = 1  # this frame is the whole reply
        slot.add_frame(frame)
        if slot.done:
            self._fifo.popleft()
            if self._blocking:
                self._blocking.pop(id(slot), None)
            if pubsub.used:
                pubsub.answered(id(slot), frame, bool(self._fifo))
                if self._fifo and self._fifo[0].frames_left == UNSIZED:
                    self._fifo[0].frames_left = pubsub.size_for(id(self._fifo[0]))

    def close(self) -> None:
        """Close the connection; the commands still waiting on it answer the error (a cluster client loses all
        its node connections when one is lost: those on the others must answer too, or the client, closed
        once its replies are out, would wait on them for ever). Nothing is flushed here: the caller does."""
        self._closed = True
        if self._upstream is not None:
            self._upstream.close()
        if self._connecting is not None:
            self._connecting.cancel()
            self._connecting = None
        if self._fifo:
            self._fail_pending(lost_detail(None, self._address))


def may_block(argv: list[bytes], name: bytes = b"") -> bool:
    """Whether a command may wait for a reply as long as it likes: BLPOP and the other blocking commands, WAIT,
    XREAD / XREADGROUP with BLOCK. ``name``: ``argv[0].lower()``, when the caller has it."""
    name = name or argv[0].lower()
    if name in BLOCKING_COMMANDS:
        return True
    if name == b"xread" or name == b"xreadgroup":
        return _block_option(argv) > 0
    return False


def _block_option(argv: list[bytes]) -> int:
    """Where XREAD's / XREADGROUP's BLOCK option is (0: none). The options come before STREAMS (a key named
    "block" may follow it), and GROUP's two names are not options (a group named "block")."""
    i = 1
    while i < len(argv):
        word = argv[i].lower()
        if word == b"streams":
            return 0
        if word == b"block":
            return i
        i += 3 if word == b"group" else 1
    return 0


def blocks_for_ever(argv: list[bytes], name: bytes) -> bool:
    """Whether a blocking command (``may_block``) has no timeout: a 0 where its timeout goes (the last
    argument of BLPOP, BRPOP, BZPOPMIN/MAX, BRPOPLPUSH, BLMOVE; the first of BLMPOP, BZMPOP; WAIT's second,
    WAITAOF's third; the number after XREAD's BLOCK)."""
    if name in (b"blmpop", b"bzmpop"):
        at = 1
    elif name == b"wait":
        at = 2
    elif name == b"waitaof":
        at = 3
    elif name in (b"xread", b"xreadgroup"):
        at = _block_option(argv) + 1 if _block_option(argv) else len(argv)
    else:
        at = len(argv) - 1
    if at >= len(argv):
        return False
    try:
        return float(argv[at]) == 0
    except ValueError:
        return False


def _store_down_reply(detail: str) -> bytes:
    """The error reply of a relayed command whose store connection could not be made or was lost."""
    return b"-" + msgs.UPSTREAM_DOWN_MSG.format(detail=detail).replace("\r\n", " ").encode() + b"\r\n"


def _is_message(frame: bytes) -> bool:
    return frame.startswith((b"*3\r\n$7\r\nmessage\r\n", b"*4\r\n$8\r\npmessage\r\n", b"*3\r\n$8\r\nsmessage\r\n"))


class NodeRelay(UpstreamConnection):
    """The stateless relayed commands of every client on one node (one database of it), over one connection.

    A client with no store session of its own yet (no MULTI, WATCH, subscription or RESP3) sends the
    commands of ``STATELESS_COMMANDS`` here instead of opening one. Everything queued in one loop iteration
    leaves in one write, and each read fills the slots it answers and then flushes each client once, so the
    syscalls of a busy server are shared by its clients. Replies come back in the order sent, so each
    client's replies keep its order. Nothing here is connection state: a lost connection costs the commands
    in flight an error reply (their clients stay open), and the next command connects again.
    """

    def __init__(self, address: StoreAddress, db: int) -> None:
        super().__init__(address, db)
        self._fifo: deque[tuple[ReplySlot, SessionSink]] = deque()
        self._answered: dict[int, SessionSink] = {}

    def send(self, argv: list[bytes], slot: ReplySlot, sink: SessionSink) -> None:
        self._fifo.append((slot, sink))
        if not self._outbox and self._upstream is not None:
            asyncio.get_running_loop().call_soon(self._flush)
        self._queue(argv)
        self._start_connecting()

    def _attach(self, upstream: UpstreamProtocol) -> None:
        upstream.on_reply = self._on_frame
        upstream._on_batch_end = self._flush_answered

    def _on_frame(self, frame: bytes) -> None:
        if not self._fifo or frame[:1] == b">":  # a RESP3 push on a RESP2 link cannot happen; never misroute one
            return
        slot, sink = self._fifo.popleft()
        slot.fill(frame)
        self._answered[id(sink)] = sink

    def _flush_answered(self) -> None:
        answered, self._answered = self._answered, {}
        for sink in answered.values():
            sink.flush()

    def oldest_pending(self) -> object | None:
        return self._fifo[0][0] if self._fifo else None  # (no blocking command is stateless: none comes here)

    def _fail_all(self, detail: str) -> None:
        error = _store_down_reply(detail)
        self._drop_outbox()
        while self._fifo:
            slot, sink = self._fifo.popleft()
            slot.fill(error)
            self._answered[id(sink)] = sink
        self._flush_answered()
