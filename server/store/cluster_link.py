"""The keyspace's link to a Redis Cluster: one ``pipeline`` call spread over the shards that own its keys.

Each command goes to the primary of its keys' slot (a MULTI … EXEC block as one unit, by the slot of the
commands inside it); the commands for one node leave in that node's pipelined link, and the nodes are asked
in parallel, one round trip each. Replies come back in the caller's order. MOVED is followed after a topology
refresh, ASK with ASKING, TRYAGAIN after a short pause — each at most ``MAX_REDIRECTS`` times — and a node
that cannot be reached answers its commands with the error naming it, and makes the map be read again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Final

from backends import errors as msgs
from backends.errors import AIError
from server.store.cluster_keys import CrossSlot, common_slot
from server.store.cluster_state import ClusterState, is_redirect, is_retry_later, redirect_target
from server.store.keyspace import StoreLink
from server.store.redis import RedisLink
from server.store.upstream import StoreAddress

MAX_REDIRECTS: Final = 5
TRYAGAIN_PAUSE_S: Final = 0.02
SPREAD: Final = -1  # not a slot: commands for several slots (or a key error), sent the general way

Unit = list[int]  # indices into the caller's commands that must run together on one node
# each node's units (and whether each goes after ASKING), in the order the nodes first came: a request has one
# to three, found by identity first (no address hashed per request)
Batches = list[tuple[StoreAddress, list[tuple[Unit, bool]]]]


class ClusterLink:
    """A StoreLink over every shard (see the module docstring)."""

    def __init__(self, cluster: ClusterState) -> None:
        self._cluster = cluster

    def shards(self) -> Sequence[StoreLink]:
        """One link per primary, for what must visit every shard (SCAN)."""
        return [self._cluster.link(address) for address in self._cluster.topology.primaries]

    def node_of(self, key: bytes) -> object:
        """The primary serving ``key``'s slot (the map's one address object a node), or None when none does."""
        try:
            return self._cluster.primary_for(self._cluster.tags.slot(key))
        except AIError:
            return None

    async def pipeline(self, commands: list[list[bytes]]) -> list[Any]:
        slots = [self._slot(argv) for argv in commands]
        common = _common(slots)
        if common != SPREAD:  # the common case: every command for one slot (or keyless): no routing tables
            live = self._live_node(common)
            if live is not None:  # (here, not in a coroutine of its own: one generator less per request)
                address, link = live
                try:
                    replies = await link.submit(commands)
                except AIError as exc:
                    self._cluster.request_refresh()
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

    def _slot(self, argv: list[bytes]) -> int | AIError | None:
        try:
            tags = self._cluster.tags
            if len(argv) > 1 and (argv[0] == b"GET" or argv[0] == b"HMGET"):  # our reads: the key, then fields
                return tags.slot(argv[1])
            if len(argv) > 3 and argv[0] == b"EVALSHA":  # our scripts: the keys follow their count (no key-spec lookup)
                if argv[2] == b"1":
                    return tags.slot(argv[3])
                count = int(argv[2]) if argv[2].isdigit() else -1
                if 0 <= count <= len(argv) - 3:
                    return tags.common(argv[3 : 3 + count])
            return self._cluster.keys.slot(argv)
        except CrossSlot as exc:
            return exc

    def _live_node(self, slot: int | None) -> tuple[StoreAddress, RedisLink] | None:
        """The primary of ``slot`` (None: keyless) and its link, when connected; None: the slot unserved, or the
        node not connected yet — the general way then (it connects, or names the slot in its error)."""
        try:
            address = self._cluster.primary_for(slot)
        except AIError:
            return None
        link = self._cluster.link(address)
        return (address, link) if link.connected else None

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
                await self._cluster.refreshed()
            elif later:
                await asyncio.sleep(TRYAGAIN_PAUSE_S)

    def _route(self, slots: list[int | AIError | None], units: list[Unit], replies: list[Any]) -> Batches:
        by_node: Batches = []
        for unit in units:
            try:
                address = self._cluster.primary_for(_unit_slot([slots[i] for i in unit]))
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
            link = self._cluster.link(address)
            future = link.submit(batch) if link.connected else None
            in_flight.append((address, units, batch, future))
        for address, units, batch, future in in_flight:
            try:
                answers = await (future if future is not None else self._cluster.link(address).pipeline(batch))
            except AIError as exc:
                self._cluster.request_refresh()  # a node that fails may have been replaced by its replica
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
        self._cluster.request_refresh()
        return AIError(clusterdown_named(reply.message, self._cluster.keys.keys(argv), address))

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
                        _add(again, self._cluster.address(where), (unit, asking), True)
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
