"""Stored graph commands: AI.GRAPHSTORE, AI.GRAPHGET, AI.GRAPHDEL, AI._GRAPHSCAN, AI.GRAPHEXECUTE.

A graph is a DAG of AI.DAGEXECUTE's ops over graph-local names, validated and compiled once when it is
stored (dag/graph_plan.py) and kept in the store as one hash (graph_store.py), so every server sharing
the store runs it. AI.GRAPHEXECUTE binds its inputs and outputs to keys and runs it (graph_run.py).
docs/commands-graphs.md has the whole story.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backends import errors as msgs
from backends.objects import GRAPH_MARKER
from dag.graph_plan import group_by_device, plan_graph, with_keys
from server.ai.graphs import StoredGraph
from server.commands.graph_args import INTERPRETED, parse_graphexecute, parse_graphget_flags, parse_graphstore
from server.commands.graph_run import execute_graph
from server.commands.graph_store import graph_hash_fields, known_devices, load_graph, stored_graph
from server.commands.stored import delete_stored, scan_stored
from server.protocol.reply import OK
from server.store.atomic import store_object_call

if TYPE_CHECKING:
    from server.commands.context import Client


async def cmd_graphstore(client: Client, argv: list[bytes]) -> Any:
    """AI.GRAPHSTORE key [TAG tag] INPUTS n name... OUTPUTS m name... |> op [|> op ...]"""
    req = parse_graphstore(argv)
    plan = plan_graph(req.inputs, req.outputs, [op.io for op in req.ops])
    keyspace = client.keyspace()
    plan = group_by_device(with_keys(plan, req.ops), await known_devices(keyspace, req))
    source = argv[2:]
    digest, fields = graph_hash_fields(req, source, plan)
    await keyspace.run_script(*store_object_call(req.key, keyspace.stats_key(req.key), GRAPH_MARKER, fields))
    client.ctx.ai.graphs.put(stored_graph(digest, req, source, plan))
    return OK


def _numbers(ops: tuple[int, ...]) -> list[int]:
    """Op indices as the commands count them (op 1 is the first)."""
    return [op + 1 for op in ops]


def graph_meta(graph: StoredGraph) -> list[Any]:
    plan = graph.plan
    return ["tag", graph.tag, "inputs", list(graph.inputs), "outputs", list(graph.outputs), "ops", len(graph.ops),
            "models", list(graph.models), "scripts", list(graph.scripts), "digest", graph.digest,
            "slots", plan.n_slots, "order", _numbers(plan.order), "deps", list(plan.deps),
            "devices", [[device, _numbers(ops)] for device, ops in plan.groups]]


async def cmd_graphget(client: Client, argv: list[bytes]) -> Any:
    """AI.GRAPHGET key [META] [SOURCE]"""
    want_meta, want_source = parse_graphget_flags(argv)
    graph = await load_graph(client.ctx.ai.graphs, client.keyspace(), argv[1], checked=False)  # answers a client
    source = list(graph.source)
    if not want_meta:
        return source
    meta = graph_meta(graph)
    return [*meta, "source", source] if want_source else meta


async def cmd_graphdel(client: Client, argv: list[bytes]) -> Any:
    """AI.GRAPHDEL key"""
    return await delete_stored(client, argv, GRAPH_MARKER, msgs.GRAPH_KEY_EMPTY_MSG)


async def cmd_graphscan(client: Client, argv: list[bytes]) -> Any:
    """AI._GRAPHSCAN"""
    return await scan_stored(client, argv, GRAPH_MARKER)


async def cmd_graphexecute(client: Client, argv: list[bytes]) -> Any:
    """AI.GRAPHEXECUTE key INPUTS n key... OUTPUTS m key... [TIMEOUT ms] [MODE COMPILED|INTERPRETED]"""
    req = parse_graphexecute(argv)
    # a compiled run's write checks the graph's digest: its head may come from the cache; an interpreted one's not
    graph = await load_graph(client.ctx.ai.graphs, client.keyspace(), req.key, checked=req.mode != INTERPRETED)
    return await execute_graph(client.ctx, client.keyspace(), graph, req)
