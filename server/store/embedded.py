"""The default store: a real valkey-server child on a private unix socket, spoken to like any Redis.

Usage: ``redisai-server`` (in memory), ``redisai-server --dir /var/lib/redisai`` (durable), or
``--store-bin /usr/bin/redis-server`` to run another binary.

Everything but the lifecycle is ``RedisStore``'s: one store path for every mode, so the embedded store and
``--redis-url`` differ only in who started the server. If the child dies while we serve, clients get
``ERR backing store unavailable`` until it is started again (with its ``--dir`` data); both are logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from server.store.process import StoreProcess, find_store_binary
from server.store.redis import RedisStore
from server.store.upstream import StoreAddress

log = logging.getLogger("redisai.store")

RESTART_DELAYS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)


class EmbeddedStore(RedisStore):
    """A store server process we own; restarted when it dies, stopped with us."""

    kind = "embedded"

    def __init__(self, store_bin: str = "", data_dir: str = "", cache_bytes: int = 0) -> None:
        super().__init__("unix:///not-started", cache_bytes)
        self.process = StoreProcess(find_store_binary(store_bin), data_dir)
        self.restarts = 0
        self._closed = False
        self._restarting: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start the child, wait for its PONG, then check our own link to it (RedisStore.start)."""
        await self.process.start()
        self.address = self.cache.address = StoreAddress(path=self.process.socket_path)
        self.process.watch(asyncio.get_running_loop(), self._exited)
        await super().start()

    def _exited(self, code: int) -> None:
        if self._closed or self._restarting is not None:
            return
        log.warning("embedded store exited unexpectedly (code %d: %s); starting it again", code,
                    self.process.last_log_line() or "no log")
        self._restarting = asyncio.get_running_loop().create_task(self._restart())

    async def _restart(self) -> None:
        attempt = 0
        try:
            while not self._closed:
                try:
                    await self.process.start()
                except OSError as exc:  # StoreStartError, or the private directory could not be made
                    log.error("embedded store did not start again: %s", exc)
                    await asyncio.sleep(RESTART_DELAYS_S[min(attempt, len(RESTART_DELAYS_S) - 1)])
                    attempt += 1
                    continue
                self.restarts += 1
                log.warning("embedded store is back (pid %d)", self.process.pid)
                self.process.watch(asyncio.get_running_loop(), self._exited)
                return
        finally:
            self._restarting = None

    async def close(self) -> None:
        self._closed = True
        if self._restarting is not None:
            self._restarting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._restarting
        await super().close()
        await asyncio.to_thread(self.process.stop)

    def describe(self) -> str:
        where = f"data in {self.process.data_dir}" if self.process.data_dir else "in memory"
        return f"embedded {self.process.version or self.process.binary} ({where})"
