"""The per-command time limit of a single store (``--store-timeout-ms``): a store that stops answering (a stopped
process, a lost network, a listener that never replies) fails the commands waiting on it instead of hanging
their clients for ever.

Usage: ``watch = StallWatch(timeout_ms, channels, where, ping)``; ``await watch.run()`` in a task of its own
(``Server.start`` does it for the embedded store and ``--redis-url``; a cluster has its own watch,
server/store/cluster_watch.py, with ``--cluster-node-timeout-ms``, whose idea this is).

Every ``tick_s`` (a quarter of the timeout) the watch looks at the oldest unanswered command of each connection
to the store: the keyspace's pipelined links, the shared relays and each client's own session. A connection whose
oldest command is the same one for a whole timeout is aborted: the commands waiting on it answer
``ERR backing store unavailable: redis://host:port did not answer within N ms (--store-timeout-ms); its
connection was reset``, and the next command connects anew (so the link is back as soon as the store answers
again). A command is given up on between one and one and a quarter timeouts after it was sent. Nothing is done
per command: a tick reads one reference per connection.

A blocking command (BLPOP k 0, BLPOP k 5, WAIT, XREAD BLOCK …) may rightly wait longer than the timeout, so its
own wait says nothing: while one waits, each tick makes sure a PING is on its way to the store on the keyspace
link, watched like any command. A live store answers it and the blocked commands keep waiting (BLPOP k 5 gets
its nil after 5 s, BLPOP k 0 waits on); a store that leaves it unanswered for a timeout is hung, and the blocked
connections are aborted with the others; so are they when the PING fails (the link could not even connect
within its connect timeout).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from server.store.relays import ClientSession
from server.store.upstream import Watched

if TYPE_CHECKING:
    from server.store.redis import RedisStore

log = logging.getLogger("redisai.store")

TICKS_PER_TIMEOUT = 4


def no_answer_detail(where: str, timeout_ms: int) -> str:
    """The error's detail: which store did not answer, within what, and which setting says so."""
    return f"{where} did not answer within {timeout_ms} ms (--store-timeout-ms); its connection was reset"


class StallWatch:
    """Which connection waits on the same command since when (see the module docstring)."""

    def __init__(self, timeout_ms: int, channels: Callable[[], Iterable[Watched]], where: Callable[[], str],
                 ping: Callable[[], Awaitable[object]]) -> None:
        self.timeout_ms = timeout_ms
        self.tick_s = timeout_ms / 1000 / TICKS_PER_TIMEOUT
        self._channels = channels
        self._where = where
        self._ping = ping
        self._probing: asyncio.Future[object] | None = None  # the probe's PING in flight
        self._unanswered = False  # a probe failed since the last check
        self._seen: dict[int, tuple[object, float]] = {}  # id of the connection -> (its oldest command, since)

    async def run(self) -> None:
        """Check every ``tick_s`` until cancelled."""
        while True:
            await asyncio.sleep(self.tick_s)
            self.check()

    def check(self) -> int:
        """One tick: abort the connections stalled for a timeout (and then the blocked ones), or probe the store
        for the blocked ones; how many connections were aborted."""
        now = time.monotonic()
        seen: dict[int, tuple[object, float]] = {}
        stalled: list[Watched] = []
        blocked: list[Watched] = []
        for channel in list(self._channels()):
            oldest = channel.oldest_pending()
            if oldest is None:
                if channel.waits_blocked():
                    blocked.append(channel)
                continue
            before = self._seen.get(id(channel))
            since = before[1] if before is not None and before[0] is oldest else now
            if (now - since) * 1000 >= self.timeout_ms:
                stalled.append(channel)
            else:
                seen[id(channel)] = (oldest, since)
        self._seen = seen
        unanswered, self._unanswered = self._unanswered, False
        if stalled or (unanswered and blocked):
            return self._abort([*stalled, *blocked])
        if blocked:
            self._probe()
        return 0

    def _probe(self) -> None:
        """A PING on its way to the store (one at a time), for the blocked connections (module docstring)."""
        if self._probing is None or self._probing.done():
            self._probing = asyncio.ensure_future(self._ping())
            self._probing.add_done_callback(self._probed)

    def _probed(self, ping: asyncio.Future[object]) -> None:
        """A PING that failed (its link given up on, or never connected) says the store is not answering; an
        error reply (LOADING, NOAUTH) is an answer."""
        if not ping.cancelled() and ping.exception() is not None:
            self._unanswered = True

    def _abort(self, channels: list[Watched]) -> int:
        detail = no_answer_detail(self._where(), self.timeout_ms)
        log.warning("store at %s did not answer within %d ms (--store-timeout-ms): %d connection(s) reset, "
                    "their waiting commands failed", self._where(), self.timeout_ms, len(channels))
        for channel in channels:
            channel.abort(detail)
        return len(channels)


def single_store_channels(store: RedisStore, clients: Mapping[int, object]) -> list[Watched]:
    """Every connection of a single store (embedded or --redis-url) that may wait on it: the store's own
    (``RedisStore.connections``) and the sessions of the connected clients (``client.relay.session``)."""
    found: list[Watched] = [*store.connections()]
    for client in list(clients.values()):
        session = getattr(getattr(client, "relay", None), "session", None)
        if isinstance(session, ClientSession):
            found.extend(session.connections())
    return found
