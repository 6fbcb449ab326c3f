"""A Redis Cluster's map of slots to primaries, as CLUSTER SHARDS (Redis 7+, Valkey) or CLUSTER SLOTS (older)
tells it.

Usage: ``topology = parse_shards(reply, seed)`` / ``parse_slots(reply, seed)``; ``topology.primary_of(slot)``
→ the ``StoreAddress`` of the node that serves it (login and TLS of the seed, db 0), ``topology.primaries``
→ every primary once. A slot no primary serves maps to None: commands for it get a clear error naming it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from server.store.cluster_keys import SLOTS, as_map
from server.store.upstream import StoreAddress


@dataclasses.dataclass(frozen=True)
class Topology:
    """Which primary serves each slot (an index into ``primaries``, -1 for none)."""

    primaries: tuple[StoreAddress, ...]
    owners: tuple[int, ...]  # per slot

    def primary_of(self, slot: int) -> StoreAddress | None:
        index = self.owners[slot]
        return self.primaries[index] if index >= 0 else None

    def covered(self) -> bool:
        return all(index >= 0 for index in self.owners)


def node_address(seed: StoreAddress, host: str, port: int) -> StoreAddress:
    """A cluster node, reached with the seed's login and TLS settings (a cluster has only db 0)."""
    return dataclasses.replace(seed, host=host, port=port, path="", db=0)


def _build(seed: StoreAddress, ranges: list[tuple[int, int, tuple[str, int]]]) -> Topology:
    primaries: list[StoreAddress] = []
    index_of: dict[tuple[str, int], int] = {}
    owners = [-1] * SLOTS
    for start, end, where in sorted(ranges):  # primaries in slot order, whichever node answered
        if where not in index_of:
            index_of[where] = len(primaries)
            primaries.append(node_address(seed, *where))
        first, last = max(start, 0), min(end, SLOTS - 1)
        if first <= last:  # one slice per range: a loop over 16,384 slots cost ~2.6 million instructions, every
            owners[first : last + 1] = [index_of[where]] * (last - first + 1)  # 5 s (the periodic refresh)
    return Topology(tuple(primaries), tuple(owners))


def parse_shards(reply: Any, seed: StoreAddress) -> Topology:
    """CLUSTER SHARDS: each shard's slot ranges and its nodes; the primary is the node whose role is master."""
    ranges: list[tuple[int, int, tuple[str, int]]] = []
    for shard in reply if isinstance(reply, list) else []:
        fields = as_map(shard)
        slots = fields.get(b"slots", [])
        primary = _primary(fields.get(b"nodes", []), seed.use_tls)
        if primary is None or not isinstance(slots, list):
            continue
        for i in range(0, len(slots) - 1, 2):
            ranges.append((int(slots[i]), int(slots[i + 1]), primary))
    return _build(seed, ranges)


def parse_slots(reply: Any, seed: StoreAddress, asked: StoreAddress | None = None) -> Topology:
    """CLUSTER SLOTS: [start, end, [host, port, id, …] of the primary, replicas …] per range. An endpoint that
    is null, empty or ``?`` is the host of the node ``asked`` (Redis: the one the query was sent to)."""
    ranges: list[tuple[int, int, tuple[str, int]]] = []
    for entry in reply if isinstance(reply, list) else []:
        if isinstance(entry, list) and len(entry) >= 3 and isinstance(entry[2], list) and len(entry[2]) >= 2:
            endpoint = entry[2][0]  # null with cluster-preferred-endpoint-type unknown-endpoint; "?" unknown
            host = endpoint.decode() if isinstance(endpoint, bytes) and endpoint != b"?" else ""
            fallback = asked.host if asked is not None else seed.host
            ranges.append((int(entry[0]), int(entry[1]), (host or fallback, int(entry[2][1]))))
    return _build(seed, ranges)


def _primary(nodes: Any, tls: bool) -> tuple[str, int] | None:
    for raw in nodes if isinstance(nodes, list) else []:
        node = as_map(raw)
        if node.get(b"role") != b"master" or node.get(b"health") == b"fail":
            continue
        port = node.get(b"tls-port") if tls and b"tls-port" in node else node.get(b"port")
        endpoint = node.get(b"endpoint") or node.get(b"ip") or b""
        host = endpoint.decode() if isinstance(endpoint, bytes) and endpoint not in (b"?", b"") else ""
        if not host:
            ip = node.get(b"ip")
            host = ip.decode() if isinstance(ip, bytes) else ""
        if isinstance(port, int) and host:
            return host, port
    return None

