"""A graph as a Redis value: one hash holding its source and its compiled form, and reading it back.

Layout (field → value, all bulk strings)::

    __redisai__  "graph"     marker: other AI commands answer WRONGTYPE on it, graph commands on anything else
    format       "1"         this layout's version
    tag          bytes ("" when none)
    digest       sha256 hex of source and compiled: each process decodes a graph once per digest
    source       AI.GRAPHSTORE's arguments after the key, as a JSON list (bytes as latin-1 text)
    compiled     the plan (dag/graph_plan.py ``encode_plan``: JSON with its own format version)

Reading it back re-checks the source with the store-time parser (so the constants are built again) and
decodes the plan; a plan that does not fit its source, or a version this build does not know, is refused.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from backends import errors as msgs
from backends.device import parse_device_lenient
from backends.errors import AIError
from backends.objects import GRAPH_MARKER, MARKER_FIELD, MODEL_MARKER, SCRIPT_MARKER
from dag.graph_plan import CONSTANT_KIND, MODEL_KIND, GraphPlan, decode_plan, encode_plan, with_keys
from server.ai.graphs import GraphCache, StoredGraph
from server.ai.stored import LOAD_TRIES
from server.commands.graph_args import GraphStoreRequest, parse_graphstore
from server.store.keyspace import Keyspace

GRAPH_FORMAT = b"1"
GRAPH_HEAD_FIELDS = (MARKER_FIELD, b"format", b"digest")


def _encode_args(args: list[bytes]) -> bytes:
    return json.dumps([arg.decode("latin-1") for arg in args], separators=(",", ":")).encode()


def _decode_args(raw: bytes) -> list[bytes]:
    values = json.loads(raw)
    if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
        raise ValueError("not a list of strings")
    return [value.encode("latin-1") for value in values]


def graph_hash_fields(req: GraphStoreRequest, source: list[bytes], plan: GraphPlan) -> tuple[str, list[bytes]]:
    """The digest and the HSET arguments (field, value, …) of a graph."""
    encoded_source, compiled = _encode_args(source), encode_plan(plan)
    digest = hashlib.sha256(encoded_source + b"\0" + compiled).hexdigest()
    pairs = [(MARKER_FIELD, GRAPH_MARKER), (b"format", GRAPH_FORMAT), (b"tag", req.tag), (b"digest", digest.encode()),
             (b"source", encoded_source), (b"compiled", compiled)]
    return digest, [part for pair in pairs for part in pair]


def stored_graph(digest: str, req: GraphStoreRequest, source: list[bytes], plan: GraphPlan) -> StoredGraph:
    return StoredGraph(digest, req.tag, req.inputs, req.outputs, req.ops, plan, plan.models, plan.scripts,
                       tuple(source))


def _fits(plan: GraphPlan, req: GraphStoreRequest) -> bool:
    """The compiled form belongs to this source: the same ops, inputs, outputs and keys read."""
    keys = with_keys(plan, req.ops)
    return (len(plan.deps) == len(req.ops) and len(plan.input_slots) == len(req.inputs)
            and len(plan.output_slots) == len(req.outputs) and (keys.models, keys.scripts) == (plan.models,
                                                                                              plan.scripts))


def decode_graph(key: bytes, digest: str, source: Any, compiled: Any) -> StoredGraph:
    """A graph from its stored ``source`` and ``compiled`` fields (see the module docstring)."""
    if not isinstance(source, bytes) or not isinstance(compiled, bytes):
        raise AIError(msgs.GRAPH_DAMAGED_MSG)
    plan = decode_plan(compiled)
    try:
        args = _decode_args(source)
        req = parse_graphstore([b"AI.GRAPHSTORE", key, *args])
    except (ValueError, AIError) as exc:
        raise AIError(msgs.GRAPH_DAMAGED_MSG) from exc
    if not _fits(plan, req):
        raise AIError(msgs.GRAPH_DAMAGED_MSG)
    return stored_graph(digest, req, args, plan)


def check_graph_head(values: Any, exists: Any) -> str | None:
    """``HMGET key *GRAPH_HEAD_FIELDS`` (with EXISTS when every field was missing): the digest; None when the key
    is missing; WRONGTYPE when it holds anything but a graph; a clear error for a layout of another version."""
    if not exists:
        return None
    if isinstance(values, AIError) or not isinstance(values, list) or values[0] != GRAPH_MARKER:
        raise AIError(msgs.WRONGTYPE_MSG)
    if values[1] != GRAPH_FORMAT:
        found = values[1].decode(errors="replace") if isinstance(values[1], bytes) else values[1]
        raise AIError(msgs.GRAPH_FORMAT_FMT.format(found=found, known=GRAPH_FORMAT.decode()))
    if not isinstance(values[2], bytes):
        raise AIError(msgs.GRAPH_DAMAGED_MSG)
    return values[2].decode()


async def read_head(keyspace: Keyspace, key: bytes, fresh: bool = False, checked: bool = True) -> str:
    """The digest of the graph at ``key``: from the coherent cache when it holds the hash's head, for a read
    whose write checks the digest (``checked``: a compiled run's); from the store otherwise, and when ``fresh``
    (which also drops the cached head)."""
    command = (b"HMGET", key, *GRAPH_HEAD_FIELDS)
    if fresh:
        keyspace.forget([key])
    from_cache = checked and not fresh
    (values,) = await (keyspace.read_through([command]) if from_cache else keyspace.pipeline([command]))
    missing = isinstance(values, list) and all(value is None for value in values)
    exists = await keyspace.call(b"EXISTS", key) if missing else 1
    digest = check_graph_head(values, exists)
    if digest is None:
        raise AIError(msgs.GRAPH_KEY_EMPTY_MSG)
    return digest


async def load_graph(graphs: GraphCache, keyspace: Keyspace, key: bytes, fresh: bool = False,
                     checked: bool = True) -> StoredGraph:
    """The graph at ``key``: decoded once per digest in this process, as models are loaded once per digest. Its
    source is read with the digest it is filed under: a graph stored again since its head was read (a cached
    head a push has not reached yet) is read again from the store, ``LOAD_TRIES`` times in all. ``checked``:
    the caller's write checks the graph's digest (a compiled run), so its head may come from the cache; a
    reply to a client (AI.GRAPHGET) or an interpreted run, which has no such check, reads it from the store."""
    for _ in range(LOAD_TRIES):
        digest = await read_head(keyspace, key, fresh, checked)
        cached = graphs.get(digest)
        if cached is not None:
            return cached
        source, compiled, stored = await keyspace.call(b"HMGET", key, b"source", b"compiled", b"digest")
        if stored == digest.encode():
            return graphs.put(decode_graph(key, digest, source, compiled))
        fresh = True
    raise AIError(msgs.GRAPH_CHANGED_MSG)


async def known_devices(keyspace: Keyspace, req: GraphStoreRequest) -> list[str | None]:
    """Per op, the device queue of the model or script it names as the store holds it now ("" when there is
    none yet, or the key holds something else: that is found out when the graph runs); None for constants."""
    named = [op for op in req.ops if op.kind != CONSTANT_KIND]
    replies = await keyspace.pipeline([(b"HMGET", op.key or b"", MARKER_FIELD, b"device") for op in named])
    found = iter(replies)
    devices: list[str | None] = []
    for op in req.ops:
        if op.kind == CONSTANT_KIND:
            devices.append(None)
            continue
        reply = next(found)
        marker = MODEL_MARKER if op.kind == MODEL_KIND else SCRIPT_MARKER
        ok = isinstance(reply, list) and reply[0] == marker and isinstance(reply[1], bytes)
        devices.append(parse_device_lenient(reply[1]).queue_name if ok else "")
    return devices
