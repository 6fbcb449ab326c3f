"""What the store layer offers the layers above it: the store, a client's relay session, and what a session
reports back to its client connection (implemented by the connection, server/frontend/connection.py).

Also the command names whose replies a relay session must classify (pub/sub, blocking), and the per-database
link registry the stores share.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from server.protocol.slot import ReplySlot
from server.store.cache import TrackedCache
from server.store.keyspace import StoreLink


class StoreSession(Protocol):
    """A client connection's own channel to the store, for the commands relayed verbatim."""

    def send(self, argv: list[bytes], slot: ReplySlot) -> None: ...

    def set_protocol(self, proto: int) -> None: ...

    def close(self) -> None: ...


class Store(Protocol):
    """The backing store: the embedded one or a real Redis."""

    kind: str
    cache: TrackedCache  # tensors and model metadata, coherent with the store (server/store/cache.py)
    default_db: int  # the database a new client starts in (the db of --redis-url; 0 for the embedded store)

    async def start(self) -> None: ...

    def open_session(self, sink: SessionSink) -> StoreSession: ...

    def link(self, db: int) -> StoreLink: ...

    async def close(self) -> None: ...

    def describe(self) -> str: ...

    async def info(self, sections: list[str]) -> str: ...


class SessionSink(Protocol):
    """What a store session reports to its client connection (implemented by the connection)."""

    def push(self, data: bytes) -> None:
        """An out-of-band frame (pub/sub message, RESP3 push, MONITOR line): write it now."""

    def flush(self) -> None:
        """Some slots were filled: write what is ready."""

    def store_lost(self) -> None:
        """The session's own store connection dropped: its state (db, MULTI, subscriptions, protocol) is gone,
        so the client connection is closed after its pending replies, as a Redis failover would."""


SUBSCRIBE_COMMANDS = frozenset({b"subscribe", b"psubscribe", b"ssubscribe"})
UNSUBSCRIBE_COMMANDS = frozenset({b"unsubscribe", b"punsubscribe", b"sunsubscribe"})
PUBSUB_COMMANDS = SUBSCRIBE_COMMANDS | UNSUBSCRIBE_COMMANDS
BLOCKING_COMMANDS = frozenset(
    {b"blpop", b"brpop", b"brpoplpush", b"blmove", b"blmpop", b"bzpopmin", b"bzpopmax", b"bzmpop", b"wait",
     b"waitaof"}
)


class _Closable(Protocol):
    def close(self) -> None: ...


LinkT = TypeVar("LinkT", bound=_Closable)


class LinksByDatabase(Generic[LinkT]):
    """A store's keyspace links, one per database, made on first use and closed together."""

    def __init__(self, make: Callable[[int], LinkT]) -> None:
        self._make = make
        self._links: dict[int, LinkT] = {}

    def get(self, db: int) -> LinkT:
        if db not in self._links:
            self._links[db] = self._make(db)
        return self._links[db]

    def close_all(self) -> None:
        for link in self._links.values():
            link.close()
        self._links.clear()
