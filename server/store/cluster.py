"""A Redis Cluster (or Valkey Cluster) as the backing store: ``--redis-url`` pointing at any node of one.

The server finds out at start (``INFO cluster`` says ``cluster_enabled:1``; server/app.py), reads the slot
map, and from then on every key goes to the primary that owns it — AI commands through ``ClusterLink``
(server/store/cluster_link.py), relayed commands through ``SharedRelay`` / ``ClientSession``
(server/store/relays.py), all three over the ``ClusterState`` as their router. No hash tags are needed: a model,
its inputs and its outputs may live on three shards. What that means for atomicity is in docs/deployment.md
("Redis Cluster").

A cluster has only database 0. Model metadata is cached as on one node, with one tracking connection per
primary (server/store/cache.py); so are a run's input tensors, which the output write checks in its own
script when they share its slot, else by a check on their shard in the same round trip (under load, those
are read instead: ``Keyspace.inputs_from_cache``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from backends import errors as msgs
from backends.errors import AIError
from server.store.cache import TrackedCache
from server.store.cluster_link import ClusterLink
from server.store.cluster_state import ClusterState
from server.store.keyspace import load_scripts, status_text
from server.store.relays import ClientSession, SharedRelay
from server.store.session import SessionSink
from server.store.upstream import StoreAddress, parse_store_url


class ClusterStore:
    """The cluster behind the server (see the module docstring)."""

    kind = "cluster"

    def __init__(self, url: str, extra_seeds: Sequence[str] = (), node_timeout_ms: int = 3000,
                 cache_bytes: int = 0) -> None:
        self.address = parse_store_url(url)
        self.default_db = 0
        self.cluster = ClusterState(self.address, [_seed(s) for s in extra_seeds], node_timeout_ms)
        self._link = ClusterLink(self.cluster)
        self.cache = TrackedCache(self.link, cache_bytes)  # server/store/cache.py
        self._relay = SharedRelay(self.cluster)

    async def start(self) -> None:
        if self.address.db:
            raise AIError(msgs.CLUSTER_DB_FMT.format(db=self.address.db))
        await self.cluster.start()
        await asyncio.gather(*(load_scripts(link) for link in self._link.shards()))

    def open_session(self, sink: SessionSink) -> ClientSession:
        return ClientSession(self.cluster, sink)

    def shared_relay(self, db: int) -> SharedRelay:
        return self._relay

    def link(self, db: int) -> ClusterLink:
        return self._link

    async def close(self) -> None:
        self.cache.close()
        self.cluster.close()
        await self.cluster.stopped()

    def describe(self) -> str:
        primaries = len(self.cluster.topology.primaries)
        return f"cluster via {self.address.describe()} ({primaries} primaries)"

    async def info(self, sections: list[str]) -> str:
        """The first primary's INFO, with the keyspace section summed over every primary."""
        asked = [s.encode() for s in sections]
        replies = await asyncio.gather(*(link.pipeline([[b"INFO", *asked]]) for link in self._link.shards()))
        texts: list[str] = []
        for (reply,) in replies:
            if isinstance(reply, AIError):
                raise reply
            texts.append(status_text(reply))
        # To its clients the server is one endpoint: a cluster client must not go around it to the nodes.
        return _merge_keyspace(texts).replace("cluster_enabled:1", "cluster_enabled:0")


def _seed(text: str) -> StoreAddress:
    host, _, port = text.rpartition(":")
    return StoreAddress(host=host or "127.0.0.1", port=int(port))


def _merge_keyspace(texts: list[str]) -> str:
    """``db0:keys=…,expires=…,avg_ttl=…`` summed (avg_ttl: the largest) into the first text."""
    totals: dict[str, int] = {"keys": 0, "expires": 0, "avg_ttl": 0}
    seen = False
    for text in texts:
        for line in text.splitlines():
            if line.startswith("db0:"):
                seen = True
                for part in line[4:].split(","):
                    name, _, value = part.partition("=")
                    if name in totals and value.isdigit():
                        totals[name] = max(totals[name], int(value)) if name == "avg_ttl" else totals[name] + int(value)
    lines = [line for line in texts[0].splitlines() if not line.startswith("db0:")] if texts else []
    if seen:
        at = next((i + 1 for i, line in enumerate(lines) if line.startswith("# Keyspace")), len(lines))
        lines.insert(at, "db0:" + ",".join(f"{k}={v}" for k, v in totals.items()))
    return "\r\n".join(lines) + "\r\n"
