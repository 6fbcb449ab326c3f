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

A blocking command (BLPOP k 0, WAIT, XREAD BLOCK …) may rightly wait for ever, so its own wait says nothing
about its node. While one waits, each tick asks ``probe(address)`` to send the node a PING on its AI link
(server/store/cluster_state.py), which is watched like any command: when the node leaves that unanswered for
a timeout, the link is given up on and so are the connections blocked on the same node, whose commands then
answer the error naming it. A live node answers the PING, and its blocked commands keep waiting.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from server.store.upstream import StoreAddress, Watched

TICKS_PER_TIMEOUT = 4


def no_answer_detail(address: StoreAddress, timeout_ms: int) -> str:
    """The text naming the node that did not answer, as the error's detail."""
    return (f"{address.describe()}: no answer within {timeout_ms} ms (--cluster-node-timeout-ms); "
            "its connection was reset")


class HungNodeWatch:
    """Which connection waits on the same command since when (see the module docstring)."""

    def __init__(self, timeout_ms: int, on_hung: Callable[[StoreAddress], None],
                 probe: Callable[[StoreAddress], None]) -> None:
        self.timeout_ms = timeout_ms
        self.tick_s = timeout_ms / 1000 / TICKS_PER_TIMEOUT
        self._on_hung = on_hung
        self._probe = probe
        self._unanswered: set[tuple[str, int]] = set()  # nodes whose probe failed since the last check
        self._seen: dict[int, tuple[object, float]] = {}  # id of the connection → (its oldest command, since)

    def check(self, channels: Iterable[tuple[StoreAddress, Watched]]) -> None:
        now = time.monotonic()
        seen: dict[int, tuple[object, float]] = {}
        hung: set[tuple[str, int]] = set()
        blocked: list[tuple[StoreAddress, Watched]] = []
        for address, channel in channels:
            oldest = channel.oldest_pending()
            if oldest is None:
                if channel.waits_blocked():
                    blocked.append((address, channel))
                continue
            before = self._seen.get(id(channel))
            since = before[1] if before is not None and before[0] is oldest else now
            if (now - since) * 1000 >= self.timeout_ms:
                channel.abort(no_answer_detail(address, self.timeout_ms))
                hung.add((address.host, address.port))
                self._on_hung(address)
                continue
            seen[id(channel)] = (oldest, since)
        self._seen = seen
        hung |= self._unanswered
        self._unanswered = set()
        self._blocked_on(blocked, hung)

    def unanswered(self, address: StoreAddress) -> None:
        """The node's probe failed (its link could not connect within the connect timeout, or was given up on):
        the connections blocked on it are given up on at the next check."""
        self._unanswered.add((address.host, address.port))

    def _blocked_on(self, blocked: list[tuple[StoreAddress, Watched]], hung: set[tuple[str, int]]) -> None:
        """The blocked connections: given up on with their node, else their node is probed (once a tick)."""
        probed: set[tuple[str, int]] = set()
        for address, channel in blocked:
            where = (address.host, address.port)
            if where in hung:
                channel.abort(no_answer_detail(address, self.timeout_ms))
            elif where not in probed:
                probed.add(where)
                self._probe(address)
