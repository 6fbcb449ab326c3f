"""The keyspace's link to the store: one ``pipeline`` call spread over the shards that own its keys. A single
store is a cluster of one shard: its ``Router`` (``OneNode``) sends every call to its one node's link as it is.

On a cluster (``ClusterState``, server/store/cluster_state.py), each command goes to the primary of its keys'
slot (a MULTI … EXEC block as one unit, by the slot of the commands inside it); the commands for one node leave
in that node's pipelined link (``RedisLink``), and the nodes are asked in parallel, one round trip each.
Replies come back in the caller's order. MOVED is followed after a topology refresh, ASK with ASKING,
TRYAGAIN after a short pause — each at most ``MAX_REDIRECTS`` times — and a node that cannot be reached answers
its commands with the error naming it, and makes the map be read again.

The same router carries the relayed commands (server/store/relays.py): ``Router.route`` hands each to its
``Relayer`` straight (a single node) or to be routed by its keys' slot (a cluster).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Final

from backends import errors as msgs
from backends.errors import AIError
from server.protocol.slot import ReplySlot
from server.store.atomic import ScriptCall
from server.store.cluster_keys import CrossSlot, common_slot
from server.store.nodes import NodeMap
from server.store.slot_writes import WritePlan, one_write
from server.store.upstream import (
    FrameReader,
    PendingReplies,
    StoreAddress,
    UpstreamConnection,
    UpstreamProtocol,
    ValueReader,
    Watched,
)

MAX_REDIRECTS: Final = 5
TRYAGAIN_PAUSE_S: Final = 0.02
SPREAD: Final = -1  # not a slot: commands for several slots (or a key error), sent the general way

Unit = list[int]  # indices into the caller's commands that must run together on one node
# each node's units (and whether each goes after ASKING), in the order the nodes first came: a request has one
# to three, found by identity first (no address hashed per request)
Batches = list[tuple[StoreAddress, list[tuple[Unit, bool]]]]


class RedisLink(UpstreamConnection):
    """One node's pipelined connection (to one database of it): many requests in flight, replies in order.

    One future per ``pipeline`` call (not one per command and a gather), and the commands of every call made
    in one loop iteration leave in one write: many clients' reads and writes share a syscall. A big argument
    (a tensor) goes out as its own buffer of a vectored write, never joined into a copy."""

    def __init__(self, address: StoreAddress, db: int) -> None:
        super().__init__(address, db)
        self._pending = PendingReplies()

    def _new_reader(self) -> FrameReader | ValueReader:
        return ValueReader()

    def _attach(self, upstream: UpstreamProtocol) -> None:
        upstream.on_reply = self._pending.deliver

    def pipeline(self, commands: list[list[bytes]]) -> Awaitable[list[Any]]:
        """The replies of ``commands`` (error replies as AIError values); the store down, AIError raised. The
        future itself, no coroutine a call (compiled, each level of coroutines costs its creation and a step
        per resumption on every request)."""
        if commands:
            return self.submit(commands)
        return _no_replies()

    def submit(self, commands: list[list[bytes]]) -> asyncio.Future[list[Any]]:
        """Queue ``commands`` and return the future of their replies: several links' futures can be in flight
        at once and awaited one after the other, with no Task per link (``ClusterLink._send_all``). Not
        connected yet, they wait in the outbox for the connection that is being made."""
        replies = self._pending.expect(len(commands))
        if not self._outbox:
            replies.get_loop().call_soon(self._flush)  # (get_running_loop() would cost a getpid() syscall)
        for argv in commands:
            self._queue(argv)
        if self._upstream is None:
            self._start_connecting()
        return replies

    def submit_packed(self, count: int, buffers: list[bytes | memoryview]) -> asyncio.Future[list[Any]]:
        """``submit`` of ``count`` commands already in RESP (``pack_parted``'s buffers), queued as they are."""
        replies = self._pending.expect(count)
        if not self._outbox:
            replies.get_loop().call_soon(self._flush)
        self._outbox.extend(buffers)
        self._vectored = True
        if self._upstream is None:
            self._start_connecting()
        return replies

    def oldest_pending(self) -> object | None:
        return self._pending.oldest()  # (the AI commands' calls never block)

    def _fail_all(self, detail: str) -> None:
        self._drop_outbox()
        self._pending.fail_all(AIError(msgs.UPSTREAM_DOWN_MSG.format(detail=detail)))


async def _no_replies() -> list[Any]:
    return []


class Router(NodeMap):
    """Where the commands of a key go: the shards of the store and the node of each. A cluster's slot map
    (``ClusterState``), or a single store's one node (``OneNode``: ``only`` is its link, and every command goes
    there). The defaults are a single node's: no slots, no redirects, nothing to refresh, one node numbered 0
    (``NodeMap``, what the coherent cache asks); a derived key needs no hash tag, and a write is one script call
    (the keyspace asks these, never which kind of store it is on)."""

    def __init__(self, only: RedisLink | None = None) -> None:
        self.only = only

    @abstractmethod
    def shards(self) -> list[RedisLink]:
        """One link per primary, for what must visit every shard (SCAN)."""

    @abstractmethod
    def node_for(self, key: bytes) -> object:
        """The node serving ``key`` now: the same object for every key it serves (None: no node does now)."""

    @abstractmethod
    def primary_for(self, slot: int | None) -> StoreAddress:
        """The node a command of ``slot`` goes to (None: keyless); AIError when no node serves it."""

    @abstractmethod
    def link(self, address: StoreAddress) -> RedisLink:
        """The pipelined link to the node at ``address``."""

    def slot_of(self, argv: list[bytes]) -> int | AIError | None:
        """The slot of ``argv``'s keys (None: keyless, or a store without slots); CROSSSLOT as a value."""
        return None

    def key_link(self, key: bytes) -> RedisLink | None:
        """The link to the node serving ``key`` as this map has it (None: no node does now)."""
        if self.only is not None:
            return self.only
        slot = self.slot_of([b"GET", key])
        if isinstance(slot, AIError):
            return None
        try:
            return self.link(self.primary_for(slot))
        except AIError:
            return None

    def keys_of(self, argv: list[bytes]) -> list[bytes]:
        return []

    def address(self, where: StoreAddress) -> StoreAddress:
        """A node named by a redirect, with our login settings."""
        return where

    async def refreshed(self) -> None:
        """Wait until the map was read again."""

    @abstractmethod
    def close(self) -> None:
        """Close every link."""

    def untagged(self, name: bytes) -> bytes:
        """``name`` without the hash tag a cluster put before it (an older release's counters key); as it is
        on a single store."""
        return name

    def in_slot_of(self, keys: Sequence[bytes], key: bytes) -> bool:
        """Whether every one of ``keys`` is in ``key``'s slot (always, on a single store)."""
        return True

    def write_plan(self, keys: Sequence[bytes], values: list[bytes], empty_is_free: bool,
                   model: tuple[bytes, str] | None, guards: Sequence[tuple[bytes, str]],
                   inputs: Sequence[tuple[bytes, bytes]], counters: Sequence[ScriptCall]) -> WritePlan:
        """How a write of tensors is made (server/store/slot_writes.py): on a single store one SET_TENSORS call
        holding every check, cached input and AI.INFO counter, nothing apart."""
        return one_write(keys, values, empty_is_free, model, guards, inputs, counters)

    def route(self, via: Relayer, argv: list[bytes], slot: ReplySlot, sink: object) -> None:
        """Send a relayed command by ``via`` (server/store/relays.py): a single node's straight to its one
        connection, nothing hashed or wrapped (a cluster routes it by its keys' slot: ``via.routed``)."""
        via.straight(argv, slot, sink)

    @abstractmethod
    def primaries(self) -> Sequence[StoreAddress]:
        """Every primary's address, for what a relayed command visits on every shard (KEYS, SCAN …)."""

    def command_slot(self, argv: list[bytes]) -> int | None:
        """The slot of a relayed command's keys (None: keyless, or a store without slots); CROSSSLOT raised."""
        return None

    def relay(self, address: StoreAddress) -> UpstreamConnection:
        """The shared relay connection to the node at ``address``. Only a cluster's routing asks for it
        (``SharedRelay.routed``, reached through ``ClusterState.route``); a single store's shared relay holds its
        one connection itself and is never routed, so a single store has none to give."""
        raise NotImplementedError

    def watch_session(self, owner: object, source: Callable[[], Iterable[tuple[StoreAddress, Watched]]]) -> None:
        """A client's own connections, for a watchdog of the router's (a single store's stall watch finds them
        through the clients: server/store/stall_watch.py)."""

    def unwatch_session(self, owner: object) -> None:
        """No longer watch ``owner``'s connections."""


class OneNode(Router):
    """A single store: one shard, one node, one link (a database of it)."""

    def __init__(self, link: RedisLink) -> None:
        super().__init__(link)
        self._link = link

    def shards(self) -> list[RedisLink]:
        return [self._link]

    def node_for(self, key: bytes) -> object:
        return self._link

    def primary_for(self, slot: int | None) -> StoreAddress:
        return self._link.address

    def link(self, address: StoreAddress) -> RedisLink:
        return self._link

    def close(self) -> None:
        self._link.close()

    def primaries(self) -> Sequence[StoreAddress]:
        return [self._link.address]

    def node_address(self, number: int) -> StoreAddress:
        return self._link.address


def redirect_target(message: str, sender: StoreAddress) -> tuple[str, StoreAddress | None, bool]:
    """(kind, where, asking) of a MOVED / ASK error text; kind '' when it is neither. An empty host (a node
    announcing no endpoint) means the host of the node that answered, as in Redis Cluster clients."""
    parts = message.split()
    if len(parts) != 3 or parts[0] + " " not in (msgs.MOVED_PREFIX, msgs.ASK_PREFIX):
        return "", None, False
    host, _, port = parts[2].rpartition(":")
    if not port.isdigit():
        return "", None, False
    return parts[0], StoreAddress(host=host or sender.host, port=int(port)), parts[0] == "ASK"


def is_redirect(reply: Any) -> bool:
    return isinstance(reply, AIError) and reply.message.startswith((msgs.MOVED_PREFIX, msgs.ASK_PREFIX))


def is_retry_later(reply: Any) -> bool:
    """TRYAGAIN: a multi-key command during a slot migration; the same command may succeed soon."""
    return isinstance(reply, AIError) and reply.message.startswith("TRYAGAIN")


class ClusterLink:
    """The keyspace's ``StoreLink`` over every shard of a ``Router`` (see the module docstring)."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self._only = router.only

    def shards(self) -> list[RedisLink]:
        """One link per primary, for what must visit every shard (SCAN)."""
        return self.router.shards()

    def close(self) -> None:
        self.router.close()

    def pipeline(self, commands: list[list[bytes]]) -> Awaitable[list[Any]]:
        """The replies of ``commands`` in the caller's order (error replies as AIError values; a node down,
        AIError raised). One node: its link's future itself, no coroutine a call."""
        only = self._only
        if only is not None:
            return only.pipeline(commands)
        return self._routed(commands)

    async def _routed(self, commands: list[list[bytes]]) -> list[Any]:
        slots = [self.router.slot_of(argv) for argv in commands]
        common = _common(slots)
        if common != SPREAD:  # the common case: every command for one slot (or keyless): no routing tables
            node = self._node(common)
            if node is not None:  # (here, not in a coroutine of its own: one generator less per request)
                address, link = node
                try:
                    replies = await link.submit(commands)
                except AIError as exc:
                    self.router.request_refresh()
                    return [exc] * len(commands)
                if _any_error(replies):  # a redirect or error reply continues the general way from this send
                    sent: Batches = [(address, [(unit, False) for unit in _units(commands)])]
                    self._deliver(address, commands, sent[0][1], list(replies), replies)
                    await self._follow(commands, sent, replies, sent=True)
                return replies
        replies = [None] * len(commands)
        pending = self._route(slots, _units(commands), replies)
        await self._send_all(commands, pending, replies)  # here, not in _follow: one coroutine fewer a request
        if _any_error(replies):
            await self._follow(commands, pending, replies, sent=True)
        return replies

    def _node(self, slot: int | None) -> tuple[StoreAddress, RedisLink] | None:
        """The primary of ``slot`` (None: keyless) and its link; None when no node serves the slot (the general
        way then names the slot in its error)."""
        try:
            address = self.router.primary_for(slot)
        except AIError:
            return None
        return address, self.router.link(address)

    async def _follow(self, commands: list[list[bytes]], pending: Batches, replies: list[Any],
                      sent: bool = False) -> None:
        """Send ``pending`` (unless already ``sent``), then follow MOVED / ASK / TRYAGAIN a few times."""
        for attempt in range(MAX_REDIRECTS + 1):
            if not pending:
                break
            if not sent:
                await self._send_all(commands, pending, replies)
                if not _any_error(replies):
                    return
            sent = False
            pending, moved, later = self._redirected(pending, replies, final=attempt == MAX_REDIRECTS)
            if moved:
                await self.router.refreshed()
            elif later:
                await asyncio.sleep(TRYAGAIN_PAUSE_S)

    def _route(self, slots: list[int | AIError | None], units: list[Unit], replies: list[Any]) -> Batches:
        by_node: Batches = []
        for unit in units:
            try:
                address = self.router.primary_for(_unit_slot([slots[i] for i in unit]))
            except AIError as exc:
                for i in unit:
                    replies[i] = exc
                continue
            _add(by_node, address, (unit, False), False)
        return by_node

    async def _send_all(self, commands: list[list[bytes]], pending: Batches, replies: list[Any]) -> None:
        """Every node's batch is queued first (on a live link: at once, no Task), then each is awaited in turn:
        the round trips overlap, the loop writes all of them in the same iteration, and replies that came in
        together cost one wake-up (a later node's future is done by the time the first one's wakes us)."""
        in_flight = []
        for address, units in pending:
            batch = _batch(commands, units)
            in_flight.append((address, units, batch, self.router.link(address).submit(batch)))
        for address, units, batch, future in in_flight:
            try:
                answers = await future
            except AIError as exc:
                self.router.request_refresh()  # a node that fails may have been replaced by its replica
                answers = [exc] * len(batch)
            self._deliver(address, commands, units, answers, replies)

    def _deliver(self, address: StoreAddress, commands: list[list[bytes]], units: list[tuple[Unit, bool]],
                 answers: list[Any], replies: list[Any]) -> None:
        position = 0
        for unit, asking in units:
            position += asking
            for i in unit:
                answer = answers[position]
                replies[i] = self._named(answer, commands[i], address) if isinstance(answer, AIError) else answer
                position += 1

    def _named(self, reply: AIError, argv: list[bytes], address: StoreAddress) -> AIError:
        """A node's bare CLUSTERDOWN (``Hash slot not served``, ``The cluster is down``…) with the slot and the
        node named; any CLUSTERDOWN makes the map be read again (the node lost slots or quorum)."""
        if not reply.message.startswith(msgs.CLUSTERDOWN_PREFIX):
            return reply
        self.router.request_refresh()
        return AIError(clusterdown_named(reply.message, self.router.keys_of(argv), address))

    def _redirected(self, sent: Batches, replies: list[Any], final: bool) -> tuple[Batches, bool, bool]:
        """The units to send again, and where (MOVED/ASK: to the node named, TRYAGAIN: to the same one); and
        whether a MOVED came (read the map first) or a TRYAGAIN (wait a little)."""
        again: Batches = []
        moved = later = False
        for address, units in sent:
            for unit, asking_before in units:
                redirect = next((replies[i] for i in unit if is_redirect(replies[i])), None)
                if redirect is not None and not final:
                    kind, where, asking = redirect_target(redirect.message, address)
                    moved = moved or kind == "MOVED"
                    if where is not None:
                        _add(again, self.router.address(where), (unit, asking), True)
                elif any(is_retry_later(replies[i]) for i in unit) and not final:
                    later = True
                    _add(again, address, (unit, asking_before), True)  # (sent after ASKING: again after it)
        return again, moved, later


def clusterdown_named(message: str, keys: Sequence[bytes], address: StoreAddress) -> str:
    """``message`` (a node's CLUSTERDOWN error) completed with the slot of ``keys`` (when they have one) and the
    node that answered it; a message completed already is left as it is."""
    if message.endswith(")"):
        return message
    node = f"{address.host}:{address.port}"
    try:
        slot = common_slot(keys) if keys else None
    except CrossSlot:
        slot = None
    if slot is None:
        return msgs.NODE_CLUSTERDOWN_KEYLESS_FMT.format(message=message, node=node)
    return msgs.NODE_CLUSTERDOWN_FMT.format(message=message, slot=slot, node=node)


def _common(slots: list[int | AIError | None]) -> int | None:
    """The one slot of ``slots`` (None: all keyless); SPREAD when there are several, or one is an error (no
    exception raised: a run over three shards comes here every time)."""
    found: int | None = None
    for slot in slots:
        if isinstance(slot, AIError) or (slot is not None and found is not None and slot != found):
            return SPREAD
        if slot is not None:
            found = slot
    return found


def _any_error(replies: list[Any]) -> bool:
    """Whether any reply is an error (an index loop: ``any`` of a generator builds one per call)."""
    for i in range(len(replies)):
        if isinstance(replies[i], AIError):
            return True
    return False


def _unit_slot(slots: list[int | AIError | None]) -> int | None:
    """The one slot of a unit's commands (None: all keyless); their CROSSSLOT, or a new one across them."""
    common = _common(slots)
    if common != SPREAD:
        return common
    raise next((slot for slot in slots if isinstance(slot, AIError)), CrossSlot())


def _add(batches: Batches, address: StoreAddress, unit: tuple[Unit, bool], equal_too: bool) -> None:
    """``unit`` into ``address``'s batch, or a new one. The map's addresses are one object per node; a
    redirect's are made from its text (``equal_too``: compare their fields too)."""
    for node, units in batches:
        if node is address or (equal_too and node == address):
            units.append(unit)
            return
    batches.append((address, [unit]))


def _batch(commands: list[list[bytes]], units: list[tuple[Unit, bool]]) -> list[list[bytes]]:
    batch: list[list[bytes]] = []
    for unit, asking in units:
        if asking:
            batch.append([b"ASKING"])
        for i in unit:
            batch.append(commands[i])
    return batch


def _units(commands: Sequence[Sequence[bytes]]) -> list[Unit]:
    """Each command alone, except MULTI … EXEC/DISCARD, which stays together."""
    units: list[Unit] = []
    block: Unit | None = None
    for i in range(len(commands)):
        name = _block_word(commands[i])
        if block is not None:
            block.append(i)
            if name in (b"EXEC", b"DISCARD"):
                units.append(block)
                block = None
        elif name == b"MULTI":
            block = [i]
        else:
            units.append([i])
    if block is not None:
        units.append(block)
    return units


def _block_word(argv: Sequence[bytes]) -> bytes:
    """The command's name in upper case when it may be MULTI, EXEC or DISCARD, else b"" (no ``upper()`` for the
    rest: our own EVALSHA and GET, most of all)."""
    if not argv:
        return b""
    name = argv[0]
    size = len(name)
    if (size != 4 and size != 5 and size != 7) or name == b"EVALSHA":
        return b""
    return name.upper()


class Relayer(ABC):
    """What relays a client's commands over a ``Router`` (the shared relay, a client's session:
    server/store/relays.py). The router picks the way: ``straight`` to a single store's one connection, or
    ``routed`` by the keys' slot over a cluster's nodes (redirects followed, fan-out, pinned transactions)."""

    @abstractmethod
    def straight(self, argv: list[bytes], slot: ReplySlot, sink: object) -> None:
        """Send ``argv`` to the one node, its reply into ``slot``."""

    @abstractmethod
    def routed(self, argv: list[bytes], slot: ReplySlot, sink: object) -> None:
        """Send ``argv`` where its keys' slot is served, its reply into ``slot``."""
