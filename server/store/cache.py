"""A coherent in-process cache of model metadata, kept true by the store's client-side caching.

Usage: ``cache = TrackedCache(store.link, budget_bytes)``; ``await cache.read_many(db, [(b"HMGET", key,
*fields)])`` reads through it; ``cache.invalidate_for(db, argv)`` before a write we send.

Entries are kept per node and database (``DatabaseCache``): a single store is a cluster of one node, with one
cache per database (SELECT n); a cluster has database 0 on each primary. Which node a key is on comes from
the router of the database's link (``NodeMap``, server/store/nodes.py: ``node_number``, ``common_node``): a single
store's answers its one node without hashing; a cluster's (server/store/cluster_state.py) numbers each
primary and remembers each slot's number until the map changes.

How it stays coherent:

* Misses are read over one **tracking connection** per database of each node: RESP3, ``CLIENT TRACKING ON``.
  The store remembers every key read there and pushes ``invalidate [key ...]`` on that same connection when
  the key changes, expires or is evicted (or ``invalidate nil`` on FLUSHALL/FLUSHDB). Reply and push share one
  connection, so a push for a change made after our read always arrives after its reply. A value is cached
  the moment its reply is parsed, before anything behind it in the same read is applied, so that push
  always finds it and drops it.
* Only keys without a TTL are cached (the miss reads ``PTTL`` too).
* Every write this server sends drops the keys it names first (``invalidate_for``: the arguments of a
  relayed command, over every node's entries; ``forget``, an AI write's, over those of the node serving each
  key now; FLUSHALL, FLUSHDB, SWAPDB, SCRIPT, FUNCTION and DEBUG drop everything). Before a hit is trusted, a
  zero-timeout poll of the tracking socket looks for unread pushes, and replies still on their way count as
  unread: then the request reads from the store. A run's read (``checked``) skips that poll: its write checks
  what it took (below), so a push on its way at worst makes that write refuse and the run go again. (Every run
  writes its model's hash, so under load some push is nearly always on its way: with the poll, a run's 602 KB
  input was read back from the store one run in two.)
* A dropped tracking connection drops its cache, and so does one a cluster's watchdog gives up on (no answer
  within ``--cluster-node-timeout-ms``: server/store/cluster_watch.py). A new slot map drops every entry (a
  node that lost a slot no longer tells us of its keys' changes), and the connections of nodes that are no
  longer primaries are closed. A read a node answers with a redirect (MOVED/ASK) or CLUSTERDOWN is made again
  through the database's link, which follows it, and the map is read again.

An object's metadata entry (an ``HMGET`` of its hash) is not dropped by a push but marked *unconfirmed*: every
run writes its object's hash (the AI.INFO counters are fields of it: server/store/atomic.py), so every run
would otherwise drop the metadata on every server tracking it, and the next run read it again. A run may use
an unconfirmed entry (``checked`` reads: its write checks the digest, below) for ``CONFIRM_WITHIN_S`` after
the push; then the next run reads it again (tracked again, confirmed). A read that is not checked so (one that
answers a client, or decides without a store-side check) takes only confirmed entries. A tensor's entry (GET)
is dropped by a push, as before.

That is not enough across servers: the store may send the writer its reply before it sends us the push
(under load, measured: a read through us right after a write through another server saw the old value).
So the cache serves only what a later step checks: model metadata, and the input tensors of a run
(AI.MODELEXECUTE; on a cluster, inputs outside the outputs' slot are checked on their own shard, and taken
from here only while the server is not under load: ``Keyspace.inputs_from_cache``). Every output write of a
run checks, inside the store's write script, that the model still has the digest the run used (STALEMODEL
otherwise) and that every input the run took from here still holds the value it used (STALEINPUT); then
nothing is written and the run is done again with what the store holds. A tensor we wrote carries a stamp
(docs/tensor-format.md): its copy here is compared by its first ``STAMPED_PREFIX`` bytes, so it is kept
whatever its size (``remember_tensors``: the tensors this server wrote or read, tracked or not; on a single
store only, ``NodeMap.copy_node``), and AI.TENSORGET answers from it once a GETRANGE of those bytes agrees. A
value without a stamp is compared byte for byte, so only those up to TENSOR_ENTRY_LIMIT are kept. A DAG's
LOAD always reads the store.

The budget bounds the bytes held over every node and database together (least recently used first out);
values over a quarter of it are never cached. ``--cache-mb 0`` turns the cache off.
"""

from __future__ import annotations

import asyncio
import logging
import select
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeGuard

import hiredis

from backends import errors as msgs
from backends.errors import AIError
from backends.tensor import STAMPED_PREFIX, TensorValue, stamped_prefix
from server.store.nodes import SEVERAL_NODES, NodeMap
from server.store.upstream import (
    Hook,
    PendingReplies,
    StoreAddress,
    UpstreamConnection,
    UpstreamProtocol,
    ValueReader,
    Watched,
    open_upstream,
    pack_command,
)

log: Final = logging.getLogger("redisai.store")

WRITTEN_KEYS_KEPT: Final = 100_000
# Commands that only read: relaying them drops nothing.
READ_ONLY: Final = frozenset(
    b"get getrange strlen exists type ttl pttl expiretime pexpiretime hget hmget hgetall hlen hexists hkeys "
    b"hvals hstrlen mget lrange llen lindex scard smembers sismember zrange zscore zcard scan hscan sscan zscan "
    b"keys dbsize randomkey ping echo info time object memory dump substr lpos smismember zrank zrevrank "
    b"zrangebyscore zcount xrange xrevrange xlen bitcount getbit pfcount"
    .split())
# Commands that can change keys they do not name as arguments: relaying them drops everything.
TOUCHES_UNNAMED: Final = frozenset(b"flushall flushdb swapdb function debug script".split())
KEY_NAME_LIMIT: Final = 4096  # longer arguments are values, not key names worth a lookup
# A cached input is sent back to the store with the run's output write, which compares it with the key's
# value: worth it while that costs less than reading the key would.
TENSOR_ENTRY_LIMIT: Final = 64 * 1024
_STAMP_END: Final = str(STAMPED_PREFIX - 1).encode()
KEPT_UNCONFIRMED: Final = b"HMGET"
"""The command of the entries a push marks unconfirmed instead of dropping: an object's metadata."""
CONFIRM_WITHIN_S: Final = 1.0
"""How long after its push an unconfirmed entry still serves checked reads: the digest check of a run's write
catches a replaced model at once; what the digest does not cover (device, batch sizes, tag) is at most this old
in a run (plus the push's and a read's way). Costs a hot object one metadata read a period on each server."""


class TrackingRefused(AIError):
    """The store would not switch to RESP3 or track keys (an old Redis, an ACL without CLIENT): no cache."""


class TrackingLink(UpstreamConnection):
    """The RESP3 connection with CLIENT TRACKING ON whose reads a database's cache entries come from. Unlike the
    other connections it is made by the first read itself (its handshake must come before any read, and a
    store that refuses tracking must say so to that read); losing it, or giving up on it, drops the cache."""

    def __init__(self, address: StoreAddress, db: int, on_invalidate: Any, on_dropped: Any) -> None:
        super().__init__(address, db)
        self._on_invalidate = on_invalidate
        self._on_dropped = on_dropped
        self._pending = PendingReplies()
        self._poll: select.poll | None = None
        self._lock = asyncio.Lock()

    @property
    def busy(self) -> bool:
        """Replies are still on their way: pushes queued behind them in the store may not have reached us."""
        return bool(self._pending)

    async def read(self, commands: list[list[bytes]], hooks: Sequence[Hook | None] = ()) -> list[Any]:
        """Send ``commands`` and return their replies (error replies as AIError values). ``hooks[i]`` is called
        with reply i the moment it is parsed, before any push that follows it is applied: a value cached there
        is dropped by a later push, never cached after it."""
        upstream = self._upstream
        if upstream is None:
            upstream = await self._connected()
        return await self._send(upstream, commands, hooks)

    async def _connected(self) -> UpstreamProtocol:
        """The live connection, made by the first of concurrent readers. Read through a fresh local each
        time: narrowed to None by the check before the wait, ``self._upstream`` would be taken for None by
        the compiled code after it (mypyc trusts mypy's narrowing)."""
        async with self._lock:
            if self._upstream is None:
                await self._handshake()
        upstream = self._live()
        if upstream is None:
            raise AIError(msgs.UPSTREAM_DOWN_MSG.format(detail="connection closed"))
        return upstream

    def _live(self) -> UpstreamProtocol | None:
        return self._upstream

    async def _send(self, upstream: UpstreamProtocol, commands: list[list[bytes]],
                    hooks: Sequence[Hook | None] = ()) -> list[Any]:
        replies = self._pending.expect(len(commands), hooks)
        upstream.write(b"".join(pack_command(argv) for argv in commands))
        return await replies

    async def _handshake(self) -> None:
        """Connect, switch to RESP3 and turn tracking on; only then is the link used for reads."""
        try:
            upstream = await open_upstream(self._address, ValueReader(), self._db, self._on_lost)
        except (OSError, ConnectionError) as exc:
            raise AIError(msgs.UPSTREAM_DOWN_MSG.format(detail=exc)) from exc
        self._attach(upstream)
        try:
            replies = await self._send(upstream, [[b"HELLO", b"3"], [b"CLIENT", b"TRACKING", b"ON"]])
        except AIError:
            upstream.abandon()  # aborted by a cluster's watchdog (a hung node): its loss must not reach us later
            raise
        for reply in replies:
            if isinstance(reply, AIError):
                upstream.close()
                raise TrackingRefused(msgs.TRACKING_REFUSED_FMT.format(detail=reply.message))
        transport = upstream.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        if sock is None or transport is None:
            raise AIError(msgs.UPSTREAM_DOWN_MSG.format(detail="connection closed"))
        self._poll = select.poll()  # not select(): that fails for descriptors >= 1024
        self._poll.register(sock.fileno(), select.POLLIN)
        self._upstream = upstream

    def _attach(self, upstream: UpstreamProtocol) -> None:
        upstream.on_reply = self._on_reply

    def _on_reply(self, reply: Any) -> None:
        if isinstance(reply, hiredis.PushNotification):
            if len(reply) >= 2 and reply[0] == b"invalidate":
                self._on_invalidate(reply[1])
            return
        self._pending.deliver(reply)

    def oldest_pending(self) -> object | None:
        return self._pending.oldest()  # (its reads never block)

    def _fail_all(self, detail: str) -> None:
        """The reads waiting get the error, and the database's cache is dropped (a later push may be lost)."""
        self._poll = None
        self._pending.fail_all(AIError(msgs.UPSTREAM_DOWN_MSG.format(detail=detail)))
        self._on_dropped()

    def has_unread_data(self) -> bool:
        """Whether pushes may wait in our socket, unread by the loop yet (a zero-timeout poll)."""
        if self._poll is None:
            return False
        try:
            return bool(self._poll.poll(0))
        except OSError:
            return True

    def close(self) -> None:
        upstream, self._upstream = self._upstream, None
        if upstream is not None:
            upstream.close()


@dataclass(slots=True)
class Budget:
    """Bytes the cache may hold, over every database together, and what it holds now."""

    limit: int
    used: int = 0


class DatabaseCache:
    """The cached replies of one database's keys, by (command, key, fields)."""

    def __init__(self, address: StoreAddress, db: int, budget: Budget) -> None:
        self._budget = budget
        self._entries: OrderedDict[tuple[bytes, ...], tuple[Any, int]] = OrderedDict()
        self._by_key: dict[bytes, set[tuple[bytes, ...]]] = {}
        self._unconfirmed: dict[tuple[bytes, ...], float] = {}  # entry -> when its push came (time.monotonic)
        self.hits = self.misses = 0
        self.written: OrderedDict[bytes, None] = OrderedDict()  # keys we last wrote a tensor to
        self.link = TrackingLink(address, db, self._invalidate, self.clear)

    def lookup(self, entry: tuple[bytes, ...], checked: bool = False) -> tuple[bool, Any]:
        """(True, the reply) of an entry this read may use (``holds``' rule), counted as a hit; else (False,
        None), a miss."""
        found = self._entries.get(entry)
        if found is None or (self._unconfirmed and entry in self._unconfirmed and not self._usable_unconfirmed(
                entry, checked)):
            self.misses += 1
            return False, None
        self._entries.move_to_end(entry)
        self.hits += 1
        return True, found[0]

    def held(self, commands: Sequence[tuple[bytes, ...]], checked: bool) -> list[Any] | None:
        """The replies of ``commands`` when every one is cached and usable by this read (``holds``' rule); else
        None. Nothing counted: ``count_hits`` does that once the caller takes them."""
        entries = self._entries
        unconfirmed = self._unconfirmed
        replies: list[Any] = []
        for command in commands:
            found = entries.get(command)
            if found is None or (unconfirmed and command in unconfirmed and not self._usable_unconfirmed(
                    command, checked)):
                return None
            replies.append(found[0])
        return replies

    def count_hits(self, commands: Sequence[tuple[bytes, ...]]) -> None:
        """``held``'s replies were taken: each a hit, and the most recently used."""
        for command in commands:
            self._entries.move_to_end(command)
        self.hits += len(commands)

    def _usable_unconfirmed(self, entry: tuple[bytes, ...], checked: bool) -> bool:
        """An unconfirmed entry serves only a checked read, and only for ``CONFIRM_WITHIN_S`` after its push."""
        return checked and time.monotonic() - self._unconfirmed[entry] < CONFIRM_WITHIN_S

    def reading_again(self, entry: tuple[bytes, ...]) -> None:
        """A checked read is about to read ``entry`` again, its unconfirmed time up: the entry serves the other
        checked reads one period more meanwhile (one read a period, not one per concurrent run); the reply
        confirms it."""
        if entry in self._unconfirmed:
            self._unconfirmed[entry] = time.monotonic()

    def confirmed(self, entry: tuple[bytes, ...]) -> bool:
        """Whether no push came for ``entry`` since it was read (only metadata entries outlive a push)."""
        return entry not in self._unconfirmed

    def peek(self, entry: tuple[bytes, ...]) -> Any:
        """The cached reply of ``entry`` (None: none), not counted as a hit or a miss."""
        found = self._entries.get(entry)
        return found[0] if found is not None else None

    def holds(self, entry: tuple[bytes, ...], checked: bool = False) -> bool:
        """Whether ``entry`` is cached and usable by this read (not counted as a hit or a miss: ``lookup`` does
        that): confirmed, or unconfirmed for a checked read within ``CONFIRM_WITHIN_S``."""
        if entry not in self._entries:
            return False
        return not self._unconfirmed or entry not in self._unconfirmed or self._usable_unconfirmed(entry, checked)

    def remember(self, entry: tuple[bytes, ...], key: bytes, value: Any, size: int) -> None:
        self.forget_entry(entry)
        if size > self._budget.limit // 4 or (entry[0] == b"GET" and size > TENSOR_ENTRY_LIMIT
                                               and stamped_prefix(value) is None):
            return
        self._entries[entry] = (value, size)
        self._by_key.setdefault(key, set()).add(entry)
        self._budget.used += size
        while self._budget.used > self._budget.limit and self._entries:
            oldest = next(iter(self._entries))
            self.forget_entry(oldest)

    def forget_entry(self, entry: tuple[bytes, ...]) -> None:
        found = self._entries.pop(entry, None)
        if found is not None:
            if self._unconfirmed:
                self._unconfirmed.pop(entry, None)
            self._budget.used -= found[1]
            keyed = self._by_key.get(entry[1])
            if keyed is not None:
                keyed.discard(entry)
                if not keyed:
                    del self._by_key[entry[1]]

    def fill_hooks(self, entry: tuple[bytes, ...]) -> list[Hook | None]:
        """Hooks for a miss read as [command, PTTL key]: cache the value as it is parsed (so a push right behind
        it drops it), and drop it again if the key turns out to have a TTL."""

        def on_value(value: Any) -> None:
            if isinstance(value, AIError):
                self.forget_entry(entry)
            else:
                self.remember(entry, entry[1], value, _size(value))

        def on_ttl(ttl: Any) -> None:
            if ttl not in (-1, -2):  # a TTL: an expiry we might not hear of in time
                self.forget_entry(entry)

        return [on_value, on_ttl]

    def forget(self, key: bytes, keep_written: bool = False) -> None:
        """``key``'s cached replies out; also that we wrote a tensor there last, unless ``keep_written``."""
        if not keep_written:
            self.written.pop(key, None)
        entries = self._by_key.get(key)
        if entries:  # (no list made for a key with nothing cached: a write's outputs, every node's cache on a cluster)
            for entry in list(entries):
                self.forget_entry(entry)

    def note_written(self, keys: Sequence[bytes]) -> None:
        for key in keys:
            self.note_written_key(key)

    def note_written_key(self, key: bytes) -> None:
        """We wrote a tensor to ``key`` last (``known_tensors``); the oldest such note beyond the bound goes."""
        written = self.written
        written[key] = None
        written.move_to_end(key)
        if len(written) > WRITTEN_KEYS_KEPT:
            written.popitem(last=False)

    def _invalidate(self, keys: Any) -> None:
        """A push: FLUSHALL / FLUSHDB (None) drops everything; else each key's tensor entries are dropped and its
        metadata entries marked unconfirmed (see the module docstring)."""
        if keys is None:
            self.clear()
            return
        now = time.monotonic()
        for key in keys:
            self.written.pop(key, None)
            entries = self._by_key.get(key)
            if entries:
                for entry in list(entries):
                    if entry[0] == KEPT_UNCONFIRMED:
                        self._unconfirmed.setdefault(entry, now)
                    else:
                        self.forget_entry(entry)

    def clear(self) -> None:
        self._by_key.clear()
        self._unconfirmed.clear()
        self.written.clear()
        self._budget.used -= sum(size for _value, size in self._entries.values())
        self._entries.clear()


class RoutedLink(Protocol):
    """What the cache asks of a database's link (``ClusterLink``, server/store/cluster_link.py): its router, and
    the reads a node would not answer, sent again the way that follows redirects."""

    @property
    def router(self) -> NodeMap: ...

    def pipeline(self, commands: list[list[bytes]]) -> Awaitable[list[Any]]: ...


class NodeCaches:
    """One database's caches, one per node that serves its keys (a single store: its one node; a cluster: every
    primary's database 0), with the router that says which node a key is on and the database's link, which reads
    again what a node would not answer (it follows redirects)."""

    def __init__(self, db: int, link: RoutedLink, budget: Budget) -> None:
        self.db = db
        self.link = link
        self.router: NodeMap = link.router
        self.nodes: list[DatabaseCache | None] = []  # by node number (a list: no number boxed and hashed)
        self._budget = budget
        self.router.on_change(self._map_changed)
        self.router.watch_too(self._watched)

    def node(self, number: int) -> DatabaseCache:
        """Node ``number``'s cache of this database, made on first use (its tracking connection on first read)."""
        found = self.at(number)
        if found is None:
            found = DatabaseCache(self.router.node_address(number), self.db, self._budget)
            self.nodes += [None] * (number + 1 - len(self.nodes))
            self.nodes[number] = found
        return found

    def at(self, number: int) -> DatabaseCache | None:
        """Node ``number``'s cache if it was made (None for UNROUTED, SEVERAL_NODES or a node not read yet)."""
        return self.nodes[number] if 0 <= number < len(self.nodes) else None

    def _map_changed(self) -> None:
        """A new slot map: nothing cached can be trusted to hear of its key's changes any more; the connections of
        nodes that are no longer primaries are closed."""
        for number, cache in enumerate(self.nodes):
            if cache is not None:
                cache.clear()
                if not self.router.serves(number):
                    self.nodes[number] = None
                    cache.link.close()

    def _watched(self) -> Iterable[tuple[StoreAddress, Watched]]:
        return [(self.router.node_address(number), cache.link) for number, cache in enumerate(self.nodes)
                if cache is not None]


class TrackedCache:
    """Every database's cache on every node of the store (see the module docstring)."""

    def __init__(self, links: Callable[[int], RoutedLink], budget: int) -> None:
        self._links = links
        self._budget = Budget(budget)
        self._dbs: dict[int, NodeCaches] = {}

    @property
    def budget(self) -> int:
        return self._budget.limit

    @property
    def enabled(self) -> bool:
        return self._budget.limit > 0

    def _db(self, db: int) -> NodeCaches:
        found = self._dbs.get(db)
        if found is None:
            found = self._dbs[db] = NodeCaches(db, self._links(db), self._budget)
        return found

    async def read_many(self, db: int, commands: Sequence[tuple[bytes, ...]],
                        hits: list[bool] | None = None, checked: bool = False) -> list[Any]:
        """GET key / HMGET key field... replies, from the cache where it holds them and is up to date, the rest
        in one round trip over the tracking connection of each key's node (the nodes in parallel; cached when the
        key has no TTL); a read a node answers with a redirect or CLUSTERDOWN (the map changed under us), or
        whose slot no node serves, goes through the database's link instead. ``hits``, when given, gets one flag
        per command: whether its reply came from the cache. ``checked``: the caller's write checks what it took
        (a run's digest and input checks), so unconfirmed metadata entries serve it too (see the module
        docstring)."""
        nodes = self._db(db)
        number = nodes.router.common_node(commands)
        try:
            if number >= 0:  # one node serves every key: its cache, its misses in one read (no coroutine more)
                cache = nodes.node(number)
                replies: list[Any] = [None] * len(commands)
                misses = self._from_cache(cache, commands, replies, hits, checked)
                if misses:
                    wire, hooks = _miss_reads(cache, commands, misses, checked)
                    _fill(replies, misses, await cache.link.read(wire, hooks))
            else:
                replies = await self._read_spread(nodes, commands, hits, checked)
        except TrackingRefused as exc:
            log.warning("%s; the in-process cache is off", exc.message)
            self._budget.limit = 0
            raise
        except AIError:
            nodes.router.request_refresh()  # a node's tracking connection lost: a replica may be taking over
            raise
        if _any_moved_on(replies):
            await self._read_again(nodes, commands, replies, hits)
        return replies

    def _from_cache(self, cache: DatabaseCache, commands: Sequence[tuple[bytes, ...]], replies: list[Any],
                    hits: list[bool] | None, checked: bool) -> list[int]:
        """``replies`` of the commands ``cache`` holds for this read, each counted as a hit or a miss; the
        indices of the misses."""
        misses: list[int] = []
        usable = checked or self._trusted(cache)
        for index, command in enumerate(commands):
            hit, value = cache.lookup(command, checked) if usable else (False, None)
            if hits is not None:
                hits.append(hit)
            if hit:
                replies[index] = value
            else:
                misses.append(index)
        return misses

    async def _read_spread(self, nodes: NodeCaches, commands: Sequence[tuple[bytes, ...]],
                           hits: list[bool] | None, checked: bool) -> list[Any]:
        """``read_many`` of commands whose keys several nodes serve (or none does): grouped by node."""
        groups: dict[int, list[int]] = {}
        for index, command in enumerate(commands):
            groups.setdefault(nodes.router.node_number(command[1]), []).append(index)
        found = [False] * len(commands)
        replies = await self._read_groups(nodes, commands, groups, found, nodes.router.numbering(), checked)
        if hits is not None:
            hits.extend(found)
        return replies

    async def _read_groups(self, nodes: NodeCaches, commands: Sequence[tuple[bytes, ...]],
                           groups: dict[int, list[int]], found: list[bool], grouped_under: object,
                           checked: bool) -> list[Any]:
        """Every node's group; one whose entries are all held is read at once (no Task), the others in
        parallel. ``grouped_under``: the router's numbering the groups' node numbers came from (a new map makes
        a new one): a group reached after the map changed is read through the link (``_read_group``)."""
        replies: list[Any] = [None] * len(commands)
        held = [number for number, indices in groups.items() if self._holds(nodes, number, commands, indices, checked)]
        waits = [number for number in groups if number not in held]
        parts = [await self._read_group(nodes, number, commands, groups[number], found, grouped_under, checked)
                 for number in held]
        if len(waits) == 1:
            parts.append(await self._read_group(nodes, waits[0], commands, groups[waits[0]], found, grouped_under,
                                                checked))
        elif waits:
            parts += await asyncio.gather(*(self._read_group(nodes, number, commands, groups[number], found,
                                                             grouped_under, checked) for number in waits))
        for number, part in zip([*held, *waits], parts, strict=True):
            for position, index in enumerate(groups[number]):
                replies[index] = part[position]
        return replies

    @staticmethod
    def _holds(nodes: NodeCaches, number: int, commands: Sequence[tuple[bytes, ...]], indices: list[int],
               checked: bool) -> bool:
        cache = nodes.at(number)
        return cache is not None and all(cache.holds(commands[i], checked) for i in indices)

    async def _read_group(self, nodes: NodeCaches, number: int, commands: Sequence[tuple[bytes, ...]],
                          indices: list[int], found: list[bool], grouped_under: object, checked: bool) -> list[Any]:
        """One node's part of a read. Through the link when its node number is not the current map's (an
        earlier group's read waited across a map change): that node's cache may hold an entry filled after the
        change, which no write of ours forgets there (``forget`` drops the serving node's only)."""
        mine = [commands[i] for i in indices]
        if number < 0 or grouped_under is not nodes.router.numbering():
            return await nodes.link.pipeline([list(command) for command in mine])
        cache = nodes.node(number)
        replies: list[Any] = [None] * len(mine)
        hits: list[bool] = []
        misses = self._from_cache(cache, mine, replies, hits, checked)
        if misses:
            wire, hooks = _miss_reads(cache, mine, misses, checked)
            _fill(replies, misses, await cache.link.read(wire, hooks))
        for position, index in enumerate(indices):
            found[index] = hits[position]
        return replies

    async def _read_again(self, nodes: NodeCaches, commands: Sequence[tuple[bytes, ...]], replies: list[Any],
                          hits: list[bool] | None) -> None:
        """The reads a node would not answer for their slot (MOVED/ASK, CLUSTERDOWN), through the link, which
        follows them; the map is read again."""
        again = [i for i, reply in enumerate(replies) if _moved_on(reply)]
        nodes.router.request_refresh()
        answers = await nodes.link.pipeline([list(commands[i]) for i in again])
        for index, answer in zip(again, answers, strict=True):
            replies[index] = answer
            if hits is not None:
                hits[index] = False

    def held(self, db: int, commands: Sequence[tuple[bytes, ...]], hits: list[bool] | None = None,
             checked: bool = False) -> list[Any] | None:
        """Every reply from the cache of the node serving its key, when each holds its part, up to date
        (``read_many``'s hits, without its coroutine: a request's usual case); else None, and nothing counted.
        ``checked`` as ``read_many``'s."""
        nodes = self._dbs.get(db)
        if nodes is None:
            return None
        number = nodes.router.common_node(commands)
        if number == SEVERAL_NODES:
            return self._held_across(nodes, commands, hits, checked)
        cache = nodes.at(number)
        if cache is None:
            return None
        replies = cache.held(commands, checked)
        if replies is None or not (checked or self._trusted(cache)):
            return None
        cache.count_hits(commands)
        if hits is not None:
            hits.extend([True] * len(commands))
        return replies

    def _held_across(self, nodes: NodeCaches, commands: Sequence[tuple[bytes, ...]], hits: list[bool] | None,
                     checked: bool) -> list[Any] | None:
        """``held`` for commands whose keys several nodes serve: each from its node's cache."""
        caches: list[DatabaseCache] = []
        for command in commands:
            cache = nodes.at(nodes.router.node_number(command[1]))
            if cache is None or not cache.holds(command, checked):
                return None
            if cache not in caches and not (checked or self._trusted(cache)):
                return None  # (a node's connection polled once, however many of its keys are asked)
            caches.append(cache)
        replies = [caches[i].lookup(commands[i], checked)[1] for i in range(len(commands))]
        if hits is not None:
            hits.extend([True] * len(commands))
        return replies

    @staticmethod
    def _trusted(cache: DatabaseCache) -> bool:
        """No reply is on its way and no push waits unread: else a push for an entry may be on its way. (A checked
        read needs no poll: its write checks the model's digest and every input it took: a push on its way makes
        that write refuse, and the run goes again.)"""
        return not cache.link.busy and not cache.link.has_unread_data()

    def known_tensors(self, db: int, keys: Sequence[bytes]) -> bool:
        """Whether we wrote a tensor to each of ``keys`` and no write we saw since touched them: an output
        type check a run can skip (the write itself checks again, atomically)."""
        nodes = self._dbs.get(db)
        if nodes is None:
            return False
        for key in keys:
            cache = nodes.at(nodes.router.node_number(key))
            if cache is None or key not in cache.written:
                return False
        return True

    def note_written(self, db: int, keys: Sequence[bytes]) -> None:
        if self.enabled:
            nodes = self._db(db)
            for key in keys:
                number = nodes.router.node_number(key)
                if number >= 0:
                    nodes.node(number).note_written_key(key)

    def remember_tensors(self, db: int, keys: Sequence[bytes], values: Sequence[Any]) -> None:
        """Keep the big stamped tensors this server just wrote (or read) at ``keys``: a run takes them as inputs,
        and AI.TENSORGET answers them, after the stamp check, without the value crossing the socket again.
        Small ones (up to TENSOR_ENTRY_LIMIT) are not worth it: their read costs what the check costs."""
        if not self.enabled:
            return
        for key, value in zip(keys, values, strict=True):
            if _tensor_value(value) and len(value) > TENSOR_ENTRY_LIMIT and stamped_prefix(value) is not None:
                nodes = self._db(db)
                number = nodes.router.copy_node(key)
                if number >= 0:
                    nodes.node(number).remember((b"GET", key), key, value, _size(value))

    def stamped_copy(self, db: int, key: bytes) -> bytes | TensorValue | None:
        """Our copy of the stamped tensor at ``key`` (None: none held); still to be checked against the store
        (``still_stored``), which also sees any push on its way: no zero-timeout poll needed here."""
        cache = self._copies(db, key)
        value = cache.peek((b"GET", key)) if cache is not None else None
        if cache is None or not _tensor_value(value) or len(value) <= TENSOR_ENTRY_LIMIT:
            return None
        if stamped_prefix(value) is None:
            return None
        cache.lookup((b"GET", key))  # a hit: counted, and kept as the most recently used
        return value

    async def still_stored(self, db: int, key: bytes, copy: bytes | TensorValue) -> bool:
        """Whether the store holds ``copy`` at ``key`` now: a GETRANGE of its stamped prefix, over the tracking
        connection, so the key is tracked from then on and a write by any client of the store drops the copy.
        A push that came in before that reply (a write made before the GETRANGE) has dropped it: so the copy
        must still be held after the reply too."""
        cache = self._copies(db, key)
        if cache is None:
            return False
        (head,) = await cache.link.read([[b"GETRANGE", key, b"0", _STAMP_END]])
        return head == stamped_prefix(copy) and self.stamped_copy(db, key) is copy

    def _copies(self, db: int, key: bytes) -> DatabaseCache | None:
        """The cache that keeps ``key``'s stamped copy, if it was made (the router's ``copy_node``)."""
        nodes = self._dbs.get(db)
        return nodes.at(nodes.router.copy_node(key)) if nodes is not None else None

    def invalidate_for(self, db: int, argv: Sequence[bytes]) -> None:
        """Before we send ``argv`` to the store: drop what it may change (see the module docstring)."""
        if not self._dbs or not argv:
            return
        name = argv[0].lower()
        if name in READ_ONLY:
            return
        if name in TOUCHES_UNNAMED:
            self.clear()
            return
        names = [arg for arg in argv[1:] if len(arg) <= KEY_NAME_LIMIT]
        for nodes in self._dbs.values():  # SELECT inside MULTI, MOVE, COPY … may reach any database
            for cache in nodes.nodes:
                if cache is not None:
                    for name_arg in names:
                        cache.forget(name_arg)

    def forget(self, db: int, keys: Sequence[bytes], keep_written: bool = False) -> None:
        """``keys`` out of the entries of the node that serves each now, the only ones looked up for it: a new
        slot map empties every node's entries (``NodeCaches._map_changed``), so an entry filled with another node
        under an earlier map — a read answered after the change — is never read (a read whose groups were made
        under the earlier map goes on through the link: ``_read_group``), and is gone at the next change."""
        nodes = self._dbs.get(db)
        if nodes is not None:
            for key in keys:
                cache = nodes.at(nodes.router.node_number(key))
                if cache is not None:
                    cache.forget(key, keep_written)

    def _caches(self) -> list[DatabaseCache]:
        """Every database's cache on every node."""
        return [cache for nodes in self._dbs.values() for cache in nodes.nodes if cache is not None]

    def clear(self) -> None:
        for cache in self._caches():
            cache.clear()

    @property
    def used(self) -> int:
        """Bytes held now, over every database (never more than ``budget``)."""
        return self._budget.used

    def stats(self) -> tuple[int, int, int]:
        """(hits, misses, entries) over every database, for INFO."""
        caches = self._caches()
        return (sum(c.hits for c in caches), sum(c.misses for c in caches), sum(len(c._entries) for c in caches))

    def tracking_links(self) -> list[TrackingLink]:
        """Each database's tracking connection on each node (the stall watch's view of them)."""
        return [cache.link for cache in self._caches()]

    def close(self) -> None:
        for cache in self._caches():
            cache.link.close()
        self._dbs.clear()


def _miss_reads(cache: DatabaseCache, commands: Sequence[tuple[bytes, ...]], misses: list[int],
                checked: bool) -> tuple[list[list[bytes]], list[Hook | None]]:
    """The reads of the missed commands, each with ``PTTL key``, and the hooks that cache their replies."""
    wire: list[list[bytes]] = []
    hooks: list[Hook | None] = []
    for index in misses:
        wire += [[*commands[index]], [b"PTTL", commands[index][1]]]
        hooks += cache.fill_hooks(commands[index])
        if checked:
            cache.reading_again(commands[index])
    return wire, hooks


def _fill(replies: list[Any], misses: list[int], answers: list[Any]) -> None:
    """The missed commands' replies from the read of ``_miss_reads`` (each followed by its PTTL's)."""
    for position, index in enumerate(misses):
        replies[index] = answers[2 * position]


def _any_moved_on(replies: list[Any]) -> bool:
    """Whether a node would not answer any of ``replies`` (an index loop: ``any`` of a generator builds one)."""
    for i in range(len(replies)):
        if _moved_on(replies[i]):
            return True
    return False


def _moved_on(reply: Any) -> bool:
    """A read the node would not answer for its slot (MOVED/ASK, CLUSTERDOWN): the link's to follow."""
    return isinstance(reply, AIError) and reply.message.startswith(
        (msgs.MOVED_PREFIX, msgs.ASK_PREFIX, msgs.CLUSTERDOWN_PREFIX))


def _tensor_value(value: Any) -> TypeGuard[bytes | TensorValue]:
    """A GET reply that may be a tensor: ``bytes``, or the two parts a big write kept (two checks: compiled,
    each is a type comparison, where a tuple of types is a generic call)."""
    return isinstance(value, bytes) or isinstance(value, TensorValue)


def _size(value: Any) -> int:
    if _tensor_value(value):
        return len(value) + 64
    if isinstance(value, list):
        return sum(len(v) if isinstance(v, bytes) else 8 for v in value) + 64 * (len(value) + 1)
    return 64
