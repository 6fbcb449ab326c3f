"""Which node's slot map the server takes (server/store/cluster_state.py ``ClusterState.refresh``), against two
stand-in nodes on loopback that answer the map queries over RESP: a node that says the cluster is down
(``cluster_state:fail``, as a primary cut off from the others says while it still claims its slots) gives its
map, but the next refresh asks it last, and the map of a node that says the cluster is ok replaces it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import hiredis

from server.store.cluster_state import ClusterState
from server.store.upstream import StoreAddress


def _bulk(text: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(text), text)


def _slots_reply(port: int) -> bytes:
    """CLUSTER SLOTS: every slot served by the primary at ``port``."""
    return b"*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n" + _bulk(b"127.0.0.1") + b":%d\r\n" % port + _bulk(b"id%d" % port)


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def _node(serves: Callable[[], int], state: bytes) -> Handler:
    """A stand-in node: CLUSTER SHARDS unknown (the map comes from CLUSTER SLOTS: every slot to the port
    ``serves`` gives), CLUSTER INFO with ``cluster_state:<state>``, +OK to anything else (a login, a SELECT)."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        parser = hiredis.Reader()
        while data := await reader.read(65536):
            parser.feed(data)
            while (command := parser.gets()) is not False:
                words = [word.upper() for word in command]
                if words[:2] == [b"CLUSTER", b"SHARDS"]:
                    writer.write(b"-ERR unknown subcommand 'SHARDS'\r\n")
                elif words[:2] == [b"CLUSTER", b"SLOTS"]:
                    writer.write(_slots_reply(serves()))
                elif words[:2] == [b"CLUSTER", b"INFO"]:
                    writer.write(_bulk(b"cluster_state:" + state + b"\r\ncluster_slots_assigned:16384\r\n"))
                else:
                    writer.write(b"+OK\r\n")
        writer.close()
    return handle


def test_a_map_from_a_node_that_says_the_cluster_is_down_is_taken_but_asked_last_next_time() -> None:
    async def scenario() -> list[int]:
        healthy = await asyncio.start_server(_node(lambda: healthy_port, b"ok"), "127.0.0.1", 0)
        healthy_port = healthy.sockets[0].getsockname()[1]
        cut_off = await asyncio.start_server(_node(lambda: cut_off_port, b"fail"), "127.0.0.1", 0)
        cut_off_port = cut_off.sockets[0].getsockname()[1]
        state = ClusterState(StoreAddress(port=cut_off_port), [StoreAddress(port=healthy_port)])
        served: list[int] = []
        try:
            for _ in range(3):
                await state.refresh()
                primary = state.topology.primary_of(0)
                assert primary is not None
                served.append(primary.port)
        finally:
            state.close()
            await state.stopped()
            for server in (healthy, cut_off):
                server.close()
                await server.wait_closed()
        return [1 if port == healthy_port else 0 for port in served]

    # the cut-off node is asked first (the seed) and its map is taken; then the healthy node's, which stays
    assert asyncio.run(scenario()) == [0, 1, 1]
