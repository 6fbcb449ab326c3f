"""A real Redis as the backing store (``--redis-url redis://…``, ``rediss://…`` or ``unix://…``).

A single store is a cluster of one shard: each database's router is a ``OneNode`` (server/store/cluster_link.py),
under the keyspace's link and the database's shared relay alike. A client's own session (server/store/relays.py)
is one connection of its own, opened on first use, so SELECT, MULTI/WATCH, SUBSCRIBE, blocking commands and
CLIENT TRACKING behave exactly as Redis makes them behave, and replies are relayed byte for byte. The keyspace
uses one shared, pipelined connection per database for the AI commands' reads and writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from backends.errors import AIError
from server.store.cache import TrackedCache
from server.store.cluster_link import ClusterLink, OneNode, RedisLink
from server.store.keyspace import load_scripts
from server.store.node_connections import NodeRelay, NodeSession
from server.store.relays import ClientSession, SharedRelay
from server.store.session import SessionSink
from server.store.upstream import UpstreamConnection, parse_store_url


class _Closable(Protocol):
    def close(self) -> None: ...


LinkT = TypeVar("LinkT", bound=_Closable)


class LinksByDatabase(Generic[LinkT]):
    """A single store's links or shared relays, one per database, made on first use and closed together (compiled:
    the shared relay of a database is looked up on every command it carries)."""

    def __init__(self, make: Callable[[int], LinkT]) -> None:
        self._make = make
        self._links: dict[int, LinkT] = {}

    def get(self, db: int) -> LinkT:
        found = self._links.get(db)
        if found is None:
            found = self._links[db] = self._make(db)
        return found

    def all(self) -> list[LinkT]:
        """Every link made so far."""
        return list(self._links.values())

    def close_all(self) -> None:
        for link in self._links.values():
            link.close()
        self._links.clear()


class RedisStore:
    """A real Redis behind the server."""

    kind = "redis"

    def __init__(self, url: str, cache_bytes: int = 0) -> None:
        self.address = parse_store_url(url)
        self.default_db = self.address.db
        self._links = LinksByDatabase(lambda db: ClusterLink(OneNode(RedisLink(self.address, db))))
        self._relays = LinksByDatabase(lambda db: SharedRelay(self.link(db).router, NodeRelay(self.address, db)))
        self.cache = TrackedCache(self.link, cache_bytes)  # server/store/cache.py

    async def start(self) -> None:
        """Fail fast at start when the store cannot be reached or refuses our login — or, for the URL's database,
        its SELECT. Asked on database 0 first (PING, INFO and SCRIPT LOAD are not per database): a cluster node
        refuses any SELECT, and must be told apart first to be refused in words of its own (server/app.py)."""
        link = self.link(0)
        (pong,) = await link.pipeline([[b"PING"]])
        if isinstance(pong, AIError):  # e.g. NOAUTH from a store whose password the URL lacks
            raise pong
        if self.address.db and not await self.cluster_enabled():
            (pong,) = await self.link(self.address.db).pipeline([[b"PING"]])
            if isinstance(pong, AIError):
                raise pong
        await load_scripts(link)

    def open_session(self, sink: SessionSink) -> ClientSession:
        """The client's own session: one connection, starting in the store's default database (then its
        SELECT's)."""
        return ClientSession(self.link(self.default_db).router, sink, NodeSession(self.address, sink))

    def shared_relay(self, db: int) -> SharedRelay:
        return self._relays.get(db)

    def link(self, db: int) -> ClusterLink:
        return self._links.get(db)

    async def close(self) -> None:
        self.cache.close()
        connections = self._own_connections()
        self._links.close_all()
        self._relays.close_all()
        await asyncio.gather(*(connection.stopped() for connection in connections))

    def describe(self) -> str:
        return self.address.describe()

    def connections(self) -> list[UpstreamConnection]:
        """Every connection of this store that a command may wait on, but the clients' own sessions: the
        keyspace's links, the shared relays, the cache's tracking connections (the stall watch's view)."""
        return [*self._own_connections(), *self.cache.tracking_links()]

    def _own_connections(self) -> list[UpstreamConnection]:
        """The keyspace's links and the shared relays' connections, one database after another."""
        return [*(node for link in self._links.all() for node in link.router.shards()),
                *(node for relay in self._relays.all() for node in relay.connections())]

    async def cluster_enabled(self) -> bool:
        """Whether the store is a node of a Redis Cluster (``INFO cluster``: ``cluster_enabled:1``)."""
        (reply,) = await self.link(0).pipeline([[b"INFO", b"cluster"]])
        return isinstance(reply, bytes) and b"cluster_enabled:1" in reply

    async def info(self, sections: list[str]) -> str:
        """The store's own INFO sections (keyspace, memory, persistence, ...)."""
        (reply,) = await self.link(self.address.db).pipeline([[b"INFO", *(s.encode() for s in sections)]])
        if isinstance(reply, AIError):
            raise reply
        return reply.decode(errors="replace") if isinstance(reply, bytes) else str(reply)
