"""Which node of the store serves a key, as a small number: what the coherent cache keeps each node's entries
apart by (server/store/cache.py).

``NodeMap`` is the part of every ``Router`` (server/store/cluster_link.py) that the cache asks. Its defaults are
a single store's: one node, number 0, whatever the key (no slot hashed), and a map that never changes. A
cluster's (``ClusterState``, server/store/cluster_state.py) numbers each primary and looks each slot's number up
once per map.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from server.store.upstream import StoreAddress, Watched

UNROUTED: Final = -1
"""The node number of a key whose slot no node serves now (a cluster mid-failover)."""
SEVERAL_NODES: Final = -2
"""What ``NodeMap.common_node`` says of commands whose keys several nodes serve."""


class NodeMap(ABC):
    """The store's nodes by number (see the module docstring)."""

    def node_number(self, key: bytes) -> int:
        """A small number for the node serving ``key`` now, the same for every key it serves until the map
        changes (UNROUTED: no node does now)."""
        return 0

    def common_node(self, commands: Sequence[tuple[bytes, ...]]) -> int:
        """``node_number`` of every command's key (``command[1]``) when they are all the same, else
        SEVERAL_NODES: one call a cached read, not one a key."""
        return 0

    def copy_node(self, key: bytes) -> int:
        """The number of the node whose cache keeps ``key``'s stamped tensor copy (UNROUTED: none is kept)."""
        return 0

    @abstractmethod
    def node_address(self, number: int) -> StoreAddress:
        """The node numbered ``number``: where its cache's tracking connections go."""

    def serves(self, number: int) -> bool:
        """Whether node ``number`` is still a primary (a new map may leave it none)."""
        return True

    def numbering(self) -> object:
        """What the node numbers of keys hold under: a new object whenever the map changes."""
        return self

    def on_change(self, callback: Callable[[], None]) -> None:  # noqa: B027 (a single store's default)
        """Call ``callback`` whenever the map changes (a single store's never does)."""

    def watch_too(  # noqa: B027 (a single store's default)
            self, source: Callable[[], Iterable[tuple[StoreAddress, Watched]]]) -> None:
        """More connections for the map's hung-node watchdog (a single store's are the stall watch's, through
        ``RedisStore.connections``)."""

    def request_refresh(self) -> None:  # noqa: B027 (a single store's default)
        """Read the map again soon (a node failed, or said its slot moved)."""
