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
import time
from typing import Final

from server.store.process import StoreProcess, find_store_binary
from server.store.redis import RedisStore
from server.store.upstream import StoreAddress

log: Final = logging.getLogger("redisai.store")

# not Final: mypyc (2.4) makes a Final tuple of floats a C struct whose "is it set" check it gets backwards (every
# read raised NameError: value for final name ... was not set; docs/performance.md, the compiled path's pitfalls)
RESTART_DELAYS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)
STABLE_AFTER_S: Final = 1.0  # a child that dies sooner than this after its start is crash-looping: back off


# What no client may do to the store we own: make it a replica or a primary of someone else, change how we log
# in, load code into it, or rewrite its users. (Its dir and dbfilename are protected by the store itself.)
_REFUSED_COMMANDS: Final = frozenset({b"replicaof", b"slaveof", b"sync", b"psync", b"failover", b"module"})
_REFUSED_SUBCOMMANDS: Final = {b"acl": frozenset({b"setuser", b"deluser", b"load", b"save"}),
                               b"config": frozenset({b"set", b"rewrite"})}
_PROTECTED_CONFIGS: Final = frozenset({b"requirepass", b"masterauth", b"masteruser", b"port", b"unixsocket",
                                       b"unixsocketperm", b"bind", b"replicaof", b"slaveof", b"dir", b"dbfilename",
                                       b"appenddirname", b"logfile", b"enable-debug-command", b"enable-module-command"})


def refused_on_embedded(argv: list[bytes]) -> bool:
    """Whether a relayed command would take the private store out of our hands (CONFIG SET of an ordinary
    setting, such as maxmemory or save, is allowed)."""
    name = argv[0].lower()
    if name in _REFUSED_COMMANDS:
        return True
    subcommands = _REFUSED_SUBCOMMANDS.get(name)
    if subcommands is None or len(argv) < 2 or argv[1].lower() not in subcommands:
        return False
    if name == b"config" and argv[1].lower() == b"set":
        return any(param.lower() in _PROTECTED_CONFIGS for param in argv[2::2])
    return True


class EmbeddedStore(RedisStore):
    """A store server process we own; restarted when it dies, stopped with us."""

    kind = "embedded"

    def __init__(self, store_bin: str = "", data_dir: str = "", cache_bytes: int = 0) -> None:
        super().__init__("unix:///not-started", cache_bytes)
        self.process = StoreProcess(find_store_binary(store_bin), data_dir)
        self.restarts = 0
        self._started_at = 0.0
        self._quick_crashes = 0
        self._closed = False
        self._restarting: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Start the child, wait for its PONG, then check our own link to it (RedisStore.start)."""
        await self.process.start()
        self._started_at = time.monotonic()
        self.address = StoreAddress(path=self.process.socket_path)
        self.process.watch(asyncio.get_running_loop(), self._exited)
        await super().start()

    def _exited(self, code: int) -> None:
        if self._closed or self._restarting is not None:
            return
        log.warning("embedded store exited unexpectedly (code %d: %s); starting it again", code,
                    self.process.last_log_line() or "no log")
        crashed_at_once = time.monotonic() - self._started_at < STABLE_AFTER_S
        self._quick_crashes = self._quick_crashes + 1 if crashed_at_once else 0
        self._restarting = asyncio.get_running_loop().create_task(self._restart(self._quick_crashes))

    async def _restart(self, attempt: int) -> None:
        """Start the child again; every failure, and every crash right after a start, waits longer first."""
        try:
            while not self._closed:
                if attempt:
                    await asyncio.sleep(RESTART_DELAYS_S[min(attempt - 1, len(RESTART_DELAYS_S) - 1)])
                try:
                    await self.process.start()
                except Exception as exc:  # StoreStartError, no private directory, anything: try again later
                    log.error("embedded store did not start again: %s", exc)
                    attempt += 1
                    continue
                self.restarts += 1
                self._started_at = time.monotonic()
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
