"""Server: start the store and the listeners, serve, and shut down gracefully.

Start: the store → its version (INFO server) → the listeners and the metrics/health port → the banner
(server/ops/banner.py) and the store watch (server/ops/health.py). Shutdown (SIGTERM/SIGINT or ``Server.stop``):
stop accepting → let in-flight commands finish until ``shutdown_timeout`` → close every client → close the
store. A second signal skips the wait. Start and shutdown are logged at notice.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from backends.errors import AIError
from server.ai.state import AIState, RunStats
from server.commands.context import ServerContext
from server.commands.table import COMMAND_TABLE
from server.compiled import describe_build
from server.config import Config
from server.frontend.connection import ClientConnection
from server.ops.banner import banner, parse_store_version
from server.ops.health import Health, databases_listed
from server.ops.http import OpsEndpoint
from server.ops.metrics import Metrics, ObservedServer
from server.ops.preload import Preload, start_preload
from server.store.cluster import ClusterStore
from server.store.deadline import within
from server.store.embedded import EmbeddedStore
from server.store.redis import RedisStore
from server.store.session import Store
from server.store.stall_watch import StallWatch, single_store_channels
from server.store.stored_objects import migrate_legacy_counters

log = logging.getLogger("redisai.server")
T = TypeVar("T")


def _hangup_ignored() -> None:
    """SIGHUP (a closed terminal, a careless ``kill -HUP``): logged and ignored, as redis-server does; by
    default it would end the process without a word."""
    log.warning("received SIGHUP: ignored (SIGTERM or SIGINT stop the server)")


def make_store(config: Config) -> Store:
    cache_bytes = config.cache_mb * 1024 * 1024
    if config.redis_url:
        return RedisStore(config.redis_url, cache_bytes)
    return EmbeddedStore(config.store_bin, config.dir, cache_bytes)


def _tls_context(config: Config) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(config.tls_cert_file, config.tls_key_file)
    return context


class StoppedWhileStarting(Exception):
    """SIGTERM or SIGINT came while the server was starting: it leaves without listening."""


class Server:
    """One running server: its context, its listeners and its lifecycle."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.ctx = ServerContext(config=config, store=make_store(config), commands=COMMAND_TABLE,
                                 ai=AIState.from_config(config))
        self.ctx.metrics = make_metrics(self.ctx)
        self.ctx.ai.models.on_loaded = self.ctx.ai.scripts.on_loaded = functools.partial(remember_labels, self.ctx.ai)
        self.ctx.request_shutdown = self.stop
        self.health = Health(self.ctx)
        self.ops: OpsEndpoint | None = None
        if config.metrics_port:
            self.ops = OpsEndpoint(config.bind_addresses, config.metrics_port, self.ctx.metrics, self.health)
        self._listeners: list[asyncio.Server] = []
        self._stopping: asyncio.Event | None = None
        self._stall_watch: asyncio.Task[None] | None = None
        self._preload: asyncio.Task[Preload] | None = None
        self._forced = False
        self.ports: list[int] = []

    async def start(self) -> None:
        """Start or connect the store, then open every listener; raises if any of them fails, leaving nothing
        running (an embedded store already started is stopped again)."""
        if self._stopping is None:  # (``serve`` makes it first: a SIGTERM while starting stops the server once up)
            self._stopping = asyncio.Event()
        try:
            await self._unless_stopped(self._start_store())
            await self._unless_stopped(self._read_store_version())
            await self._unless_stopped(self._migrate_counters())
            await self._listen()
            self._watch_store()
            self._start_preload()
        except BaseException:
            for task in (self._stall_watch, self._preload):
                if task is not None:
                    task.cancel()
            for listener in self._listeners:
                listener.close()
            await self.ctx.store.close()
            raise
        self._log_banner()
        self.health.start_watch()
        log.info("ready to accept connections on %s (store: %s; hot path: %s)",
                 ", ".join(str(p) for p in self.ports) or self.config.unixsocket, self.ctx.store.describe(),
                 describe_build())

    async def _unless_stopped(self, step: Awaitable[T]) -> T:
        """``step``, unless ``stop`` (SIGTERM, SIGINT) comes first: then it is cancelled and StoppedWhileStarting
        raised, so a start that waits on a store never keeps the process from stopping."""
        assert self._stopping is not None
        task = asyncio.ensure_future(step)
        stopped = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait((task, stopped), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not task.done():
                task.cancel()
                await asyncio.wait((task,))
        if task.cancelled() and self._stopping.is_set():
            raise StoppedWhileStarting
        return task.result()

    async def _answered(self, step: Awaitable[T]) -> T:
        """``step`` (a round trip to the store at start), within --store-timeout-ms: a store that accepts the
        connection but never answers (stopped, hung, not a Redis that speaks) stops the start with one line."""
        timeout_ms = self.config.store_timeout_ms
        try:
            return await within(step, timeout_ms / 1000)
        except TimeoutError:
            raise ConnectionError(f"store at {self.ctx.store.describe()} did not answer within {timeout_ms} ms "
                                  "(--store-timeout-ms)") from None

    def _watch_store(self) -> None:
        """The single store's per-command time limit (server/store/stall_watch.py; a cluster has its own)."""
        store = self.ctx.store
        if isinstance(store, RedisStore):
            watch = StallWatch(self.config.store_timeout_ms, lambda: single_store_channels(store, self.ctx.clients),
                               store.address.describe, lambda: store.link(store.default_db).pipeline([[b"PING"]]))
            self._stall_watch = asyncio.get_running_loop().create_task(watch.run())

    def _start_preload(self) -> None:
        """--preload: load the matching stored models and scripts now; /readyz waits for them (ops/preload.py)."""
        if self.config.preload:
            keyspace = self.ctx.keyspace(self.ctx.store.default_db)
            self.health.preload, self._preload = start_preload(self.ctx.ai, keyspace, self.config.preload)

    async def _read_store_version(self) -> None:
        """What the store is (INFO server): INFO, HELLO and the banner report it truthfully."""
        try:
            self.ctx.store_version = parse_store_version(await self._answered(self.ctx.store.info(["server"])))
        except (AIError, OSError) as exc:
            log.warning("the store did not say its version: %s", exc)

    async def _migrate_counters(self) -> None:
        """AI.INFO counters an older release kept in hashes of their own move into their objects, in every
        database with keys (server/store/stored_objects.py); a store that refuses is logged, not fatal."""
        store = self.ctx.store
        try:
            for db in sorted({store.default_db, *databases_listed(await self._answered(store.info(["keyspace"])))}):
                moved = await self._answered(migrate_legacy_counters(self.ctx.keyspace(db)))
                if moved:
                    log.info("counters moved into their objects", extra={"fields": {"db": db, "objects": moved}})
        except (AIError, OSError) as exc:
            log.warning("older counters were not moved into their objects: %s", exc)

    def listener_names(self) -> list[str]:
        """host:port of every TCP listener (TLS ones marked), and the unix socket."""
        names = []
        for server in self._listeners:
            for sock in server.sockets:
                address = sock.getsockname()
                if isinstance(address, tuple):
                    tls = self.config.tls_enabled and (not self.config.tls_port or address[1] == self.config.tls_port)
                    names.append(f"{address[0]}:{address[1]}" + (" (TLS)" if tls else ""))
                else:
                    names.append(f"unix:{address}")
        return names

    def _log_banner(self) -> None:
        lines = banner(self.config, self.listener_names(), self.ops.url if self.ops else "",
                       self.ctx.store.describe(), self.ctx.store_version, self.ctx.ai.backends)
        for text, fields in lines:
            log.info(text, extra={"json_fields": fields})

    async def _start_store(self) -> None:
        """Start the store; a --redis-url that names a node of a Redis Cluster (or comes with --cluster-seeds)
        becomes the cluster store."""
        store = self.ctx.store
        if not self.config.cluster_seeds:
            # (the embedded store's start is bounded by its own: a child that loads its data answers LOADING)
            await (store.start() if store.kind == "embedded" else self._answered(store.start()))
            if not isinstance(store, RedisStore) or store.kind != "redis" or not await self._answered(
                    store.cluster_enabled()):
                return
            await store.close()
        self.ctx.store = ClusterStore(self.config.redis_url, self.config.cluster_seeds.replace(",", " ").split(),
                                      node_timeout_ms=self.config.cluster_node_timeout_ms,
                                      cache_bytes=self.config.cache_mb * 1024 * 1024)
        await self.ctx.store.start()

    async def _listen(self) -> None:
        loop = asyncio.get_running_loop()
        factory = lambda: ClientConnection(self.ctx)  # noqa: E731
        tls = _tls_context(self.config) if self.config.tls_enabled else None
        plain_tls = tls if self.config.tls_port == 0 else None
        if self.config.listen_fds:  # a --workers worker: the sockets its supervisor made (server/port_owner.py)
            for fd in self.config.listen_fds:
                self._listeners.append(await loop.create_server(factory, sock=socket.socket(fileno=fd), ssl=plain_tls))
            for fd in self.config.tls_listen_fds:
                self._listeners.append(await loop.create_server(factory, sock=socket.socket(fileno=fd), ssl=tls))
        else:
            await self._bind_tcp(factory, plain_tls, tls)
        if self.config.unixsocket:
            if os.path.exists(self.config.unixsocket):
                os.unlink(self.config.unixsocket)
            listener = await loop.create_unix_server(factory, self.config.unixsocket)
            self._listeners.append(listener)
        self.ports = [s.getsockname()[1] for srv in self._listeners for s in srv.sockets
                      if isinstance(s.getsockname(), tuple)]
        self.ctx.tcp_port = self.ports[0] if self.ports else 0
        if self.ops is not None:
            await self.ops.start()

    async def _bind_tcp(self, factory: Callable[[], asyncio.Protocol], plain_tls: ssl.SSLContext | None,
                        tls: ssl.SSLContext | None) -> None:
        """Listen on --port (and --tls-port) of every bind address."""
        loop = asyncio.get_running_loop()
        for host in self.config.bind_addresses:
            listener = await loop.create_server(factory, host, self.config.port, ssl=plain_tls, reuse_address=True,
                                                reuse_port=self.config.reuse_port or None)
            self._listeners.append(listener)
        if tls is not None and self.config.tls_port:
            for host in self.config.bind_addresses:
                listener = await loop.create_server(factory, host, self.config.tls_port, ssl=tls,
                                                    reuse_port=self.config.reuse_port or None)
                self._listeners.append(listener)

    def stop(self) -> None:
        """Ask for a graceful shutdown; a second call skips the drain."""
        if self._stopping is None:
            return
        if self._stopping.is_set():
            self._forced = True
        self._stopping.set()

    async def serve(self) -> None:
        """Run until SIGTERM/SIGINT (or ``stop``), then shut down. The handlers are installed before ``start``:
        installed after it, a SIGTERM right after "ready to accept connections" killed the process unhandled."""
        self._stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        installed = []
        handlers = {signal.SIGTERM: self.stop, signal.SIGINT: self.stop, signal.SIGHUP: _hangup_ignored}
        for sig, handler in handlers.items():
            try:
                loop.add_signal_handler(sig, handler)
                installed.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass  # not the main thread (tests run servers in threads)
        try:
            await self.start()
            await self.run_until_stopped()
        except StoppedWhileStarting:
            log.info("stopped while starting (the store had not answered yet)")
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)

    async def run_until_stopped(self) -> None:
        """After ``start``: wait for ``stop``, then shut down gracefully."""
        assert self._stopping is not None, "start() first"
        try:
            await self._stopping.wait()
        finally:
            await self.shutdown()

    async def shutdown(self) -> None:
        log.info("shutting down", extra={"fields": {"clients": len(self.ctx.clients),
                                                    "timeout_s": 0 if self._forced else self.config.shutdown_timeout}})
        self.ctx.shutting_down = True
        await self.health.stop_watch()
        if self._stall_watch is not None:
            self._stall_watch.cancel()
        if self._preload is not None:
            self._preload.cancel()
        for listener in self._listeners:
            listener.close()
        if self.ops is not None:
            await self.ops.stop()
        deadline = time.monotonic() + self.config.shutdown_timeout
        while not self._forced and time.monotonic() < deadline:
            if all(client.idle() for client in list(self.ctx.clients.values())):
                break
            await asyncio.sleep(0.01)
        for client in list(self.ctx.clients.values()):
            client.close()
        await asyncio.to_thread(self.ctx.ai.queues.close, max(deadline - time.monotonic(), 0.5))
        for listener in self._listeners:
            await listener.wait_closed()
        await self.ctx.store.close()
        if self.config.unixsocket and os.path.exists(self.config.unixsocket):
            os.unlink(self.config.unixsocket)
        log.info("shut down")


def remember_labels(ai: AIState, key: bytes, kind: str, backend: str, device: str) -> None:
    """A model or script this process loaded from the store (stored through another worker or server, or before
    a restart) gets this process's record, as one stored here does: its runs' metrics and ``run failed`` lines
    carry its type and device (they were empty). A record that says otherwise (re-stored elsewhere on another
    device) starts afresh, as a re-store here does."""
    known = ai.stats.get(key)
    kind = kind.upper()
    if known is None or (known.kind, known.backend, known.device) != (kind, backend, device):
        ai.stats[key] = RunStats(key, kind, backend, device, known.tag if known is not None else b"")


def make_metrics(ctx: ObservedServer) -> Metrics:
    """The context's metrics: Prometheus when ``metrics_port`` is set (and prometheus_client is installed: without
    it the port serves /healthz and /readyz only), else the do-nothing hooks."""
    if not ctx.config.metrics_port:
        return Metrics()
    try:
        from server.ops.prometheus import PrometheusMetrics  # lazy: prometheus_client only when asked for
    except ImportError:
        log.warning("prometheus_client is not installed (pip install 'redisai-server[metrics]'): /metrics is off, "
                    "/healthz and /readyz are served")
        return Metrics()
    return PrometheusMetrics(ctx)
