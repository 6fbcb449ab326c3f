"""What the model and script commands share about their stored objects: deleting one, listing them."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from backends.errors import AIError, wrong_arity
from backends.objects import MODEL_MARKER, SCRIPT_MARKER
from server.protocol.reply import OK
from server.store.atomic import DELETE_OBJECT, ScriptCall
from server.store.keyspace import Keyspace
from server.store.stored_objects import stored_objects

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
    """AI.MODELDEL / AI.SCRIPTDEL key: DEL restricted to the right kind of object; its stats go too (they are
    fields of its hash)."""
    if len(argv) != 2:
        raise wrong_arity(argv[0].decode(errors="replace"))
    reply = await client.keyspace().run_script(*delete_call(client.keyspace(), argv[1], marker))  # at once
    return deleted(client, argv[1], reply, empty_msg)


def delete_call(keyspace: Keyspace, key: bytes, marker: bytes) -> ScriptCall:
    """The check-and-delete of the object (of kind ``marker``) at ``key``, its counters with it."""
    return DELETE_OBJECT, [key], [marker]


def deleted(client: Client, key: bytes, reply: Any, empty_msg: str) -> Any:
    """The answer to DELETE_OBJECT's ``reply`` (1: deleted, 0: nothing there); this process forgets the object."""
    if not reply:
        raise AIError(empty_msg)
    client.ctx.ai.stats.pop(key, None)
    client.ctx.metrics.forget(key)
    return OK


async def scan_stored(client: Client, argv: list[bytes], marker: bytes) -> Any:
    """AI._MODELSCAN / AI._SCRIPTSCAN: [key, tag] of every object of that kind in the caller's database, whoever
    stored it. RedisAI lists its stats registry; ours is in the store (the counters in each object's hash), so
    the scan walks the database's hashes and lists those holding such an object under the name it was stored
    with: a DEL, RENAME, expiry or flush by anyone is followed. It walks the whole keyspace (SCAN), as an
    experimental admin command may."""
    if len(argv) != 1:
        raise wrong_arity(argv[0].decode(errors="replace"))
    log.warning("%s is experimental", argv[0].decode(errors="replace").upper())
    return [[found.key, found.tag] for found in await stored_objects(client.keyspace()) if found.marker == marker]


async def count_stored(keyspace: Keyspace) -> tuple[int, int]:
    """How many models and scripts this database holds (INFO ai_models / ai_scripts), as the scans find them:
    DEL, FLUSHDB or another server's writes are followed."""
    kinds = [found.marker for found in await stored_objects(keyspace)]
    return kinds.count(MODEL_MARKER), kinds.count(SCRIPT_MARKER)
