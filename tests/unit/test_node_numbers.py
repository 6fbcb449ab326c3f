"""Which node the coherent cache keeps a key's entries on (server/store/nodes.py): a single store's router
answers its one node for every key; a cluster's numbers each primary, looks each slot's number up once per
map, and starts over when the map changes (the cache drops every entry then), keeping each node's number."""

from __future__ import annotations

import asyncio

from server.store.cluster_keys import SLOTS, key_slot
from server.store.cluster_link import OneNode, RedisLink
from server.store.cluster_state import ClusterState
from server.store.cluster_topology import Topology
from server.store.nodes import SEVERAL_NODES, UNROUTED
from server.store.upstream import StoreAddress

A = StoreAddress(port=7001)
B = StoreAddress(port=7002)
C = StoreAddress(port=7003)


def _halves(first: StoreAddress, second: StoreAddress, unserved: int | None = None) -> Topology:
    """The first half of the slots to ``first``, the rest to ``second`` (``unserved``: that slot to none)."""
    owners = [0 if slot < SLOTS // 2 else 1 for slot in range(SLOTS)]
    if unserved is not None:
        owners[unserved] = -1
    return Topology((first, second), tuple(owners))


def _key_in(low: bool, avoid: set[int] | None = None) -> bytes:
    """A key whose slot is in the lower (or upper) half, not one of ``avoid``."""
    for number in range(10_000):
        key = b"k%d" % number
        slot = key_slot(key)
        if (slot < SLOTS // 2) == low and slot not in (avoid or set()):
            return key
    raise AssertionError("no such key")


def test_a_single_store_has_one_node_for_every_key() -> None:
    address = StoreAddress(port=6390, db=3)
    router = OneNode(RedisLink(address, 3))
    reads = [(b"GET", b"a"), (b"HMGET", b"b", b"f")]
    assert [router.node_number(b"a"), router.common_node(reads), router.copy_node(b"a")] == [0, 0, 0]
    assert router.node_address(0) is address and router.serves(0)
    assert router.numbering() is router.numbering()


def test_a_cluster_numbers_its_primaries_and_starts_over_when_the_map_changes() -> None:
    async def scenario() -> None:
        state = ClusterState(A)
        changes: list[int] = []
        state.on_change(lambda: changes.append(1))
        low, high = _key_in(True), _key_in(False)
        lost = _key_in(True, avoid={key_slot(low)})
        state._take(_halves(A, B, unserved=key_slot(lost)))
        first = state.numbering()
        a, b = state.node_number(low), state.node_number(high)
        assert (state.node_address(a), state.node_address(b)) == (A, B) and a != b
        assert state.node_number(lost) == UNROUTED
        assert state.common_node([(b"GET", low), (b"GET", low)]) == a
        assert state.common_node([(b"GET", low), (b"GET", high)]) == SEVERAL_NODES
        assert state.copy_node(low) == UNROUTED  # no stamped copies kept on a cluster
        state._take(_halves(C, A))  # A now serves the upper half; B is no primary any more
        assert changes == [1, 1] and state.numbering() is not first
        assert state.node_number(high) == a and state.node_address(state.node_number(low)) == C
        assert state.serves(a) and not state.serves(b)
        state.close()
        await state.stopped()

    asyncio.run(scenario())
