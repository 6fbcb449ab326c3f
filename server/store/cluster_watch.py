"""The per-command timeout of a cluster's nodes: a node that leaves a command unanswered for
``--cluster-node-timeout-ms`` is given up on, so a hung primary (a stopped process, a partition: no error, no
MOVED, its connections stay open) never hangs a client.

Usage: ``watch = HungNodeWatch(timeout_s, on_hung)``; ``watch.check(channels)`` every ``watch.tick_s``, with
each pipelined connection (the keyspace's links, the shared relays) by node. A connection whose oldest
command is the same one for a whole timeout is aborted: the commands waiting on it answer
``ERR backing store unavailable: redis://host:port: no answer within N ms …`` (naming the node), the next
command connects anew instead of queueing behind them, and ``on_hung`` (a map refresh) is called. Nothing is
done per command: a tick looks at one reference per connection, so the timeout costs the request path nothing;
a command is given up on between one and about one and a half timeouts after it was sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Protocol

from server.store.upstream import StoreAddress

TICKS_PER_TIMEOUT = 4


class Watched(Protocol):
    """A pipelined connection to one node (server/store/redis.py RedisLink, SharedRelay)."""

    def oldest_pending(self) -> object | None: ...

    def abort(self, detail: str) -> None: ...


def no_answer_detail(address: StoreAddress, timeout_ms: int) -> str:
    """The text naming the node that did not answer, as the error's detail."""
    return (f"{address.describe()}: no answer within {timeout_ms} ms (--cluster-node-timeout-ms); "
            "its connection was reset")


class HungNodeWatch:
    """Which connection waits on the same command since when (see the module docstring)."""

    def __init__(self, timeout_ms: int, on_hung: Callable[[StoreAddress], None]) -> None:
        self.timeout_ms = timeout_ms
        self.tick_s = timeout_ms / 1000 / TICKS_PER_TIMEOUT
        self._on_hung = on_hung
        self._seen: dict[int, tuple[object, float]] = {}  # id of the connection → (its oldest command, since)

    def check(self, channels: Iterable[tuple[StoreAddress, Watched]]) -> None:
        now = time.monotonic()
        seen: dict[int, tuple[object, float]] = {}
        for address, channel in channels:
            oldest = channel.oldest_pending()
            if oldest is None:
                continue
            before = self._seen.get(id(channel))
            since = before[1] if before is not None and before[0] is oldest else now
            if (now - since) * 1000 >= self.timeout_ms:
                channel.abort(no_answer_detail(address, self.timeout_ms))
                self._on_hung(address)
                continue
            seen[id(channel)] = (oldest, since)
        self._seen = seen
