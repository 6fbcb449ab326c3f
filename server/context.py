"""ServerContext: the only shared mutable state of a server, built once at start and passed in."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from server.config import Config
from server.metrics import Metrics
from server.resp import Limits
from server.slots import ReplySlot, SessionSink
from server.store.cache import TrackedCache
from server.store.keyspace import Keyspace, StoreLink

if TYPE_CHECKING:
    from server.ai import AIState
    from server.commands.spec import CommandSpec
    from server.connection import ClientConnection

VERSION = "0.1.0"
REDIS_COMPAT_VERSION = "7.2.0"
DATABASES = 16


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


@dataclass(slots=True)
class CommandStat:
    """INFO commandstats / Prometheus counters of one of our commands (relayed commands: the store counts)."""

    calls: int = 0
    usec: int = 0
    failed: int = 0


@dataclass(slots=True)
class Stats:
    """Counters behind INFO stats (event-loop thread only)."""

    connections_received: int = 0
    commands_processed: int = 0
    rejected_connections: int = 0
    protocol_errors: int = 0
    per_command: dict[str, int] = field(default_factory=dict)
    commands: dict[str, CommandStat] = field(default_factory=dict)  # by command-table name


@dataclass(slots=True)
class ServerContext:
    """Everything a command handler may reach: settings, the store, the connected clients, counters."""

    config: Config
    store: Store
    commands: Mapping[str, CommandSpec]
    ai: AIState
    limits: Limits = field(default_factory=Limits)
    stats: Stats = field(default_factory=Stats)
    metrics: Metrics = field(default_factory=Metrics)  # server/metrics.py; Prometheus when --metrics-port is set
    clients: dict[int, ClientConnection] = field(default_factory=dict)
    started_at: float = field(default_factory=time.time)
    pid: int = field(default_factory=os.getpid)
    shutting_down: bool = False
    tcp_port: int = 0
    request_shutdown: Callable[[], None] = field(default=lambda: None)  # Server.stop, set when it is built
    _client_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _keyspaces: dict[int, Keyspace] = field(default_factory=dict)

    def next_client_id(self) -> int:
        return next(self._client_ids)

    def keyspace(self, db: int) -> Keyspace:
        if db not in self._keyspaces:
            self._keyspaces[db] = Keyspace(self.store.link(db), db, self.store.cache)
        return self._keyspaces[db]
