"""What the model and script commands share about their stored objects: deleting one, listing them."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from backends.errors import AIError, wrong_arity
from backends.objects import MARKER_FIELD, MODEL_MARKER, SCRIPT_MARKER
from server.protocol.reply import OK
from server.store.atomic import DELETE_OBJECT
from server.store.keyspace import Keyspace
from server.store.stored_objects import stored_object_keys

if TYPE_CHECKING:
    from server.commands.context import Client

log = logging.getLogger("redisai.commands")


def log_stored(kind: str, key: bytes, backend: str, device: str, size: int, started: float) -> None:
    """The notice line of a model or script stored (``started``: perf_counter before it was built)."""
    if log.isEnabledFor(logging.INFO):
        load_ms = round((time.perf_counter() - started) * 1000, 1)
        log.info("%s stored", kind, extra={"fields": {"key": key, "backend": backend, "device": device,
                                                      "size": size, "load_ms": load_ms}})


async def delete_stored(client: Client, argv: list[bytes], marker: bytes, empty_msg: str) -> Any:
    """AI.MODELDEL / AI.SCRIPTDEL key: DEL restricted to the right kind of object; its stats go too."""
    if len(argv) != 2:
        raise wrong_arity(argv[0].decode(errors="replace"))
    keyspace = client.keyspace()
    if not await keyspace.run_script(DELETE_OBJECT, [argv[1], keyspace.stats_key(argv[1])], [marker]):  # at once
        raise AIError(empty_msg)
    client.ctx.ai.stats.pop(argv[1], None)
    client.ctx.metrics.forget(argv[1])
    return OK


async def scan_stored(client: Client, argv: list[bytes], marker: bytes) -> Any:
    """AI._MODELSCAN / AI._SCRIPTSCAN: [key, tag] of every object of that kind in the caller's database, whoever
    stored it. RedisAI lists its stats registry; ours is in the store (the counters beside each object), so
    the scan walks those and keeps the keys that still hold such an object: a DEL, RENAME, expiry or flush
    by anyone is followed. It walks the whole keyspace (SCAN), as an experimental admin command may."""
    if len(argv) != 1:
        raise wrong_arity(argv[0].decode(errors="replace"))
    log.warning("%s is experimental", argv[0].decode(errors="replace").upper())
    keyspace = client.keyspace()
    names = await stored_object_keys(keyspace)
    tags = await keyspace.pipeline([(b"HMGET", name, MARKER_FIELD, b"tag") for name in names])
    return [[name, found[1]] for name, found in zip(names, tags, strict=True)
            if isinstance(found, list) and found[0] == marker]


async def count_stored(keyspace: Keyspace) -> tuple[int, int]:
    """How many models and scripts this database holds (INFO ai_models / ai_scripts), from their counters in
    the store and a check that each key still holds such an object: DEL, FLUSHDB or another server's
    writes are followed, as in the scans."""
    names = await stored_object_keys(keyspace)
    markers = await keyspace.pipeline([(b"HGET", name, MARKER_FIELD) for name in names]) if names else []
    return markers.count(MODEL_MARKER), markers.count(SCRIPT_MARKER)

