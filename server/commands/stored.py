"""What the model and script commands share about their stored objects: deleting one, listing them."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from backends.errors import AIError, wrong_arity
from server.resp_reply import OK
from server.store.atomic import DELETE_OBJECT

if TYPE_CHECKING:
    from server.connection import ClientConnection

log = logging.getLogger("redisai.commands")


async def delete_stored(client: ClientConnection, argv: list[bytes], marker: bytes, empty_msg: str) -> Any:
    """AI.MODELDEL / AI.SCRIPTDEL key: DEL restricted to the right kind of object; its stats go too."""
    if len(argv) != 2:
        raise wrong_arity(argv[0].decode(errors="replace"))
    if not await client.keyspace().run_script(DELETE_OBJECT, [argv[1]], [marker]):  # checked and deleted at once
        raise AIError(empty_msg)
    client.ctx.ai.stats.pop(argv[1], None)
    client.ctx.metrics.forget(argv[1])
    return OK


def scan_stored(client: ClientConnection, argv: list[bytes], kind: str) -> Any:
    """AI._MODELSCAN / AI._SCRIPTSCAN: [key, tag] of every object of ``kind`` stored through this server
    (RedisAI lists its process-wide stats registry the same way)."""
    if len(argv) != 1:
        raise wrong_arity(argv[0].decode(errors="replace"))
    log.warning("%s is experimental", argv[0].decode(errors="replace").upper())
    return [[s.key, s.tag] for s in client.ctx.ai.stats.values() if s.kind == kind]
