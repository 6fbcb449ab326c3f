"""What every command handler sees: the ``ServerContext`` (the only shared mutable state of a server, built
once at start and passed in) and the ``Client`` it runs for.

``Client`` is the narrow face of a connection that handlers use (server/frontend/connection.py implements
it). Handlers never import the connection, so the layers stay one-way (frontend → commands → ops → ai →
store → protocol; docs/architecture.md, "Layers") and a handler can be tested with a small fake client.
"""

from __future__ import annotations

import itertools
import os
import time
from asyncio import iscoroutine
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

from server.ai.state import AIState
from server.commands.client_state import ClientState
from server.commands.spec import CommandSpec
from server.config import VERSION, Config
from server.ops.banner import StoreVersion
from server.ops.metrics import Metrics
from server.ops.stats import Stats
from server.protocol.request import Limits
from server.store.keyspace import Keyspace
from server.store.session import Store

__all__ = ["DATABASES", "REDIS_COMPAT_VERSION", "VERSION", "Client", "ServerContext"]
REDIS_COMPAT_VERSION: Final = "7.2.0"
DATABASES: Final = 16
CLIENT_ID_START_BITS: Final = 40  # a restarted --workers worker's ids start at (its earlier starts) << 40


@dataclass(slots=True)
class ServerContext:
    """Everything a command handler may reach: settings, the store, the connected clients, counters."""

    config: Config
    store: Store
    commands: Mapping[str, CommandSpec]
    ai: AIState
    limits: Limits = field(default_factory=Limits)
    stats: Stats = field(default_factory=Stats)
    metrics: Metrics = field(default_factory=Metrics)  # server/ops/metrics.py; Prometheus with --metrics-port
    clients: dict[int, Client] = field(default_factory=dict)
    started_at: float = field(default_factory=time.time)
    pid: int = field(default_factory=os.getpid)
    shutting_down: bool = False
    tcp_port: int = 0
    store_version: StoreVersion = field(default_factory=StoreVersion)  # the store's INFO server, read at start
    shared_relay_paused_until: float = 0.0  # CLIENT PAUSE … WRITE: no shared relay until then (monotonic)
    request_shutdown: Callable[[], None] = field(default=lambda: None)  # Server.stop, set when it is built
    _client_ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _keyspaces: dict[int, Keyspace] = field(default_factory=dict)
    _by_name: dict[bytes, CommandSpec | None] = field(default_factory=dict)  # argv[0] as sent → its spec
    _coroutine_kinds: dict[type, bool] = field(default_factory=dict)  # a handler outcome's type → is a coroutine

    def spec_of(self, name: bytes) -> CommandSpec | None:
        """The table row of command ``name`` in any letter case (None: relayed). Looked up once per spelling:
        clients send the same few spellings over and over, and upper-casing and decoding each costs."""
        try:
            return self._by_name[name]
        except KeyError:
            spec = self.commands.get(name.upper().decode(errors="replace"))
            if len(self._by_name) < 4096:  # bounded: a client sending random names cannot grow it
                self._by_name[name] = spec
            return spec

    def is_coroutine(self, outcome: object) -> bool:
        """``asyncio.iscoroutine``, remembered per type: a compiled (mypyc) handler's coroutine is not a
        ``CoroutineType``, and asyncio's check of any other type runs an interpreted ABC check every time."""
        kind = type(outcome)
        known = self._coroutine_kinds.get(kind)
        if known is None:
            known = self._coroutine_kinds[kind] = iscoroutine(outcome)
        return known

    def next_client_id(self) -> int:
        """Redis's CLIENT ID: unique on the server, and never given twice. The processes of ``--workers N``
        share the port, so worker i hands out i+1, i+1+N, i+1+2N, … (CLIENT KILL ID, CLIENT UNBLOCK name one
        client); a worker started again after it died starts 2**40 above each earlier start of its number, so
        a client of the dead one is never named by a new one's id."""
        config = self.config
        position = (next(self._client_ids) - 1) * config.worker_count + config.worker_index + 1
        return (config.worker_starts << CLIENT_ID_START_BITS) + position

    def keyspace(self, db: int) -> Keyspace:
        if db not in self._keyspaces:
            self._keyspaces[db] = Keyspace(self.store.link(db), db, self.store.cache)
        return self._keyspaces[db]


class Client(Protocol):
    """One client connection, as a command handler sees it."""

    ctx: ServerContext
    state: ClientState

    def keyspace(self) -> Keyspace:
        """The store's keys in the database this client selected."""

    def set_protocol(self, proto: int) -> None:
        """HELLO: RESP2 or RESP3 for our replies and the store session's."""

    def reset(self) -> None:
        """RESET: drop the store session and any MULTI bookkeeping (the next relayed command opens a fresh one)."""

    def close_after_reply(self) -> None:
        """QUIT: close once this command's reply is written."""

    def show_current_reply(self, visible: bool) -> None:
        """CLIENT REPLY: whether this very command's reply is written."""

    def relays_everything(self) -> bool:
        """Inside MULTI or once subscribed, even PING must go to the store so it can queue or shape the reply."""

    def kill(self) -> None:
        """CLIENT KILL: close this client (after its current reply when it kills itself)."""

    def subscribed(self) -> bool: ...

    def describe(self) -> str:
        """One CLIENT LIST line."""

    def idle(self) -> bool:
        """Nothing in flight (graceful shutdown waits for every client to be idle)."""

    def close(self) -> None:
        """Close the connection now (shutdown, after the drain)."""
