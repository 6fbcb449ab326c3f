"""What every cluster connection of one server shares: the topology, the key finder, one pipelined link and
one shared relay per primary, and the refresh that follows the cluster after MOVED or a failover.

A refresh asks the known primaries, then the seeds, for CLUSTER SHARDS (CLUSTER SLOTS on a store too old for
it); one runs at a time, and a burst of MOVED replies costs one. It is the links' ``Router``
(server/store/cluster_link.py): the slot of a command, the primary of a slot, each node's link. A node that
leaves a command unanswered too long is
given up on (server/store/cluster_watch.py); ``on_change`` callbacks hear of every new map (the metadata
cache drops what it holds: server/store/cache.py). Each primary gets a small number, and each slot's number is
looked up once per map (``node_number``): the cache keeps each node's entries apart by it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, Protocol, TypeVar

from backends import errors as msgs
from backends.errors import AIError
from server.protocol.slot import ReplySlot
from server.store.atomic import ScriptCall
from server.store.cluster_keys import SLOTS, CrossSlot, KeyFinder, SlotTags
from server.store.cluster_link import RedisLink, Relayer, Router
from server.store.cluster_topology import Topology, node_address, parse_shards, parse_slots
from server.store.cluster_watch import HungNodeWatch
from server.store.deadline import within
from server.store.node_connections import NodeRelay
from server.store.nodes import SEVERAL_NODES, UNROUTED
from server.store.slot_writes import WritePlan, slot_write_plan
from server.store.upstream import StoreAddress, Watched

REFRESH_GAP_S: Final = 0.05  # at most one topology read per 50 ms: a failover's burst of errors costs a few
REFRESH_EVERY_S: Final = 5.0  # and one every 5 s regardless: a primary that hangs (no error, no MOVED) is noticed
TOPOLOGY_TIMEOUT_S: Final = 2.0  # a node that does not answer the map query within this is skipped
LINK_MEMO_SIZE: Final = 256  # address objects whose link is known by identity, before that memo starts over
UNKNOWN: Final = -3  # a slot's node number not looked up since the map last changed


class ClusterState(Router):
    """The cluster as this server knows it now, as the links' router (see the module docstring)."""

    def __init__(self, seed: StoreAddress, extra_seeds: Sequence[StoreAddress] = (),
                 node_timeout_ms: int = 3000) -> None:
        super().__init__()
        self.seed = seed
        self._seeds = [node_address(seed, seed.host, seed.port),
                       *(node_address(seed, s.host, s.port) for s in extra_seeds)]
        # not ``(-1,) * 16384``: mypy types that as a tuple of 16384 ints, and mypyc ran out of memory on it
        self.topology = Topology((), tuple([-1] * 16384))
        self.keys = KeyFinder({})
        self._tags: SlotTags | None = None
        self._links: dict[tuple[str, int], RedisLink] = {}
        # each address object's link, by its identity (a request asks for several: no tuple built and hashed);
        # the entry holds the address, so its id is not reused while it stands
        self._link_of: dict[int, tuple[StoreAddress, RedisLink]] = {}
        self._relays: dict[tuple[str, int], NodeRelay] = {}
        # each node's connection for the map query alone: asked on the AI link, it waited behind that link's
        # commands, and its timeout closed the link under them (a node busy for 2 s lost its commands)
        self._map_links: dict[tuple[str, int], RedisLink] = {}
        self._refresh: asyncio.Task[None] | None = None
        self._periodic: asyncio.Task[None] | None = None
        self._watching: asyncio.Task[None] | None = None
        self._refreshed_at = 0.0
        self._doubtful: tuple[str, int] | None = None  # the node whose map was taken while it said cluster_state:fail
        self.watch = HungNodeWatch(node_timeout_ms, lambda _address: self.request_refresh(), self._probe)
        self._probes: dict[tuple[str, int], asyncio.Task[None]] = {}  # each node's PING in flight (``_probe``)
        self._on_change: list[Callable[[], None]] = []
        self._watched: list[Callable[[], Iterable[tuple[StoreAddress, Watched]]]] = []
        self._sessions: dict[int, Callable[[], Iterable[tuple[StoreAddress, Watched]]]] = {}  # clients' own
        self._numbers: dict[tuple[str, int], int] = {}  # each node's number (``node_number``), kept across maps
        self._numbered: list[StoreAddress] = []  # the node of each number
        self._slot_numbers = [UNKNOWN] * SLOTS  # each slot's node number, looked up once per map

    def watch_too(self, source: Callable[[], Iterable[tuple[StoreAddress, Watched]]]) -> None:
        """More connections for the hung-node watchdog (the metadata cache's tracking connections)."""
        self._watched.append(source)

    def watch_session(self, owner: object, source: Callable[[], Iterable[tuple[StoreAddress, Watched]]]) -> None:
        """A client's own connections to the nodes, watched until ``unwatch_session(owner)``."""
        self._sessions[id(owner)] = source

    def unwatch_session(self, owner: object) -> None:
        self._sessions.pop(id(owner), None)

    def on_change(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever the map read differs from the one before (slots moved, a failover)."""
        self._on_change.append(callback)

    @property
    def tags(self) -> SlotTags:
        if self._tags is None:
            self._tags = SlotTags()
        return self._tags

    def address(self, where: StoreAddress) -> StoreAddress:
        """A node named by a redirect, with our login and TLS settings."""
        return node_address(self.seed, where.host, where.port)

    def primary_for(self, slot: int | None) -> StoreAddress:
        """The node a command of ``slot`` goes to (a keyless one: the first primary); CLUSTERDOWN naming the
        slot when no primary serves it."""
        if slot is None:
            return self.topology.primaries[0] if self.topology.primaries else self._seeds[0]
        found = self.topology.primary_of(slot)
        if found is None:
            self.request_refresh()  # during a failover: the replica will take the slot over
            raise AIError(msgs.UNSERVED_SLOT_FMT.format(slot=slot))
        return found

    def shards(self) -> list[RedisLink]:
        return [self.link(address) for address in self.topology.primaries]

    def node_for(self, key: bytes) -> object:
        """The primary serving ``key``'s slot (the map's one address object a node), or None when none does."""
        try:
            return self.primary_for(self.tags.slot(key))
        except AIError:
            return None

    def slot_of(self, argv: list[bytes]) -> int | AIError | None:
        try:
            tags = self.tags
            if len(argv) > 1 and (argv[0] == b"GET" or argv[0] == b"HMGET"):  # our reads: the key, then fields
                return tags.slot(argv[1])
            if len(argv) > 3 and argv[0] == b"EVALSHA":  # our scripts: the keys follow their count (no key-spec lookup)
                if argv[2] == b"1":
                    return tags.slot(argv[3])
                count = int(argv[2]) if argv[2].isdigit() else -1
                if 0 <= count <= len(argv) - 3:
                    return tags.common(argv[3 : 3 + count])
            return self.keys.slot(argv)
        except CrossSlot as exc:
            return exc

    def keys_of(self, argv: list[bytes]) -> list[bytes]:
        return self.keys.keys(argv)

    def link(self, address: StoreAddress) -> RedisLink:
        """The pipelined link to the node at ``address`` (made on first use, kept: it reconnects by itself)."""
        known = self._link_of.get(id(address))
        if known is not None and known[0] is address:
            return known[1]
        where = (address.host, address.port)
        found = self._links.get(where)
        if found is None:
            found = self._links[where] = RedisLink(self.address(address), 0)
        if len(self._link_of) >= LINK_MEMO_SIZE:  # redirects' and refreshes' addresses: bounded
            self._link_of.clear()
        self._link_of[id(address)] = (address, found)
        return found

    def relay(self, address: StoreAddress) -> NodeRelay:
        where = (address.host, address.port)
        if where not in self._relays:
            self._relays[where] = NodeRelay(self.address(address), 0)
        return self._relays[where]

    async def start(self) -> None:
        await self.refresh()
        self._periodic = asyncio.get_running_loop().create_task(self._refresh_periodically())
        self._watching = asyncio.get_running_loop().create_task(self._watch_nodes())
        link = self.link(self.primary_for(None))
        (reply,) = await link.pipeline([[b"COMMAND"]])
        if isinstance(reply, AIError):
            raise reply
        self.keys = KeyFinder.from_command_reply(reply)

    def request_refresh(self) -> None:
        """Read the topology again soon (after MOVED, or a node that did not answer); never two at once."""
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.get_running_loop().create_task(self._refresh_quietly())

    async def refreshed(self) -> None:
        """Wait for the refresh in flight, or make one (after MOVED: go on with the new map)."""
        self.request_refresh()
        assert self._refresh is not None
        await asyncio.shield(self._refresh)

    async def _refresh_periodically(self) -> None:
        while True:
            await asyncio.sleep(REFRESH_EVERY_S)
            self.request_refresh()

    async def _watch_nodes(self) -> None:
        while True:
            await asyncio.sleep(self.watch.tick_s)
            self.watch.check([*((node_address(self.seed, *where), link) for where, link in self._links.items()),
                              *((node_address(self.seed, *where), relay) for where, relay in self._relays.items()),
                              *(channel for source in self._watched for channel in source()),
                              *(channel for source in list(self._sessions.values()) for channel in source())])

    def _probe(self, address: StoreAddress) -> None:
        """A PING to a node that a client's blocking command waits on (one at a time a node), on its AI link:
        unanswered within the node timeout (connecting included), or failed, the node is given up on at the
        watchdog's next check (cluster_watch.py)."""
        where = (address.host, address.port)
        if where not in self._probes:
            task = asyncio.get_running_loop().create_task(self._ping(address, self.link(address)))
            self._probes[where] = task
            task.add_done_callback(lambda _task: self._probes.pop(where, None))

    async def _ping(self, address: StoreAddress, link: RedisLink) -> None:
        replies = asyncio.ensure_future(link.pipeline([[b"PING"]]))
        replies.add_done_callback(_retrieved)
        await asyncio.wait([replies], timeout=self.watch.timeout_ms / 1000)
        if not replies.done() or replies.exception() is not None or isinstance(replies.result()[0], AIError):
            self.watch.unanswered(address)

    async def _refresh_quietly(self) -> None:
        wait = self._refreshed_at + REFRESH_GAP_S - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        try:
            await self.refresh()
        except AIError:
            pass  # every node down: commands keep getting their own errors, and the next one asks again
        except Exception:  # a bug (a map-change callback's …): logged, not raised into the commands that wait
            logging.getLogger(__name__).exception("reading the cluster's slot map failed")

    async def refresh(self) -> None:
        """The topology from the first node that gives it (known primaries first, then the seeds). A node that
        said the cluster is down (``cluster_state:fail``) may be one cut off from the others, still claiming
        slots its replica took over: its map is taken, but the next refresh (which the CLUSTERDOWN errors of a
        stale map bring within ``REFRESH_GAP_S``) asks it last."""
        self._refreshed_at = time.monotonic()
        problems: list[str] = []
        for address in self._asking_order():
            try:
                topology, state_ok = await within(self._read_topology(address), TOPOLOGY_TIMEOUT_S)
            except AIError as exc:
                problems.append(f"{address.host}:{address.port}: {exc.message}")
                continue
            except TimeoutError:
                self._map_link(address).close()  # its reply, if it ever comes, must not answer a later query
                problems.append(f"{address.host}:{address.port}: no answer within {TOPOLOGY_TIMEOUT_S:g}s")
                continue
            if topology.primaries:
                self._take(topology)
                self._doubtful = None if state_ok else (address.host, address.port)
                self._let_go()
                return
            problems.append(f"{address.host}:{address.port}: no slots assigned")
        raise AIError(msgs.NO_TOPOLOGY_FMT.format(detail="; ".join(dict.fromkeys(problems))))

    def _asking_order(self) -> list[StoreAddress]:
        order = [*self.topology.primaries, *self._seeds]
        doubtful = self._doubtful
        if doubtful is None:
            return order
        last = [address for address in order if (address.host, address.port) == doubtful]
        return [address for address in order if (address.host, address.port) != doubtful] + last

    def _take(self, topology: Topology) -> None:
        if topology != self.topology:  # the same map keeps its objects (and their links known by identity)
            self.topology = topology
            self._slot_numbers = [UNKNOWN] * SLOTS
            for callback in self._on_change:
                callback()

    def _let_go(self) -> None:
        """Connections to nodes that are neither primaries in the map nor seeds (a primary replaced by its
        replica, a node removed), once nothing waits on them: closed and forgotten. One with a command still
        waiting stays until a later refresh finds it idle."""
        keep = {(address.host, address.port) for address in (*self.topology.primaries, *self._seeds)}
        dropped = _drop_idle(self._links, keep) + _drop_idle(self._relays, keep) + _drop_idle(self._map_links, keep)
        if dropped:
            self._link_of.clear()  # (its entries may name a dropped link)

    def _map_link(self, address: StoreAddress) -> RedisLink:
        where = (address.host, address.port)
        found = self._map_links.get(where)
        if found is None:
            found = self._map_links[where] = RedisLink(self.address(address), 0)
        return found

    async def _read_topology(self, address: StoreAddress) -> tuple[Topology, bool]:
        """The node's map, and whether it says the cluster is ok (a node that may not run CLUSTER INFO: yes)."""
        shards, slots, info = await self._map_link(address).pipeline(
            [[b"CLUSTER", b"SHARDS"], [b"CLUSTER", b"SLOTS"], [b"CLUSTER", b"INFO"]])
        state_ok = not isinstance(info, bytes) or b"cluster_state:fail" not in info
        if not isinstance(shards, AIError):
            return parse_shards(shards, self.seed), state_ok
        if isinstance(slots, AIError):
            raise slots
        return parse_slots(slots, self.seed, address), state_ok

    async def stopped(self) -> None:
        """Wait for the background tasks and connects ``close`` cancelled to end (none left pending when the loop
        closes)."""
        tasks = [task for task in (self._refresh, self._periodic, self._watching) if task is not None]
        tasks += self._probes.values()
        await asyncio.gather(*tasks, return_exceptions=True)
        channels = [*self._links.values(), *self._map_links.values(), *self._relays.values()]
        await asyncio.gather(*(channel.stopped() for channel in channels))

    def close(self) -> None:
        for task in (self._refresh, self._periodic, self._watching, *self._probes.values()):
            if task is not None:
                task.cancel()
        for link in [*self._links.values(), *self._map_links.values()]:
            link.close()
        for relay in self._relays.values():
            relay.close()

    def untagged(self, name: bytes) -> bytes:
        """``name`` without a leading ``{tag}`` (an older release's counters key, after its prefix)."""
        if name.startswith(b"{") and b"}" in name:
            return name[name.index(b"}") + 1 :]
        return name

    def in_slot_of(self, keys: Sequence[bytes], key: bytes) -> bool:
        """Whether every one of ``keys`` is in ``key``'s slot (an index loop: each run under load asks)."""
        tags = self.tags
        slot = tags.slot(key)
        for i in range(len(keys)):
            if tags.slot(keys[i]) != slot:
                return False
        return True

    def write_plan(self, keys: Sequence[bytes], values: list[bytes], empty_is_free: bool,
                   model: tuple[bytes, str] | None, guards: Sequence[tuple[bytes, str]],
                   inputs: Sequence[tuple[bytes, bytes]], counters: Sequence[ScriptCall]) -> WritePlan:
        """A write by slot, a run's checks on other shards set apart (server/store/slot_writes.py)."""
        return slot_write_plan(self.tags, keys, values, empty_is_free, model, guards, inputs, counters)

    def route(self, via: Relayer, argv: list[bytes], slot: ReplySlot, sink: object) -> None:
        """A relayed command goes by its keys' slot (server/store/relays.py)."""
        via.routed(argv, slot, sink)

    def primaries(self) -> Sequence[StoreAddress]:
        return self.topology.primaries

    def command_slot(self, argv: list[bytes]) -> int | None:
        return self.keys.slot(argv)

    def node_number(self, key: bytes) -> int:
        """The number of the primary serving ``key`` now (UNROUTED when none does); remembered per slot until the
        map changes (several lookups a request: the reads, the write's forget and note)."""
        slot = self.tags.slot(key)
        number = self._slot_numbers[slot]
        if number == UNKNOWN:
            number = self._slot_numbers[slot] = self._number_of(slot)
        return number

    def _number_of(self, slot: int) -> int:
        try:
            address = self.primary_for(slot)
        except AIError:
            return UNROUTED
        where = (address.host, address.port)
        number = self._numbers.get(where)
        if number is None:
            number = self._numbers[where] = len(self._numbered)
            self._numbered.append(address)
        return number

    def common_node(self, commands: Sequence[tuple[bytes, ...]]) -> int:
        if not commands:
            return UNROUTED
        number = self.node_number(commands[0][1])
        for i in range(1, len(commands)):
            if self.node_number(commands[i][1]) != number:
                return SEVERAL_NODES
        return number

    def copy_node(self, key: bytes) -> int:
        """None: on a cluster the tensors we write or TENSORGET reads are not kept as stamped copies (yet); a run's
        inputs are cached when read, as GET replies, and checked by their stamp all the same."""
        return UNROUTED

    def node_address(self, number: int) -> StoreAddress:
        return self._numbered[number]

    def serves(self, number: int) -> bool:
        node = self._numbered[number]
        return any(address.host == node.host and address.port == node.port for address in self.topology.primaries)

    def numbering(self) -> object:
        return self._slot_numbers


class _Channel(Watched, Protocol):
    def close(self) -> None: ...


ChannelT = TypeVar("ChannelT", bound=_Channel)


def _drop_idle(table: dict[tuple[str, int], ChannelT], keep: set[tuple[str, int]]) -> int:
    """Close and remove ``table``'s idle connections to nodes not in ``keep``; how many."""
    idle = [where for where, channel in table.items() if where not in keep and channel.oldest_pending() is None]
    for where in idle:
        table.pop(where).close()
    return len(idle)


def _retrieved(replies: asyncio.Future[list[Any]]) -> None:
    """Mark a probe's failure as seen (it is acted on by the probe; asyncio would log it as never retrieved)."""
    if not replies.cancelled():
        replies.exception()
