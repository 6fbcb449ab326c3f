"""Relayed (non-AI) commands over a ``Router`` (server/store/cluster_link.py): a single store is a cluster of one
shard, so one class carries a client's own session and one the shared relay, on every kind of store.

* ``SharedRelay``: the stateless commands of session-less clients, over one ``NodeRelay`` per node (a single
  store's: one per database).
* ``ClientSession``: a client's own connections, one ``NodeSession`` per node it needed (a single store's: its
  one, which follows the client's SELECT; a cluster has only database 0).

The router picks the way per command (``Router.route``): a single store's goes ``straight`` to its one node
(nothing hashed, no redirect possible); a cluster's is ``routed`` by its keys' slot, as a cluster client
would. There MULTI and WATCH stay on one node: the transaction goes to the node of its first keyed command (or
of the WATCHed keys); a queued command whose keys live on another node answers CROSSSLOT and makes EXEC fail,
as Redis Cluster's own check would (keys of several slots on the same node: the node answers CROSSSLOT at
EXEC). SUBSCRIBE/PSUBSCRIBE and PUBLISH use the first primary (a cluster broadcasts PUBLISH to every node);
SSUBSCRIBE and SPUBLISH go to the node of the shard channel; a bare SUNSUBSCRIBE to every node holding shard
channels of the client, its confirmations joined into one reply (``_ShardLeave``). Blocking commands wait on
their key's node. A command whose keys hash to several slots answers ``CROSSSLOT`` (nothing sent); MOVED and
ASK are followed (server/store/cluster_fanout.py ``ForwardSlot``), at most ``MAX_REDIRECTS`` times; keyless
fan-out commands visit every primary, and SCAN's cursor walks them one after the other (same module).
"""

from __future__ import annotations

import asyncio
from typing import Final, cast

from backends import errors as msgs
from backends.errors import AIError
from server.protocol.slot import ReplySlot
from server.store.cluster_fanout import (
    FanOut,
    ForwardSlot,
    fan_out_name,
    scan_reply_rewriter,
    split_scan_cursor,
)
from server.store.cluster_keys import CrossSlot
from server.store.cluster_link import MAX_REDIRECTS, Relayer, Router, clusterdown_named, redirect_target
from server.store.node_connections import NodeRelay, NodeSession
from server.store.pubsub_state import shard_channels_left
from server.store.session import SessionSink
from server.store.upstream import StoreAddress, UpstreamConnection

_CLUSTERDOWN: Final = b"-" + msgs.CLUSTERDOWN_PREFIX.encode()
QUEUE_TIME_ERROR: Final = [b"REDISAI.QUEUE-TIME-ERROR"]  # as server/frontend/multi.py's: fails the node's open MULTI
_HOME_COMMANDS: Final = frozenset({b"subscribe", b"psubscribe", b"unsubscribe", b"punsubscribe", b"publish"})


def _redirected_to(router: Router, frame: bytes, sender: StoreAddress) -> tuple[StoreAddress | None, bool]:
    """Where a ForwardSlot's intercepted reply sends the command (None: nowhere, the error goes to the client)
    and whether ASKING must precede it. Anything but ASK (MOVED, a node down, CLUSTERDOWN) makes the map be
    read again: the slot moved, or a replica may be taking over."""
    kind, where, asking = redirect_target(frame[1:].decode(errors="replace").strip(), sender)
    if kind != "ASK":
        router.request_refresh()
    return (router.address(where) if where is not None else None), asking


def _answered(router: Router, frame: bytes, argv: list[bytes], sender: StoreAddress) -> bytes:
    """A node's error frame as the client gets it: a CLUSTERDOWN with the slot and the node named."""
    if not frame.startswith(_CLUSTERDOWN):
        return frame
    message = frame[1:].decode(errors="replace").strip()
    return _error_frame(AIError(clusterdown_named(message, router.keys_of(argv), sender)))


def _error_frame(exc: AIError) -> bytes:
    return b"-" + exc.message.replace("\r\n", " ").encode() + b"\r\n"


class _ShardLeave:
    """One client's bare SUNSUBSCRIBE, sent to each node holding some of its shard channels: each node's
    confirmations are gathered, then the client slot gets them joined (``shard_channels_left``), as one Redis
    holding every channel would answer."""

    def __init__(self, target: ReplySlot, parts: int) -> None:
        self._target = target
        self._frames: list[list[bytes] | None] = [None] * parts

    def part(self, index: int) -> ReplySlot:
        return _ShardLeavePart(self, index)

    def show(self) -> None:
        self._target.show()

    def arrived(self, index: int, frames: list[bytes]) -> None:
        """Node ``index`` sent all its frames (a second call, as when its connection is lost after: ignored)."""
        if self._frames[index] is not None:
            return
        self._frames[index] = frames
        if all(part is not None for part in self._frames):
            self._target.fill(shard_channels_left([part for part in self._frames if part is not None]))


class _ShardLeavePart(ReplySlot):
    """A node's slot of a ``_ShardLeave``: its frames collected, handed over once the node sent them all."""

    __slots__ = ("_index", "_leave")

    def __init__(self, leave: _ShardLeave, index: int) -> None:
        super().__init__()
        self._leave = leave
        self._index = index

    def show(self) -> None:
        self._leave.show()

    def add_frame(self, data: bytes) -> None:
        super().add_frame(data)
        if self.done:
            self._leave.arrived(self._index, self.chunks)

    def fill(self, data: bytes) -> None:
        super().fill(data)
        self._leave.arrived(self._index, self.chunks)

    def finish(self) -> None:
        super().finish()
        self._leave.arrived(self._index, self.chunks)


class SharedRelay(Relayer):
    """The stateless relayed commands of every session-less client, over its router's nodes (see the module
    docstring). ``home``: a single store's one connection (to this relay's database); a cluster's node
    connections are its router's (``Router.relay``)."""

    def __init__(self, router: Router, home: NodeRelay | None = None) -> None:
        self._router = router
        self._home = home

    def send(self, argv: list[bytes], slot: ReplySlot, sink: SessionSink) -> None:
        self._router.route(self, argv, slot, sink)

    def straight(self, argv: list[bytes], slot: ReplySlot, sink: object) -> None:
        home = self._home
        assert home is not None  # (a router with one node is given one)
        home.send(argv, slot, cast(SessionSink, sink))

    def routed(self, argv: list[bytes], slot: ReplySlot, sink: object) -> None:
        """To the primary of the keys' slot, or to every primary (DBSIZE …); redirects followed."""
        to = cast(SessionSink, sink)
        fan_out = fan_out_name(argv[0].lower(), argv)
        if fan_out is not None:
            primaries = self._router.primaries()
            fan = FanOut(slot, fan_out, len(primaries))
            for index, address in enumerate(primaries):
                self._node(address).send(argv, fan.part(index), to)
            return
        try:
            address = self._router.primary_for(self._router.command_slot(argv))
        except AIError as exc:
            slot.fill(_error_frame(exc))
            asyncio.get_running_loop().call_soon(to.flush)
            return
        self._forward(address, argv, slot, to, MAX_REDIRECTS)

    def _node(self, address: StoreAddress) -> NodeRelay:
        return cast(NodeRelay, self._router.relay(address))

    def _forward(self, address: StoreAddress, argv: list[bytes], slot: ReplySlot, sink: SessionSink,
                 redirects_left: int) -> None:
        def redirect(frame: bytes) -> bytes | None:
            target, asking = _redirected_to(self._router, frame, address)
            if target is None or redirects_left <= 0:
                return _answered(self._router, frame, argv, address)
            if asking:
                self._node(target).send([b"ASKING"], ReplySlot(), sink)
            self._forward(target, argv, slot, sink, redirects_left - 1)
            return None

        self._node(address).send(argv, ForwardSlot(slot, redirect), sink)

    def connections(self) -> list[UpstreamConnection]:
        """The connections it holds itself (a cluster's are its router's)."""
        return [] if self._home is None else [self._home]

    def close(self) -> None:
        if self._home is not None:
            self._home.close()


class ClientSession(Relayer):
    """A client's own connections to the store's nodes (see the module docstring). ``home``: a single store's
    one connection; a cluster's are opened per node on first use."""

    def __init__(self, router: Router, sink: SessionSink, home: NodeSession | None = None) -> None:
        self._router = router
        self._sink = sink
        self._home = home
        self._nodes: dict[tuple[str, int], NodeSession] = {}  # a cluster's, by node
        self._all: list[NodeSession] = [] if home is None else [home]
        self._proto = 2
        self._in_multi = False
        self._pinned: StoreAddress | None = None  # the node of the open transaction / WATCHed keys
        self._held: list[tuple[list[bytes], ReplySlot]] = []  # MULTI and keyless commands before a node is known
        router.watch_session(self, self._watched)  # a cluster node that hangs fails its commands in bounded time

    def subscribed(self) -> bool:
        for node in self._all:
            if node.subscribed():
                return True
        return False

    def subscription_counts(self) -> tuple[int, int, int]:
        """Summed over its nodes: channels and patterns live on one, shard channels on their shards' nodes."""
        counts = [node.subscription_counts() for node in self._all]
        return sum(c[0] for c in counts), sum(c[1] for c in counts), sum(c[2] for c in counts)

    def blocks_for_ever(self, slot: ReplySlot) -> bool:
        """Whether ``slot``'s command waits on one of its nodes as a blocking command with no timeout."""
        return any(node.blocks_for_ever(slot) for node in self._all)

    def send(self, argv: list[bytes], slot: ReplySlot) -> None:
        self._router.route(self, argv, slot, self._sink)

    def straight(self, argv: list[bytes], slot: ReplySlot, sink: object) -> None:
        home = self._home
        assert home is not None  # (a router with one node is given one)
        home.send(argv, slot)

    def routed(self, argv: list[bytes], slot: ReplySlot, sink: object) -> None:
        name = argv[0].lower()
        if name == b"multi" and self._in_multi and self._pinned is None:
            slot.fill(b"-" + msgs.NESTED_MULTI_MSG.encode() + b"\r\n")  # what the node would answer
            asyncio.get_running_loop().call_soon(self._sink.flush)
            return
        if name == b"sunsubscribe" and len(argv) == 1 and not self._in_multi:
            self._leave_shard_channels(argv, slot)
            return
        in_transaction = self._in_multi
        try:
            address = self._destination(name, argv)
        except AIError as exc:
            self._refuse(exc, slot)
            return
        if self._in_multi and address is None:
            self._hold(name, argv, slot)
        elif address is not None:
            self._release_held(address)
            if name == b"scan" and not in_transaction:
                self._scan(argv, slot)
            elif not in_transaction and (fan_out := fan_out_name(name, argv)) is not None:
                self._fan_out(fan_out, argv, slot)
            else:
                self._to_node(address, argv, slot, 0 if in_transaction else MAX_REDIRECTS)
        self._follow(name)

    def _destination(self, name: bytes, argv: list[bytes]) -> StoreAddress | None:
        """The node for ``argv``; None while a transaction waits for its first keyed command. Inside MULTI
        every command goes to the transaction's node (queued there), whatever it is."""
        if name == b"multi":
            self._in_multi = True
            return self._pinned
        if not self._in_multi and name in _HOME_COMMANDS:
            return self._router.primary_for(None)
        slot = self._router.command_slot(argv)
        if slot is None:
            if self._pinned is None and self._in_multi and name not in (b"exec", b"discard"):
                return None
            return self._pinned or self._router.primary_for(None)
        address = self._router.primary_for(slot)
        pinned = self._pinned
        if pinned is not None and (self._in_multi or name == b"watch") and \
                (address.host, address.port) != (pinned.host, pinned.port):
            raise CrossSlot()
        if self._in_multi or name == b"watch":
            self._pinned = address
        return address

    def _leave_shard_channels(self, argv: list[bytes], slot: ReplySlot) -> None:
        """A bare SUNSUBSCRIBE: each shard channel lives on its own node, so every node holding some of this
        client's is sent one (a single node's would leave only its own, and answer 0 while others stay); none
        held anywhere, the first primary answers its one confirmation with a nil channel and 0."""
        holding = [node for node in self._nodes.values() if node.subscription_counts()[2]]
        if not holding:
            try:
                self._to_node(self._router.primary_for(None), argv, slot, 0)
            except AIError as exc:  # no primary serves now
                self._refuse(exc, slot)
            return
        leave = _ShardLeave(slot, len(holding))
        for index, node in enumerate(holding):
            node.send(argv, leave.part(index))

    def _hold(self, name: bytes, argv: list[bytes], slot: ReplySlot) -> None:
        """MULTI, and what is queued before the transaction's node is known: answered now (``+OK`` /
        ``+QUEUED``), sent ahead of the first keyed command (or EXEC), their store replies dropped (EXEC's
        reply still holds their results, and EXECABORT if the node refused one)."""
        self._held.append((argv, ReplySlot()))
        slot.fill(b"+OK\r\n" if name == b"multi" else b"+QUEUED\r\n")
        asyncio.get_running_loop().call_soon(self._sink.flush)

    def _refuse(self, exc: AIError, slot: ReplySlot) -> None:
        """CROSSSLOT / an unserved slot: the client's error now; inside MULTI the transaction fails at EXEC."""
        slot.fill(_error_frame(exc))
        if self._in_multi:
            if self._pinned is not None and not self._held:  # the node's MULTI is open: fail it there
                self._node(self._pinned).send(QUEUE_TIME_ERROR, ReplySlot())
            else:
                self._held.append((QUEUE_TIME_ERROR, ReplySlot()))  # EXEC fails wherever it goes
        asyncio.get_running_loop().call_soon(self._sink.flush)

    def _follow(self, name: bytes) -> None:
        if name in (b"exec", b"discard", b"reset", b"unwatch"):
            if name != b"unwatch":
                self._in_multi = False
            if not self._in_multi:
                self._pinned = None

    def _release_held(self, address: StoreAddress) -> None:
        held, self._held = self._held, []
        for argv, slot in held:
            self._to_node(address, argv, slot, 0)

    def _node(self, address: StoreAddress) -> NodeSession:
        where = (address.host, address.port)
        session = self._nodes.get(where)
        if session is None:
            session = self._nodes[where] = NodeSession(self._router.address(address), self._sink)
            self._all.append(session)
            if self._proto != 2:
                session.set_protocol(self._proto)
        return session

    def _to_node(self, address: StoreAddress, argv: list[bytes], slot: ReplySlot, redirects_left: int) -> None:
        """Send ``argv`` to the node; a redirect is followed ``redirects_left`` more times (0: inside MULTI,
        where the node's transaction must see the refusal and fail at EXEC)."""
        def redirect(frame: bytes) -> bytes | None:
            target, asking = _redirected_to(self._router, frame, address)
            if target is None or redirects_left <= 0:
                return _answered(self._router, frame, argv, address)
            if argv[0].lower() == b"watch":
                self._pinned = target  # the transaction that follows goes where the watched keys are
            if asking:
                self._node(target).send([b"ASKING"], ReplySlot())
            self._to_node(target, argv, slot, redirects_left - 1)
            return None

        self._node(address).send(argv, ForwardSlot(slot, redirect))

    def _fan_out(self, name: bytes, argv: list[bytes], slot: ReplySlot) -> None:
        primaries = self._router.primaries()
        fan = FanOut(slot, name, len(primaries))
        for index, address in enumerate(primaries):
            self._node(address).send(argv, fan.part(index))

    def _scan(self, argv: list[bytes], slot: ReplySlot) -> None:
        primaries = self._router.primaries()
        parsed = split_scan_cursor(argv[1]) if len(argv) > 1 else None
        if parsed is not None and parsed[0] >= len(primaries):
            self._refuse(AIError(msgs.INVALID_CURSOR_MSG), slot)
            return
        if parsed is None:
            self._to_node(self._router.primary_for(None), argv, slot, 0)  # the node's own error text
            return
        index, node_cursor = parsed
        slot.transform = scan_reply_rewriter(index, len(primaries))
        self._to_node(primaries[index], [argv[0], node_cursor, *argv[2:]], slot, 0)

    def set_protocol(self, proto: int) -> None:
        self._proto = proto
        for session in self._all:
            session.set_protocol(proto)

    def connections(self) -> list[NodeSession]:
        """Every connection it opened (a single store's stall watch reads them: server/store/stall_watch.py)."""
        return list(self._all)

    def _watched(self) -> list[tuple[StoreAddress, NodeSession]]:
        return [(session.address, session) for session in self._nodes.values()]

    def close(self) -> None:
        self._router.unwatch_session(self)
        for session in self._all:
            session.close()
        self._nodes.clear()
        self._all.clear()
