"""AI.INFO: per-key run statistics of models and scripts (REDISAI-REFERENCE.md §2.14).

    AI.INFO <key> [RESETSTAT]

Records live in ``ServerContext.ai.stats`` by key name: registered (zeroed) when a model or script is
stored, updated after every run (``AIState.record``), removed by AI.MODELDEL / AI.SCRIPTDEL. A key removed
behind our back (DEL, UNLINK, expiry, overwrite, FLUSHALL, or through another client of the backing Redis)
is caught here: the record answers only while the key still holds a model/script in the caller's database.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from backends import errors as msgs
from backends.errors import AIError, raise_if_unavailable, wrong_arity
from backends.objects import MARKER_FIELD, MODEL_MARKER, SCRIPT_MARKER
from server.ai import RunStats
from server.resp_reply import OK
from server.store.keyspace import Keyspace

if TYPE_CHECKING:
    from server.connection import ClientConnection

_MARKERS: Mapping[str, bytes] = MappingProxyType({"MODEL": MODEL_MARKER, "SCRIPT": SCRIPT_MARKER})


async def cmd_aiinfo(client: ClientConnection, argv: list[bytes]) -> Any:
    """AI.INFO key [RESETSTAT]: the 18-element stats reply, or +OK after zeroing them. Any third argument other
    than RESETSTAT is ignored (quirk 20)."""
    if not 2 <= len(argv) <= 3:
        raise wrong_arity(argv[0].decode(errors="replace"))
    stats = client.ctx.ai.stats.get(argv[1])
    if stats is None or not await _still_stored(client.keyspace(), stats):
        raise AIError(msgs.INFO_NO_RUN_INFO_MSG)
    if len(argv) == 3 and argv[2].upper() == b"RESETSTAT":
        reset_stats(stats)
        return OK
    return info_reply(stats)


async def _still_stored(keyspace: Keyspace, stats: RunStats) -> bool:
    marker = await keyspace.pipeline([(b"HGET", stats.key, MARKER_FIELD)])
    raise_if_unavailable(marker[0])
    return bool(marker[0] == _MARKERS.get(stats.kind))


def reset_stats(stats: RunStats) -> None:
    stats.duration_us = stats.samples = stats.calls = stats.errors = 0


def info_reply(stats: RunStats) -> list[Any]:
    """``key type backend device tag duration samples calls errors`` as a flat labelled array; scripts report
    samples as -1."""
    samples = -1 if stats.kind == "SCRIPT" else stats.samples
    return ["key", stats.key, "type", stats.kind, "backend", stats.backend, "device", stats.device,
            "tag", stats.tag, "duration", stats.duration_us, "samples", samples, "calls", stats.calls,
            "errors", stats.errors]
