"""What the store layer offers the layers above it: the store, a client's relay session, and what a session
reports back to its client connection (implemented by the connection, server/frontend/connection.py).

Also the command names whose replies a relay session must classify (pub/sub, blocking).
"""

from __future__ import annotations

from typing import Protocol

from server.protocol.slot import ReplySlot
from server.store.cache import TrackedCache
from server.store.keyspace import StoreLink


class StoreSession(Protocol):
    """A client connection's own channel to the store, for the commands relayed verbatim."""

    def send(self, argv: list[bytes], slot: ReplySlot) -> None: ...

    def set_protocol(self, proto: int) -> None: ...

    def subscribed(self) -> bool:
        """Whether it holds a channel or pattern subscription now (as sent: SUBSCRIBE … and not yet left)."""
        ...

    def subscription_counts(self) -> tuple[int, int, int]:
        """How many channels, patterns and shard channels it holds now (CLIENT LIST's sub=, psub=, ssub=)."""
        ...

    def blocks_for_ever(self, slot: ReplySlot) -> bool:
        """Whether ``slot``'s command (unanswered) was sent through it as a blocking command with no timeout
        (BLPOP k 0 …): it will not end by itself."""
        ...

    def close(self) -> None: ...


class StoreRelay(Protocol):
    """The shared relay: the stateless relayed commands of every session-less client (one per database)."""

    def send(self, argv: list[bytes], slot: ReplySlot, sink: SessionSink) -> None: ...


class Store(Protocol):
    """The backing store: the embedded one or a real Redis."""

    kind: str
    cache: TrackedCache  # tensors and model metadata, coherent with the store (server/store/cache.py)
    default_db: int  # the database a new client starts in (the db of --redis-url; 0 for the embedded store)

    async def start(self) -> None: ...

    def open_session(self, sink: SessionSink) -> StoreSession: ...

    def shared_relay(self, db: int) -> StoreRelay: ...

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


# Data commands whose reply depends only on the keyspace, never on the connection they arrive on (no MULTI,
# WATCH, blocking, pub/sub, database or client state): a client that has no store session of its own yet
# sends these over its database's shared relay (server/store/relays.py, ``SharedRelay``), so many clients'
# commands leave in one write and their replies arrive in one read. Lower case, as the connection compares.
STATELESS_COMMANDS = frozenset({
    b"get", b"set", b"setex", b"psetex", b"setnx", b"getset", b"getdel", b"getex", b"mget", b"mset", b"msetnx",
    b"append", b"strlen", b"incr", b"incrby", b"incrbyfloat", b"decr", b"decrby", b"getrange", b"setrange",
    b"del", b"unlink", b"exists", b"expire", b"pexpire", b"expireat", b"pexpireat", b"ttl", b"pttl", b"persist",
    b"hset", b"hsetnx", b"hget", b"hmset", b"hmget", b"hgetall", b"hdel", b"hexists", b"hincrby", b"hlen",
    b"hkeys", b"hvals", b"lpush", b"rpush", b"lpop", b"rpop", b"lrange", b"llen", b"lindex", b"lset", b"lrem",
    b"ltrim", b"sadd", b"srem", b"smembers", b"sismember", b"scard", b"zadd", b"zrem", b"zrange", b"zscore",
    b"zcard", b"zincrby", b"zrank", b"dbsize", b"xadd", b"xlen", b"xrange",
})

SUBSCRIBE_COMMANDS = frozenset({b"subscribe", b"psubscribe", b"ssubscribe"})
UNSUBSCRIBE_COMMANDS = frozenset({b"unsubscribe", b"punsubscribe", b"sunsubscribe"})
PUBSUB_COMMANDS = SUBSCRIBE_COMMANDS | UNSUBSCRIBE_COMMANDS
BLOCKING_COMMANDS = frozenset(
    {b"blpop", b"brpop", b"brpoplpush", b"blmove", b"blmpop", b"bzpopmin", b"bzpopmax", b"bzmpop", b"wait",
     b"waitaof"}
)
